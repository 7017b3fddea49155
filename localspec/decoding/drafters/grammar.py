"""The grammar as a drafter: the tokens a grammar forces next (keys, quotes, brackets of a
JSON schema) are known before the model runs, so they are proposed as a draft with
confidence 1 and verified like any other draft (the text stays the target's own)."""

from __future__ import annotations

from localspec.decoding.drafters.base import Draft, ModelFreeDrafter


class GrammarDrafter(ModelFreeDrafter):
    """Proposes :meth:`~localspec.decoding.grammar.Constraint.forced` tokens of the current
    generation's constraint (``set_constraint``; None turns it off)."""

    name = "grammar"
    forces = True  # its kept tokens are TokenSource.FORCED
    prior_acceptance = 0.95
    prior_cost_s = 2e-5

    def __init__(self):
        self.constraint = None

    def set_constraint(self, constraint) -> None:
        self.constraint = constraint

    def propose(self, context, max_tokens, params, p_min, rng) -> Draft:
        if self.constraint is None or max_tokens <= 0:
            return Draft.empty()
        tokens = self.constraint.forced(max_tokens)
        return Draft(tokens=tokens, confidence=[1.0] * len(tokens))
