"""What the machine taught, kept between loads: costs loaded instead of measured, priors
carried over, doctor's listing and --recalibrate; and plain decoding where nothing pays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest
from support.fakes import FakeDrafter

from localspec.api import SpeculativeModel
from localspec.decoding.drafters import Draft
from localspec.decoding.policy import (
    BATCH_SIZES,
    AdaptivePolicy,
    CostAverage,
    CostModel,
    batch_sizes,
)
from localspec.decoding.policy.costs import (
    fastest_of_two,
    implausible_costs,
    stored_c1_holds,
    warm_up,
)
from localspec.decoding.policy.learned import LearnedState, kind_name
from localspec.decoding.rounds import RoundOutcome
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.machine_store import MachineStore


def _costs(model) -> dict:
    costs = model.slots.slots[0].costs
    return {
        "verify": {b: a.value for b, a in costs.verify.items()},
        "draft": costs.draft[model.drafter.name].value,
        "prefill": costs.prefill[model.drafter.name],
    }


@pytest.fixture
def count_measures(monkeypatch):
    calls = []
    original = CostModel.measure

    def counting(self, target, engines, token=100, sizes=BATCH_SIZES):
        calls.append((tuple(sizes), len(engines)))
        return original(self, target, engines, token, sizes)

    monkeypatch.setattr(CostModel, "measure", counting)
    return calls


def test_a_second_load_with_the_same_key_measures_nothing_and_has_the_first_loads_costs(
    target_gguf, monkeypatch
):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512) as first:
        measured = _costs(first)
    assert set(measured["verify"]) >= set(BATCH_SIZES)

    def no_measuring(*args, **kwargs):
        raise AssertionError("costs measured although the store has them")

    monkeypatch.setattr(CostModel, "measure", no_measuring)
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512) as second:
        assert _costs(second) == measured  # JSON keeps floats exactly
        second.generate("a b c", max_tokens=4, temperature=0.0)  # runs on the loaded costs


@contextmanager
def _every_core_busy():
    """Other processes spinning on every core, as while a user builds something."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _quietest_costs(gguf, readings: int = 10) -> dict:
    """Each batch size's fastest of many warm readings: this machine's costs without a
    stall from whatever else runs now (the store as a quiet machine would have written it)."""
    engine = Engine(gguf, EngineConfig(n_ctx=512))
    try:
        warm_up(engine, 100)
        return {
            str(b): min(fastest_of_two(engine, [100] * b, range(b)) for _ in range(readings))
            for b in BATCH_SIZES
        }
    finally:
        engine.close()


def test_a_second_load_on_a_busy_machine_keeps_the_stored_costs(target_gguf, count_measures):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512):
        pass
    stored = MachineStore().entries()[0]["record"]["costs"]["verify"]
    assert (
        len(count_measures) == 1 and implausible_costs(stored, None) is None
    )  # no stall written down
    quietest = _quietest_costs(target_gguf)
    _rewrite_stored_verify(lambda v: quietest)
    _rewrite_stored_draft(lambda d: {**d, "per_token": quietest["1"]})  # the same GGUF
    with _every_core_busy():
        for _ in range(3):
            with SpeculativeModel(target_gguf, target_gguf, n_ctx=512) as model:
                model.generate("a b c", max_tokens=4, temperature=0.0)
    assert len(count_measures) == 1


@pytest.mark.parametrize(
    ("stored_ms", "now_ms", "holds"),
    [
        (30.0, 30.0, True),
        (30.0, 95.0, True),  # slower now: busy now, the stored costs stay
        (30.0, 55.0, True),
        (55.0, 30.0, True),  # within STORED_C1_DRIFT
        (95.0, 30.0, False),  # faster now: the store was written on a busy machine
        (1.1, 0.2, True),  # within a clock's noise
        (30.0, None, True),  # no reading now
    ],
)
def test_only_a_machine_clearly_faster_than_its_store_measures_again(stored_ms, now_ms, holds):
    now_s = None if now_ms is None else now_ms / 1000
    assert stored_c1_holds(stored_ms / 1000, now_s) is holds


