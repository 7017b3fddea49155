"""Can this draft model draft for that target?  Decided from GGUF metadata alone.

The rules are llama.cpp's ``common_speculative_are_compatible`` (common/speculative.cpp):
same vocabulary type, same BOS/EOS when they are added, vocabulary sizes within
128 tokens, and identical token text for every shared id from 5 up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .gguf_info import GGUFInfo

MAX_VOCAB_DIFFERENCE = 128  # tokens, llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # ids below this (control tokens) may differ
_MAX_LISTED_MISMATCHES = 3


@dataclass
class Compatibility:
    """``compatible`` is True when ``reasons`` is empty; each reason is one plain sentence."""

    reasons: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return not self.reasons


def check_compatibility(target: GGUFInfo, draft: GGUFInfo) -> Compatibility:
    """Compare the vocabularies of two GGUF headers (no weights are read)."""
    result = Compatibility()
    reasons = result.reasons
    if target.vocab_type != draft.vocab_type:
        reasons.append(
            f"draft tokenizer type is {draft.vocab_type!r}, target {target.vocab_type!r}"
        )
    for name in ("bos", "eos"):
        t_add = bool(target.get(f"tokenizer.ggml.add_{name}_token", name == "bos" and target.vocab_type == "llama"))
        d_add = bool(draft.get(f"tokenizer.ggml.add_{name}_token", name == "bos" and draft.vocab_type == "llama"))
        if t_add != d_add:
            reasons.append(f"the target {'adds' if t_add else 'does not add'} {name.upper()} and the draft "
                           f"{'does' if d_add else 'does not'}")
        elif t_add:
            t_id, d_id = target.get(f"tokenizer.ggml.{name}_token_id"), draft.get(f"tokenizer.ggml.{name}_token_id")
            if t_id != d_id:
                reasons.append(f"draft {name.upper()} id is {d_id}, target {t_id}")

    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_DIFFERENCE:
        reasons.append(
            f"draft vocabulary has {draft.n_vocab} tokens, target {target.n_vocab} "
            f"(a difference of {diff}; at most {MAX_VOCAB_DIFFERENCE} is allowed)"
        )
        return result

    mismatched = [
        i for i in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab))
        if target.tokens[i] != draft.tokens[i]
    ]
    if mismatched:
        shown = ", ".join(
            f"{i}: {draft.tokens[i]!r} vs {target.tokens[i]!r}" for i in mismatched[:_MAX_LISTED_MISMATCHES]
        )
        reasons.append(f"{len(mismatched)} token text(s) differ (draft vs target, first ones: {shown})")
    return result
