"""Can this draft model draft for that target?  Decided from GGUF metadata alone.

The vocabulary rules are llama.cpp's ``common_speculative_are_compatible``
(common/speculative.cpp): same vocabulary type, same BOS/EOS when they are added,
vocabulary sizes within 128 tokens, and identical token text for every shared id
from 5 up.  Two family rules come on top, as LM Studio applies them: the same
``general.architecture``, and a draft no larger than the target (``general.size_label``,
else the tensor element count).  A different ``general.basename`` (Qwen2.5 drafting
for Qwen2.5-Coder) is only a note: the vocabulary decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.models.architectures import ASSISTANTS
from localspec.models.catalog import format_params
from localspec.models.gguf_info import GGUFInfo

MAX_VOCAB_DIFFERENCE = 128  # tokens, llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # ids below this (control tokens) may differ
_MAX_LISTED_MISMATCHES = 3


@dataclass
class Compatibility:
    """``compatible`` is True when ``reasons`` is empty; each reason is one plain
    sentence.  ``notes`` are observations that do not block drafting."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return not self.reasons


def check_compatibility(
    target: GGUFInfo, draft: GGUFInfo, *, require_smaller: bool = False
) -> Compatibility:
    """Compare two GGUF headers (no weights are read): family first, then vocabulary.

    A draft as large as the target is a note (it works, it cannot speed anything up),
    or a reason with ``require_smaller`` (for choosing among candidates).  The
    comparison takes 12 ms for two 151,936-token vocabularies; reading both headers
    first brings it to 0.3 s (``benchmarks/compat_bench.py``, 2-core CPU)."""
    result = Compatibility()
    _check_family(target, draft, result, require_smaller)
    _check_vocabulary(target, draft, result)
    return result


def _check_family(
    target: GGUFInfo, draft: GGUFInfo, result: Compatibility, require_smaller: bool
) -> None:
    if draft.architecture in ASSISTANTS:
        if ASSISTANTS[draft.architecture] != target.architecture:
            result.reasons.append(
                f"{draft.architecture!r} drafts for {ASSISTANTS[draft.architecture]!r} "
                f"targets, not {target.architecture or 'unknown'!r}"
            )
    elif target.architecture != draft.architecture:
        result.reasons.append(
            f"draft architecture is {draft.architecture or 'unknown'!r}, "
            f"target {target.architecture or 'unknown'!r} (a different model family)"
        )
    if draft.parameters > target.parameters:
        result.reasons.append(
            f"the draft ({format_params(draft.parameters)} parameters) is larger than "
            f"the target ({format_params(target.parameters)})"
        )
    elif draft.parameters == target.parameters:
        (result.reasons if require_smaller else result.notes).append(
            "the draft is as large as the target, so it cannot make decoding faster"
        )
    if target.family != draft.family:
        result.notes.append(
            f"family names differ: draft {draft.family!r}, target {target.family!r}"
        )


def _check_vocabulary(target: GGUFInfo, draft: GGUFInfo, result: Compatibility) -> None:
    reasons = result.reasons
    if target.vocab_type != draft.vocab_type:
        reasons.append(
            f"draft tokenizer type is {draft.vocab_type!r}, target {target.vocab_type!r}"
        )
    for name in ("bos", "eos"):
        t_add = bool(
            target.get(
                f"tokenizer.ggml.add_{name}_token", name == "bos" and target.vocab_type == "llama"
            )
        )
        d_add = bool(
            draft.get(
                f"tokenizer.ggml.add_{name}_token", name == "bos" and draft.vocab_type == "llama"
            )
        )
        if t_add != d_add:
            reasons.append(
                f"the target {'adds' if t_add else 'does not add'} {name.upper()} and the draft "
                f"{'does' if d_add else 'does not'}"
            )
        elif t_add:
            t_id, d_id = (
                target.get(f"tokenizer.ggml.{name}_token_id"),
                draft.get(f"tokenizer.ggml.{name}_token_id"),
            )
            if t_id != d_id:
                reasons.append(f"draft {name.upper()} id is {d_id}, target {t_id}")

    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_DIFFERENCE:
        reasons.append(
            f"draft vocabulary has {draft.n_vocab} tokens, target {target.n_vocab} "
            f"(a difference of {diff}; at most {MAX_VOCAB_DIFFERENCE} is allowed)"
        )
        return

    mismatched = [
        i
        for i in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab))
        if target.tokens[i] != draft.tokens[i]
    ]
    if mismatched:
        shown = ", ".join(
            f"{i}: {draft.tokens[i]!r} vs {target.tokens[i]!r}"
            for i in mismatched[:_MAX_LISTED_MISMATCHES]
        )
        reasons.append(
            f"{len(mismatched)} token text(s) differ (draft vs target, first ones: {shown})"
        )