def test_another_gguf_starts_fresh_and_a_corrupt_store_still_loads(
    target_gguf, other_gguf, count_measures
):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512):
        pass
    assert len(count_measures) == 1
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512):
        pass
    assert len(count_measures) == 2  # another draft GGUF: another key, measured again
    store = MachineStore()
    records = [p for p in store.directory.glob("*.json") if p.name != "digests.json"]
    assert len(records) == 2
    for path in records:
        path.write_text("{not json")
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512):
        pass
    assert len(count_measures) == 3  # ignored, measured, written again
    assert len(store.entries()) == 1


def test_a_generation_that_ends_writes_what_it_learnt(target_gguf, monkeypatch):
    from localspec.decoding.policy import learned

    monkeypatch.setattr(learned, "SAVE_EVERY_S", 0.0)
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512) as model:
        model.generate("one two three four", max_tokens=24, temperature=0.0, strategy="auto")
        verify = {
            str(b): a.value for b, a in model.slots.slots[0].costs.verify.items() if a.weight > 0
        }
        (entry,) = MachineStore().entries()  # written when the generation ended, before close
        assert entry["record"]["costs"]["verify"] == pytest.approx(verify)
        assert entry["record"]["pair"] == {"target": target_gguf.name, "draft": target_gguf.name}


def _state(target_gguf, other_gguf) -> LearnedState:
    return LearnedState(target_gguf, other_gguf, threads=2, offload=False)


def _cheap_machine(policy):
    """A verify of 17 costs little more than one, a draft token 1 ms: the draft model pays
    from an acceptance of about 0.1 on."""
    policy.costs.verify.update(
        {b: CostAverage(0.030 + 0.0002 * (b - 1), weight=1.0) for b in BATCH_SIZES}
    )
    policy.costs.draft[policy.drafters[0].name] = CostAverage(0.001, weight=1.0)
    policy.costs.prefill[policy.drafters[0].name] = 0.0


def _steep_machine(policy):
    """c(b) grows 20 ms a token from 30 ms: the draft model pays only when almost always right."""
    policy.costs.verify.update(
        {b: CostAverage(0.030 + 0.020 * (b - 1), weight=1.0) for b in BATCH_SIZES}
    )
    policy.costs.draft[policy.drafters[0].name] = CostAverage(0.002, weight=1.0)
    policy.costs.prefill[policy.drafters[0].name] = 0.0


def _taught(target_gguf, other_gguf, accepted: bool) -> None:
    """A first process: the draft model is always (or never) right for 60 rounds, then stored."""
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], caps={d.name: 8})
    _cheap_machine(policy)
    for _ in range(60):
        policy.observe(
            RoundOutcome(
                0.031, 5, d, Draft([0] * 4), n_accepted=4 if accepted else 0, draft_s=0.004
            )
        )
    assert _state(target_gguf, other_gguf).save(
        policy.costs, [(kind_name("auto", True, False, False), policy)], True
    )


def _first_choice(target_gguf, other_gguf, machine, seeded: bool):
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d], caps={d.name: 8})
    machine(policy)
    if seeded:
        _state(target_gguf, other_gguf).seed(policy, "auto|greedy")
    policy.new_generation()
    chosen, k = policy.plan(8, n_context=50)
    return chosen is d and k > 0


def test_a_draft_model_never_right_before_is_not_bet_on_in_a_fresh_process(target_gguf, other_gguf):
    _taught(target_gguf, other_gguf, accepted=False)
    assert _first_choice(
        target_gguf, other_gguf, _cheap_machine, seeded=False
    )  # the fixed prior bets
    assert not _first_choice(target_gguf, other_gguf, _cheap_machine, seeded=True)


def test_a_draft_model_always_right_before_is_bet_on_where_the_fixed_prior_would_not(
    target_gguf, other_gguf
):
    _taught(target_gguf, other_gguf, accepted=True)
    assert not _first_choice(target_gguf, other_gguf, _steep_machine, seeded=False)
    assert _first_choice(target_gguf, other_gguf, _steep_machine, seeded=True)


