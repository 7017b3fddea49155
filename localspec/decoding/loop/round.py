"""One round: draft, verify in one target decode, accept, trim, and tell the policy, the
statistics and the drafters; whether another round fits; the thinking budget's forced close
drafted as forced tokens (:class:`RoundPhase`, a mixin of
:class:`~localspec.decoding.loop.Generation`)."""

from __future__ import annotations

import time
from dataclasses import replace

from localspec.decoding.attribution import TimeAccount
from localspec.decoding.drafters import Draft, round_label
from localspec.decoding.loop.run import _Run
from localspec.decoding.reasoning import REASONING
from localspec.decoding.rounds import RoundOutcome
from localspec.decoding.stats import TokenEvent
from localspec.decoding.thinking import UNLIMITED


class RoundPhase:
    """A round and what decides it: the room left, the thinking budget's close."""

    def _steer_thinking(self, run: _Run) -> None:
        """Between rounds: once the thinking budget is spent, force the close as a grammar
        (its forced tokens drafted by :meth:`_forced_draft`, verified like any draft, the
        rest chosen by the target under the mask); drop it once the close is out."""
        if run.budget is not None:
            self.constraint = run.budget.steer(run.out, run.stats, self.constraint, run.context)

    def _stop_reason(self) -> str | None:
        """Why the generation must end before another round: "cancelled", "context" (no
        free cell after the last token), or None."""
        if self._cancelled:
            return "cancelled"
        return "context" if self._room() < 1 else None

    def _room(self) -> int:
        return (
            self.target.n_ctx - len(self.target.cache_tokens) - 1
        )  # free cells after the last token t

    def _round(self, run: _Run) -> list[TokenEvent]:
        """One round: draft, verify in one target decode, trim the rejected tokens from the
        cache, tell the policy, the statistics and the drafters; the tokens it emits."""
        target, context = self.target, run.context
        run.round_no += 1
        started, channel = time.perf_counter(), run.out.channel
        self.policy.enter_channel(channel)  # the round is judged by its channel's estimates
        k_cap = min(self.params.max_tokens - run.stats.generated_tokens - 1, self._room() - 1)
        if self._forcing(run):
            drafter, draft, draft_s = None, self._forced_draft(run, k_cap), 0.0
        else:
            if channel == REASONING:  # a round never runs past the thinking budget
                k_cap = max(
                    0, min(k_cap, (run.budget.left(run.stats) if run.budget else UNLIMITED) - 1)
                )
            drafter, draft, draft_s = self._propose(
                context, k_cap, run.draft_rng, run.stats.against_plain
            )
        verify_before = target.decode_s + target.rollback_time()
        target.prepare_rollback(len(draft.tokens))
        chances = self._chances(drafter, draft, run.stats.against_plain)
        draft, n_accepted, emitted = self._verify(
            context[-1], draft, run.rng, drafter is not None and drafter.forces, chances
        )
        batch, sequences = target.last_batch_tokens, target.last_batch_sequences
        target.trim(len(context) + n_accepted)  # a recurrent state's way back counts as verify
        outcome = RoundOutcome(
            verify_s=target.decode_s + target.rollback_time() - verify_before,
            verify_batch=batch,
            drafter=drafter,
            draft=draft,
            n_accepted=n_accepted,
            draft_s=draft_s,
            emitted=tuple(t.token for t in emitted),
            verify_sequences=sequences,
        )
        forcing = self._forcing(run) and bool(draft.tokens)
        self._observe(
            replace(outcome, draft=Draft.empty(), n_accepted=0, emitted=()) if forcing else outcome,
            run.stats.against_plain,
        )
        label = "grammar" if forcing else round_label(drafter, draft)
        run.stats.record_round(len(draft.tokens), n_accepted, label, draft.forced)
        if self._thinking is not None:
            n_forced = sum((draft.forced or [])[:n_accepted])
            run.stats.record_channel_round(
                channel, len(draft.tokens), n_accepted, n_forced, time.perf_counter() - started
            )
        kept = context + draft.tokens[:n_accepted]
        for d in self.drafters:
            d.feedback(kept, len(draft.tokens), n_accepted)
        return emitted

    def _chances(self, drafter, draft: Draft, account: TimeAccount):
        """The policy's acceptance chance of each draft token (None: verify it whole), its
        time charged to ``account``."""
        if drafter is None or not draft.tokens:
            return None
        started = time.perf_counter()
        chances = self.policy.chances(drafter, draft)
        account.policy_s += time.perf_counter() - started
        return chances

    def _observe(self, outcome: RoundOutcome, account: TimeAccount) -> None:
        """The policy learns from the round (its time charged to ``account``), which is judged
        against plain decoding."""
        started = time.perf_counter()
        self.policy.observe(outcome)
        account.policy_s += time.perf_counter() - started
        account.add_round(
            len(outcome.emitted),
            outcome.n_drafted,
            outcome.n_accepted,
            outcome.draft_s,
            outcome.verify_s,
            self.policy.verify_s(outcome.verify_sequences),
            outcome.verify_sequences,
            self._rows_share(outcome),
        )

    def _rows_share(self, outcome: RoundOutcome) -> float | None:
        """The share of a shared verify decode its draft's rows took, as the policy prices
        the decode with and without them (None alone, or without prices)."""
        batch, k = outcome.verify_batch, outcome.n_drafted
        if outcome.verify_sequences == 1 or k == 0:
            return None
        without, whole = self.policy.verify_s(batch - k), self.policy.verify_s(batch)
        return None if not without or not whole else max(0.0, 1.0 - without / whole)

    def _forcing(self, run: _Run) -> bool:
        return run.budget is not None and run.budget.closing is not None

    def _forced_draft(self, run: _Run, k_cap: int) -> Draft:
        """The close's next tokens (up to ``k_cap``), as a draft of forced tokens."""
        tokens = self._cut(Draft(run.budget.forced_tokens(run.context, k_cap))).tokens
        return Draft(tokens=tokens, confidence=[1.0] * len(tokens), forced=[True] * len(tokens))
