"""Greedy equality as the tests check it: equal tokens, or a first difference where the plain
run's two best logits were closer than the path noise measured on this machine allows."""

import numpy as np

from localspec.bench.workloads import humaneval_tasks


def top2_gap_of_plain_step(model, prompt_tokens, plain_tokens, i):
    """Re-run plain step i exactly (same cache, batch of one) and return its top-2 gap."""
    engine = model.target
    engine.reuse_prefix(prompt_tokens + plain_tokens[: i - 1])
    logits = engine.decode([(prompt_tokens + plain_tokens)[len(prompt_tokens) + i - 1]], [0])[0]
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


def assert_same_greedy(model, messages, reference, other, tie_tolerance):
    """Equal tokens, or a first difference where the reference's top-2 logits were tied
    (closer than ``tie_tolerance``, measured on this machine)."""
    ref = model.target.tokenize(reference, add_special=False)
    oth = model.target.tokenize(other, add_special=False)
    diverge = next((i for i, (a, b) in enumerate(zip(ref, oth)) if a != b), None)
    if diverge is None:
        n = min(len(ref), len(oth))
        assert ref[:n] == oth[:n]
        return
    gap = top2_gap_of_plain_step(model, model.target.chat_tokens(messages), ref, diverge)
    assert gap < tie_tolerance, (diverge, gap, tie_tolerance)


def messages_for(i):
    task = humaneval_tasks(i + 1)[i]
    return [
        {
            "role": "user",
            "content": f"Complete this Python function.\n\n```python\n{task['prompt']}```",
        }
    ]