def test_two_processes_writing_merge_newest_wins_per_field(target_gguf, other_gguf):
    a, b = _state(target_gguf, other_gguf), _state(target_gguf, other_gguf)
    da, db = FakeDrafter("draft-model", 0.7), FakeDrafter("draft-model", 0.7)
    pa, pb = AdaptivePolicy([da]), AdaptivePolicy([db])
    pa.costs.verify.update({1: CostAverage(0.03, 1.0), 17: CostAverage(0.2, 1.0)})
    pb.costs.verify.update({1: CostAverage(0.04, 1.0), 33: CostAverage(0.4, 1.0)})
    a.save(pa.costs, [("auto|greedy", pa)], force=True)
    b.save(pb.costs, [("auto|sampled", pb)], force=True)
    (entry,) = MachineStore().entries()
    assert entry["record"]["costs"]["verify"] == {"1": 0.04, "17": 0.2, "33": 0.4}


def test_a_save_within_a_few_seconds_of_the_last_is_skipped(target_gguf, other_gguf):
    state, d = _state(target_gguf, other_gguf), FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy([d])
    assert state.save(policy.costs, [("auto|greedy", policy)], force=True)
    assert not state.save(policy.costs, [("auto|greedy", policy)])


def test_doctor_lists_what_is_stored_and_recalibrate_forgets_it(target_gguf, other_gguf, capsys):
    from localspec.cli.commands import main
    from localspec.llama.report import format_learned, learned_report

    _taught(target_gguf, other_gguf, accepted=False)
    learned = learned_report()
    (entry,) = learned["entries"]
    assert (entry["target"], entry["draft"], entry["threads"]) == (
        target_gguf.name,
        other_gguf.name,
        2,
    )
    assert entry["c1_s"] == pytest.approx(0.030, rel=0.1) and entry["c17_s"] == pytest.approx(
        0.0332, rel=0.1
    )
    assert entry["acceptance"]["auto|greedy"]["draft-model"] == 0.0
    text = "\n".join(format_learned(learned))
    assert target_gguf.name in text and "c(17)" in text and "draft-model 0.00" in text
    json.dumps(learned)  # doctor --json prints it
    assert main(["doctor", "--recalibrate"]) == 0
    assert "forgot 1" in capsys.readouterr().out
    assert learned_report()["entries"] == []


def test_a_batch_of_fresh_sequences_where_drafting_cannot_pay_runs_plain():
    """A verify costs its length (c(b) = b c(1)): no draft, however likely, beats plain,
    alone or sharing the verify with three other sequences."""
    verify = {b: CostAverage(0.03 * b, weight=1.0) for b in batch_sizes(parallel=4)}
    costs = CostModel(verify=verify)
    policies = []
    for _ in range(4):  # one per slot, the costs shared as SpeculativeModel shares them
        model, lookup = (
            FakeDrafter("draft-model", 0.7),
            FakeDrafter("prompt-lookup", 0.3, free=True),
        )
        p = AdaptivePolicy([model, lookup], costs=costs)
        costs.draft.update(
            {model.name: CostAverage(0.001, weight=1.0), lookup.name: CostAverage(2e-5, weight=1.0)}
        )
        p.new_generation()
        policies.append((p, lookup))
    sure = Draft([1] * 8, confidence=[0.99] * 8)
    for p, lookup in policies:
        # alone; beside fresh sequences verifying one token each; beside drafts and a prompt being read
        for others in ((0, 0), (1, 1), (3, 3), (12, 3), (131, 3)):
            assert p.plan(16, {lookup.name: sure}, n_context=100, others=others) == (None, 0)


def test_beside_a_prompt_being_read_a_draft_pays_only_for_its_own_rows():
    """Where a verify costs the same at any size (a GPU), a sure draft beside another
    sequence's 128-token prompt chunk still pays; where it costs its length, it does not."""
    model, lookup = FakeDrafter("draft-model", 0.7), FakeDrafter("prompt-lookup", 0.3, free=True)
    sure = Draft([1] * 8, confidence=[0.99] * 8)
    for cost, drafts in ((lambda b: 0.03, True), (lambda b: 0.03 * b, False)):
        verify = {b: CostAverage(cost(b), weight=1.0) for b in (*batch_sizes(parallel=4), 129, 257)}
        p = AdaptivePolicy([model, lookup], costs=CostModel(verify=verify))
        p.costs.draft.update(
            {model.name: CostAverage(0.03, weight=1.0), lookup.name: CostAverage(2e-5, weight=1.0)}
        )
        p.new_generation()
        chosen, k = p.plan(16, {lookup.name: sure}, n_context=100, others=(129, 2))
        assert (chosen is lookup and k > 0) == drafts


