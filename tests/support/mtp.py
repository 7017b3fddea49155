"""What the MTP drafter tests share: a greedy pick for a head's :meth:`draft`, and the drafts of
a fresh MTP context compared round by round with a recorded llama.cpp ``draft-mtp`` trace."""

from __future__ import annotations

import numpy as np

from localspec.api import SpeculativeModel
from localspec.llama.engine import Engine, EngineConfig


def greedy_pick(logits):
    return int(np.argmax(logits)), 1.0, False


def assert_drafts_are_the_traces(
    target, trace: dict, config: EngineConfig, k: int | None = None, ask: int | None = None
) -> None:
    """The target's greedy tokens are the trace's, and at every round a fresh engine of
    ``config`` fed the prompt and the tokens before it drafts what llama.cpp drafted, asked
    for ``ask`` tokens (default: as many as the round's draft).  With ``k``, only the rounds
    that drafted ``k`` tokens (not those cut short as the answer's end nears)."""
    rounds = [r for r in trace["rounds"] if k is None or len(r["draft"]) == k]
    with SpeculativeModel(target, None, n_ctx=config.n_ctx) as model:
        plain = model.generate(trace["prompt"], max_tokens=len(rounds), draft_max=0)
        prompt = model.target.tokenize(trace["prompt"])
    assert plain.tokens[: len(rounds)] == [r["target_token"] for r in rounds]
    context = prompt + plain.tokens
    fresh = Engine(target, config)
    try:
        for i, r in enumerate(rounds):  # llama.cpp drafts first after the prompt's last token
            last = len(prompt) - 1 + i
            fresh.trim(0)
            fresh.decode(context[:last], [last - 1])
            asked = len(r["draft"]) if ask is None else ask
            assert fresh.mtp.draft(context[last], asked, greedy_pick)[0] == r["draft"], i
    finally:
        fresh.close()
