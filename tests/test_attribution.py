"""Where a generation's time went against plain decoding: each drafting round judged by the
plain step, the draft model's prompt read and catch-up, the policy's own time, in the stats,
the CLI's line and the server's ``timings``."""

from __future__ import annotations

import pytest

from localspec.api import SpeculativeModel
from localspec.decoding.attribution import TimeAccount


def test_a_round_is_won_or_lost_against_its_tokens_plain_steps():
    account = TimeAccount()
    account.add_round(4, 4, 3, draft_s=0.01, verify_s=0.04, plain_s=0.03)
    account.add_round(1, 5, 0, draft_s=0.01, verify_s=0.035, plain_s=0.03)
    account.add_round(1, 0, 0, draft_s=0.0, verify_s=0.03, plain_s=0.03)  # plain
    account.add_round(2, 2, 1, draft_s=0.01, verify_s=0.03, plain_s=None)
    assert (account.won_rounds, account.lost_rounds, account.unjudged) == (1, 1, 1)
    assert account.won_s == pytest.approx(4 * 0.03 - 0.05)
    assert account.lost_s == pytest.approx(0.045 - 0.03)
    account.add_round(1, 0, 0, draft_s=0.002, verify_s=0.03, plain_s=0.03)  # a draft cut to none
    assert account.lost_rounds == 2 and account.lost_s == pytest.approx(0.017)
    account.lost_s = 0.015
    assert account.rejected_tokens == 1 + 5 + 1
    account.catch_up_s, account.policy_s = 0.2, 0.005
    assert account.net_s == pytest.approx(0.07 - 0.015 - 0.205)
    assert account.in_ms()["won_ms"] == pytest.approx(70.0)
    assert "net -0.15 s" in account.summary()


def test_a_round_in_a_shared_decode_is_judged_against_the_plain_batch():
    account = TimeAccount()
    # four sequences, this one drafting 3 (Xeon's c(4) 0.116 s, c(7) 0.208 s): its accepted
    # token is worth a plain decode of the four, the rows it added cost each of them their time
    share = 1 - 0.116 / 0.208
    account.add_round(2, 3, 1, 0.001, 0.208, plain_s=0.116, sequences=4, rows_share=share)
    assert account.lost_s == pytest.approx(4 * (0.208 - 0.116) + 0.001 - 0.116)
    # three sequences, one token drafted and accepted: the decode of four is cheaper than three
    account.add_round(3, 1, 1, 0.0, 0.116, plain_s=0.139, sequences=3, rows_share=0.0)
    assert account.won_s == pytest.approx(2 * 0.139)
    assert account.step_s == 0.139


def _measured(model):
    """The costs measured on this machine (as the first adaptive answer does)."""
    model.generate("one", max_tokens=2, temperature=0.0)
    assert model.slots.slots[0].costs.measured


def test_a_draft_model_always_rejected_shows_its_rounds_lost(target_gguf, other_gguf):
    """Every round drafts four tokens that are rejected: four draft decodes and a five-token
    verify for one token, against one plain step."""
    with SpeculativeModel(target_gguf, other_gguf, n_ctx=512) as model:
        _measured(model)
        result = model.generate(
            "one two three", max_tokens=24, temperature=0.0, strategy="draft-model", draft_max=4
        )
        s, account = result.stats, result.stats.against_plain
        assert account.step_s == pytest.approx(model.slots.slots[0].costs.verify_s(1))
        assert account.rejected_tokens == s.drafted_tokens - s.accepted_tokens > 0
        assert account.lost_rounds > account.won_rounds and account.lost_s > account.won_s
        assert account.draft_prompt_s > 0  # a fixed draft model reads the prompt up front
        assert account.won_rounds + account.lost_rounds + account.unjudged == s.rounds - (
            s.rounds_by_drafter.get("plain", 0)
        )
        assert "against plain: won" in s.summary()
        assert s.to_dict()["against_plain"]["net_s"] == pytest.approx(account.net_s)