def test_a_draft_model_not_expected_to_draft_reads_no_prompt(target_gguf, other_gguf):
    """A draft model that a learnt prior says never pays is not chosen, so it decodes nothing,
    prompt included (when one is expected to pay, it reads the prompt with the target:
    tests/test_catch_up.py)."""
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512) as model:
        policy = model._policy(model.default_draft, greedy=True, predicted=False)
        policy.start_from({"draft-model": {"successes": 0.0, "trials": 1000.0}})
        # a second a token: the synthetic pair's microsecond decodes, stalled on a busy
        # machine, could otherwise make a near-free one-token bet win by a hair
        policy.costs.draft[model.drafter.name] = CostAverage(1.0, weight=1.0)
        assert policy.prefill_drafters(7, 15) == []
        before = model.draft_engine.decode_s
        result = model.generate("one two three four five six seven", max_tokens=16, temperature=0.0)
        assert result.stats.generated_tokens == 16
        assert model.draft_engine.decode_s == before
        assert result.stats.drafted_by_drafter.get("draft-model", 0) == 0


def test_a_bigger_batch_measured_cheaper_does_not_make_a_useless_draft_look_free():
    """Noise on a fast machine can measure c(2) < c(1); a draft nobody accepts must still
    lose to plain (no batch is priced below c(1))."""
    d = FakeDrafter("draft-model", 0.7)
    verify = {1: 0.030, 2: 0.020, 3: 0.031, 5: 0.033, 9: 0.036, 17: 0.040}
    policy = AdaptivePolicy(
        [d], costs=CostModel(verify={b: CostAverage(c, weight=1.0) for b, c in verify.items()})
    )
    policy.costs.draft[d.name] = CostAverage(0.001, weight=1.0)
    policy.costs.prefill[d.name] = 0.0
    policy.start_from({"draft-model": {"successes": 0.0, "trials": 1000.0}})
    policy.new_generation()
    assert policy.plan(8) == (None, 0)
    assert policy.costs.verify_s(2) == pytest.approx(0.030)


def _rewrite_stored(part: str, change) -> None:
    """Rewrite every stored record's ``part`` of its costs with ``change(dict) -> dict``."""
    for path in MachineStore().directory.glob("*.json"):
        data = json.loads(path.read_text())
        if "record" in data:
            data["record"]["costs"][part] = change(data["record"]["costs"][part])
            path.write_text(json.dumps(data))


def _rewrite_stored_verify(change) -> None:
    _rewrite_stored("verify", change)


def _rewrite_stored_draft(change) -> None:
    _rewrite_stored("draft", change)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # a stall written down: no batch of 17 costs 150 single decodes
        (lambda v: {**v, "1": 0.03, "17": 4.3}, "c(17) = 4300.0 ms beside c(1) = 30.0 ms"),
        # a plausible curve, but not this machine's now (its c(1) is microseconds)
        (lambda v: {b: 0.05 for b in v}, "c(1) is"),
    ],
    ids=["implausible", "another-machine"],
)
def test_stored_costs_that_do_not_hold_are_measured_again_with_one_log_line(
    target_gguf, count_measures, caplog, change, said
):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512):
        pass
    _rewrite_stored_verify(change)
    with caplog.at_level("WARNING", logger="localspec.store"):
        with SpeculativeModel(target_gguf, target_gguf, n_ctx=512) as model:
            measured = _costs(model)["verify"]
    assert len(count_measures) == 2
    assert measured[17] < 1.0
    lines = [r.getMessage() for r in caplog.records if "do not hold" in r.getMessage()]
    assert len(lines) == 1 and said in lines[0], lines


def test_a_first_reading_of_a_new_batch_size_is_clipped_against_the_estimate():
    """A stalled verify at a batch size never seen before is not taken whole (else that size
    would look dear for good and never be verified again to correct it)."""
    d = FakeDrafter("draft-model", 0.7)
    policy = AdaptivePolicy(
        [d],
        costs=CostModel(
            verify={1: CostAverage(0.03, weight=1.0), 17: CostAverage(0.06, weight=1.0)}
        ),
    )
    estimate = policy.costs.verify_s(9)
    policy.observe(RoundOutcome(4.0, 9, d, Draft([0] * 8), n_accepted=8, draft_s=0.008))
    assert estimate < policy.costs.verify[9].value <= 3 * estimate
