"""llama.cpp's numeric path noise on the running machine: how far a row's two best logits move
between decoding an answer one token at a time (plain decoding) and in verify batches
(:func:`path_noise`), and the top-2 gap a fresh prefill gives at a position (:func:`fresh_gap`).
Greedy speculative output may part from plain output only where that gap is under twice the
noise (docs/exactness.md); the tests and ``benchmarks/sliding_window_noise.py`` use both."""

from __future__ import annotations

import numpy as np

VERIFY_BATCH = 5  # draft_max 4, as the greedy-equality tests use: the target decodes 5 a round


def path_noise(model, prompt_tokens, answer_tokens, batch: int = VERIFY_BATCH) -> float:
    """The largest change of a row's two best logits (the ones greedy decoding chooses between,
    in either path) between decoding ``answer_tokens`` one at a time and in batches of
    ``batch``, after the same prompt (the far tail of the vocabulary moves more, but never
    decides a token)."""
    engine = model.target
    prompt_tokens = list(prompt_tokens)
    held = engine.reuse_prefix(prompt_tokens)
    if held < len(prompt_tokens):
        engine.decode(prompt_tokens[held:])
    one = np.stack([engine.decode([t], [0])[0] for t in answer_tokens])
    engine.trim(len(prompt_tokens))
    chunks = [answer_tokens[i : i + batch] for i in range(0, len(answer_tokens), batch)]
    batched = np.concatenate([engine.decode(c, range(len(c))) for c in chunks])
    rows = np.arange(len(answer_tokens))[:, None]
    best = np.concatenate(
        [np.argsort(one, axis=1)[:, -2:], np.argsort(batched, axis=1)[:, -2:]], axis=1
    )
    return float(np.abs(one[rows, best] - batched[rows, best]).max())


def fresh_gap(model, prompt_tokens, answer_tokens, at: int) -> float:
    """The top-2 logit gap at answer position ``at`` after a fresh batched prefill of the prompt
    and the answer before it."""
    engine = model.target
    engine.trim(0)
    context = list(prompt_tokens) + list(answer_tokens[:at])
    top = np.sort(engine.decode(context, [len(context) - 1])[0])[-2:]
    return float(top[1] - top[0])
