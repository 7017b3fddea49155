"""Drafts in a decode shared by several sequences: each is verified only as far as it pays in
that decode, for every sequence waiting on it (:meth:`RoundPricing.kept_drafts`,
:class:`Batcher`), priced on costs that may fall where the CPU's kernels take rows four at a
time."""

import threading

import numpy as np
import pytest
from support.fakes import FakeDrafter

from localspec.api import SpeculativeModel
from localspec.decoding.policy import AdaptivePolicy, RoundPricing
from localspec.decoding.policy.costs import CostAverage, CostModel
from localspec.decoding.scheduler import Batcher

# the default target's decode by batch size on a 2-core Xeon, quiet (2026-12-07), seconds:
# four rows cost less than three (the repacked kernels take rows four at a time)
XEON = {1: 0.0746, 2: 0.106, 3: 0.139, 4: 0.116, 5: 0.152, 6: 0.178, 7: 0.208, 8: 0.216}


def test_a_batch_of_four_is_priced_as_measured_not_as_dear_as_three():
    pricing = RoundPricing(XEON, 0.03)
    assert pricing.verify_s(4) == pytest.approx(0.116)
    assert pricing.verify_s(3) == pytest.approx(0.139)


def test_no_batch_is_priced_below_one_step():
    pricing = RoundPricing({1: 0.075, 2: 0.070, 5: 0.150}, 0.03)
    assert pricing.verify_s(2) == pytest.approx(0.075)  # a reading under c(1) is noise


def test_four_plain_sequences_keep_no_draft_that_would_make_the_decode_a_batch_of_five():
    # alone, a 4-token draft at 0.9 each pays; beside three plain sequences, 4 tokens per
    # 0.116 s plain against (4 + 0.9 + 0.81 + ...) per c(5..8) never does
    kept = RoundPricing(XEON, 0.03).kept_drafts(4, 4, [[0.9, 0.9, 0.9, 0.9]])
    assert kept == [0]
    assert RoundPricing(XEON, 0.03).kept_drafts(1, 1, [[0.9, 0.9, 0.9]]) == [3]


def test_two_drafts_that_pay_alone_are_cut_so_both_sequences_gain():
    pricing = RoundPricing(XEON, 0.03)
    sure, doubtful = [0.95, 0.95, 0.95], [0.6, 0.5]
    assert pricing.kept_drafts(1, 1, [sure]) == [3]
    assert pricing.kept_drafts(1, 1, [doubtful]) == [1]
    # together, one token of each makes a decode of four (0.116 s, cheaper than three): both
    # sequences gain; the sure draft whole would have the other wait c(5..6) for its own gain
    assert pricing.kept_drafts(2, 2, [sure, doubtful]) == [1, 1]


def test_one_sure_draft_is_not_kept_whole_at_the_others_cost():
    pricing = RoundPricing(XEON, 0.03)
    # tokens per second alone would keep all 6 (7.8 tokens per c(8) = 0.216 s, 36 t/s,
    # against 34 t/s keeping 2, a decode of four); the plain sequence would then wait 0.216 s
    # for its token instead of 0.116 s
    assert pricing.kept_drafts(2, 2, [[0.99] * 6]) == [2]


def test_a_prompt_chunk_in_the_decode_makes_a_draft_cheap_to_keep():
    measured = {1: 0.075, 9: 0.27, 17: 0.34, 33: 0.52, 65: 0.84, 129: 1.4}
    kept = RoundPricing(measured, 0.03).kept_drafts(129, 2, [[0.8, 0.7, 0.6]])
    assert kept == [3]


def test_beside_three_plain_sequences_no_draft_could_pay_so_no_drafter_is_asked():
    costs = CostModel(verify={b: CostAverage(c, weight=1.0) for b, c in XEON.items()})
    policy = AdaptivePolicy([FakeDrafter("suffix", 0.9, free=True)], costs=costs)
    assert policy.may_pay(16) and policy.may_pay(16, others=(1, 1))
    assert not policy.may_pay(16, others=(3, 3))  # a decode of four plain rows: 0.116 s
    assert not policy.may_pay(0)


class RecordingEngine:
    """The engine surface a :class:`Batcher` decodes through, recording each decode's parts
    and returning, per part, one row per logits row asked (its row index in every cell)."""

    n_batch = 512

    def __init__(self):
        self.decode_s = 0.0
        self.parts = []

    def decode_batch(self, parts, copy=True):
        self.parts.append([(seq, list(tokens), list(rows)) for seq, tokens, rows in parts])
        self.decode_s += 0.1
        return [np.array([[r] * 4 for r in rows], dtype=np.float32) for _, _, rows in parts]


class View:
    def __init__(self, seq):
        self.seq, self.decode_s, self.wait_s, self.last_batch_tokens = seq, 0.0, 0.0, 0


def test_the_batcher_decodes_only_the_kept_part_of_each_draft_and_says_so_by_its_rows():
    engine = RecordingEngine()
    batcher = Batcher(engine, grace_s=0.0, pricing=lambda: RoundPricing(XEON, 0.03))
    out = {}
    gate = threading.Barrier(2)

    def verify(seq, tokens, chances):
        with batcher.round(seq):
            gate.wait()
            out[seq] = batcher.decode(View(seq), tokens, range(len(tokens)), chances)

    threads = [
        threading.Thread(target=verify, args=(0, [10, 11, 12, 13], [0.95, 0.95, 0.95])),
        threading.Thread(target=verify, args=(1, [20, 21, 22], [0.6, 0.5])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(engine.parts) == 1  # one shared decode
    assert sorted(engine.parts[0]) == [(0, [10, 11], [0, 1]), (1, [20, 21], [0, 1])]
    assert out[0].shape == (2, 4) and out[1].shape == (2, 4)


def test_chances_that_do_not_match_the_draft_are_refused():
    batcher = Batcher(RecordingEngine(), grace_s=0.0)
    with pytest.raises(ValueError, match="2 chances for a draft of 3 tokens"):
        batcher.decode(View(0), [1, 2, 3, 4], range(4), [0.5, 0.5])


def test_drafts_cut_in_shared_decodes_keep_every_answer_the_targets_own(
    target_gguf, other_gguf, monkeypatch
):
    """Greedy, two sequences at once, every draft cut to its first token by the decode:
    each answer equals plain decoding's (the synthetic pair's batches are exact here)."""
    monkeypatch.setattr(RoundPricing, "rate", lambda self, expected, extra_s, k: expected)
    cuts = []

    def first_token_only(self, fixed, sequences, chances):
        cuts.append([len(c) for c in chances])
        return [min(1, len(c)) for c in chances]

    monkeypatch.setattr(RoundPricing, "kept_drafts", first_token_only)
    prompts = ["one two three one two three one two", "alpha beta gamma alpha beta gamma"]
    with SpeculativeModel(target_gguf, None, n_ctx=1024, strategy="none") as plain:
        expected = [plain.generate(p, max_tokens=40, temperature=0).text for p in prompts]
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=2048, parallel=2) as model:
        texts = [None, None]
        stats = [None, None]

        def run(i):
            result = model.generate(prompts[i], max_tokens=40, temperature=0)
            texts[i], stats[i] = result.text, result.stats

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert texts == expected
    assert any(n > 1 for c in cuts for n in c)  # drafts longer than one token were cut
    assert all(s.drafted_tokens <= s.rounds for s in stats)  # one draft token a round at most
