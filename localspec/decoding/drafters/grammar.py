"""The grammar as a drafter: the tokens a grammar forces next (keys, quotes, brackets of a
JSON schema) are known before the model runs, so they are proposed as a draft with
confidence 1 and verified like any other draft (the text stays the target's own); and
joined to the other drafters' guesses in the same round (:func:`chained`)."""

from __future__ import annotations

from localspec.decoding.drafters.base import NO_INPUTS, Draft, DrafterInputs, ModelFreeDrafter


class GrammarDrafter(ModelFreeDrafter):
    """Proposes :meth:`~localspec.decoding.grammar.Constraint.forced` tokens of the current
    generation's constraint (given at :meth:`begin`; none turns it off)."""

    name = "grammar"
    forces = True  # its kept tokens are TokenSource.FORCED
    prior_acceptance = 0.95
    prior_cost_s = 2e-5

    def __init__(self):
        self.constraint = None

    def begin(self, prompt, inputs: DrafterInputs = NO_INPUTS) -> None:
        self.constraint = inputs.constraint

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if self.constraint is None or max_tokens <= 0:
            return Draft.empty()
        tokens = self.constraint.forced(max_tokens)
        return Draft(tokens=tokens, confidence=[1.0] * len(tokens))


def chained(constraint, forced: Draft, guess, cut, max_tokens: int) -> Draft:
    """One draft of up to ``max_tokens``: the tokens the grammar forces now (``forced``),
    then a free drafter's guess from the text after them (``guess(ahead, k)`` -> Draft,
    ``ahead`` the forced tokens), then the tokens the grammar forces after that guess: a
    forced key, its value copied from the prompt, the comma and the next key, verified in
    one round.  ``cut(draft)`` keeps the part the grammar allows from its current state
    (up to an end-of-generation token).
    The grammar's tokens are marked ``forced``; ``constraint`` is left as it was."""
    consumed = constraint.advance(forced.tokens)
    try:
        free = cut(guess(forced.tokens, max_tokens - len(forced.tokens)))
        consumed += constraint.advance(free.tokens)
        after = (
            constraint.forced(max_tokens - len(forced.tokens) - len(free.tokens))
            if free.tokens
            else []
        )
    finally:
        constraint.back(consumed)
    return cut(Draft.empty().then(forced, forced=True).then(free).then(Draft(after), forced=True))
