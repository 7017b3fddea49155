"""``localspec bench rollback --smoke``: both ways back measured on the tiny LFM2, the table
written."""

import json

from support.bench import bench_args

from localspec.bench import rollback


def test_the_smoke_run_measures_snapshots_and_a_saved_state(tmp_path):
    args = bench_args("rollback", "--smoke", "--out", str(tmp_path))
    rollback.check(args)
    assert rollback.main(args) == 0
    body = json.loads((tmp_path / "rollback-smoke.json").read_text())
    snapshots, saved = body["ways"]["snapshots"], body["ways"]["saved state"]
    assert snapshots["n_rs_seq"] == 16 and saved["n_rs_seq"] == 0
    assert snapshots["ways"]["snapshot"] == saved["ways"]["checkpoint"] == 4  # one per round
    assert saved["rollback_ms"] > snapshots["rollback_ms"] > 0  # restore and decode again
    table = (tmp_path / "rollback-smoke.md").read_text()
    assert "| snapshots | 16 |" in table and "| saved state | 0 |" in table
