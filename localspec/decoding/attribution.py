"""Where a generation's time went against plain decoding (:class:`TimeAccount`).

Plain decoding spends one target step per token after the first.  A speculative generation
spends, besides: rounds that drafted, each worth its tokens' plain steps less its drafting and
verify (``won_s`` when positive, ``lost_s`` when not, with the draft tokens rejected in them);
a draft model reading what it lacked mid-answer (``catch_up_s``) or the prompt while the target
read it (``draft_prompt_s``); the policy's own choosing and learning (``policy_s``); and, with
several sequences, the waits of its decodes for the other sequences' (``batch_wait_s``).  A
round is judged against plain decoding as the policy prices it: its extra tokens are worth a
plain decode each (``step_s``: c(1) alone; c(S) for the S sequences of a shared decode), and
its draft's rows cost the time they add to the verify (alone, all of it beyond c(1); in a
decode of B tokens with k drafted, the share 1 - c(B - k) / c(B) of it), once for every
sequence waiting on that decode (a plain round in a shared decode waits on nobody's draft).
Without a price (a fixed policy before any calibration) it is not judged, and ``unjudged``
counts it.  What a benchmark sees beyond these (the target's own step slower with the draft
model loaded) is the benchmark's to show: one generation has no plain step of its own to
compare.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class TimeAccount:
    """Seconds against plain decoding; see the module docstring."""

    step_s: float = 0.0  # the plain decode the latest judged round was priced against
    won_s: float = 0.0
    lost_s: float = 0.0
    won_rounds: int = 0
    lost_rounds: int = 0
    rejected_tokens: int = 0  # draft tokens rejected, in every drafting round
    unjudged: int = 0  # drafting rounds without a plain step to judge them by
    catch_up_s: float = 0.0
    draft_prompt_s: float = 0.0
    policy_s: float = 0.0
    batch_wait_s: float = 0.0

    def add_round(
        self,
        n_emitted: int,
        n_drafted: int,
        n_accepted: int,
        draft_s: float,
        verify_s: float,
        plain_s: float | None,
        sequences: int = 1,
        rows_share: float | None = None,
    ) -> None:
        """A round emitted ``n_emitted`` tokens for ``draft_s`` seconds of drafting and
        ``verify_s`` of verify, where a token costs ``plain_s`` in plain decoding (None: not
        judged).  Alone, its draft's rows took verify_s - plain_s; in a decode serving
        ``sequences`` sequences, ``rows_share`` of verify_s, and every sequence waited that
        long.  Saved: (n_emitted - 1) plain_s; spent: sequences * rows + draft_s.  A round
        that verified no draft is plain decoding but for its drafting (a draft model's draft
        cut to nothing): that is lost."""
        if n_drafted == 0:
            if draft_s > 0:
                self.lost_s, self.lost_rounds = self.lost_s + draft_s, self.lost_rounds + 1
            return
        self.rejected_tokens += n_drafted - n_accepted
        if not plain_s:
            self.unjudged += 1
            return
        self.step_s = plain_s
        rows_s = verify_s - plain_s if rows_share is None else rows_share * verify_s
        saved = (n_emitted - 1) * plain_s - sequences * rows_s - draft_s
        if saved >= 0:
            self.won_s, self.won_rounds = self.won_s + saved, self.won_rounds + 1
        else:
            self.lost_s, self.lost_rounds = self.lost_s - saved, self.lost_rounds + 1

    @property
    def spent_s(self) -> float:
        """Seconds spent beyond plain decoding, besides the rounds that lost."""
        return self.catch_up_s + self.draft_prompt_s + self.policy_s + self.batch_wait_s

    @property
    def net_s(self) -> float:
        """Seconds saved against plain decoding (negative: lost), as far as judged."""
        return self.won_s - self.lost_s - self.spent_s

    def to_dict(self) -> dict:
        return {**asdict(self), "net_s": self.net_s}

    def in_ms(self) -> dict:
        """:meth:`to_dict` with every ``…_s`` in milliseconds, named ``…_ms`` (llama.cpp's
        ``timings`` are in milliseconds)."""
        return {
            (k[:-2] + "_ms" if k.endswith("_s") else k): (v * 1000 if k.endswith("_s") else v)
            for k, v in self.to_dict().items()
        }

    def summary(self) -> str:
        """One line, e.g. ``won 1.20 s in 14 rounds, lost 0.31 s in 6 (9 tokens rejected),
        catch-up 0.00 s, draft prompt 0.00 s, policy 0.02 s: net +0.87 s``."""
        waits = f", batch waits {self.batch_wait_s:.2f} s" if self.batch_wait_s else ""
        return (
            f"won {self.won_s:.2f} s in {self.won_rounds} rounds, lost {self.lost_s:.2f} s in "
            f"{self.lost_rounds} ({self.rejected_tokens} tokens rejected), catch-up "
            f"{self.catch_up_s:.2f} s, draft prompt {self.draft_prompt_s:.2f} s, policy "
            f"{self.policy_s:.2f} s{waits}: net {self.net_s:+.2f} s"
        )
