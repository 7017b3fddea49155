"""``localspec bench rollback --smoke``: both ways back measured on the tiny LFM2 and the tiny
Qwen3.5, the MTP block's step and the policy's choice from those costs, the table written."""

import json

from support.bench import bench_args

from localspec.bench import rollback


def test_the_smoke_run_measures_snapshots_a_saved_state_and_the_mtp_step(tmp_path):
    args = bench_args("rollback", "--smoke", "--out", str(tmp_path))
    rollback.check(args)
    assert rollback.main(args) == 0
    body = json.loads((tmp_path / "rollback-smoke.json").read_text())
    for architecture in ("lfm2", "qwen35"):
        ways = body["models"][architecture]["ways"]
        snapshots, saved = ways["snapshots"], ways["saved state"]
        assert snapshots["n_rs_seq"] == 16 and saved["n_rs_seq"] == 0, architecture
        assert snapshots["ways"]["snapshot"] == saved["ways"]["checkpoint"] == 4  # one a round
        assert saved["rollback_ms"] > snapshots["rollback_ms"] > 0  # restore, decode again
    qwen35 = body["models"]["qwen35"]["ways"]["snapshots"]
    assert qwen35["mtp_ms"] > 0 and "mtp_ms" not in body["models"]["lfm2"]["ways"]["snapshots"]
    choice = qwen35["policy_choice"]
    assert list(choice) == [str(a) for a in rollback.ACCEPTANCES]
    assert all(0 <= c["k"] <= rollback.DRAFT and c["speed"] >= 1.0 for c in choice.values())
    table = (tmp_path / "rollback-smoke.md").read_text()
    assert (
        "| tiny lfm2 | snapshots | 16 |" in table and "| tiny qwen35 | saved state | 0 |" in table
    )
    assert "acceptance 0.9" in table


def test_the_policys_choice_drafts_more_as_acceptance_rises_and_never_loses():
    costs = {"step_ms": 40.0, "verify_ms": 60.0, "rollback_ms": 0.1, "mtp_ms": 4.0}
    choice = rollback.policy_choice(costs)
    ks = [choice[str(a)]["k"] for a in rollback.ACCEPTANCES]
    assert ks == sorted(ks) and ks[-1] == rollback.DRAFT
    assert all(c["speed"] >= 1.0 for c in choice.values())
    slow = rollback.policy_choice({**costs, "verify_ms": 200.0, "mtp_ms": 40.0})
    assert all(c == {"k": 0, "speed": 1.0} for c in slow.values())  # nothing pays: plain
