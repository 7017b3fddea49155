"""What the round being planned yields per second, from the target's verify costs
(:class:`RoundPricing`): measured sizes interpolated, never below one step nor above b single
steps (a stall written down must not make drafting look hopeless); and how much of each draft
in a shared decode pays (:meth:`RoundPricing.kept_drafts`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import accumulate
from operator import mul

_BATCH_MARGIN = 1.25  # c(b) is taken as at most this times b * c(1)


class RoundPricing:
    """Tokens per second of the round being planned, from the target's verify costs as
    measured when pricing starts (``measured``: batch size -> seconds; the prior shape scaled
    to ``step_s`` until one is measured) and the batch the round's verify joins: ``others``
    = (tokens, sequences) of the other sequences sharing that decode ((0, 0) alone)."""

    def __init__(
        self, measured: Mapping[int, float], step_s: float, others: tuple[int, int] = (0, 0)
    ):
        known = sorted(measured.items())
        # a batch may cost less than a smaller one: the CPU's repacked kernels take rows four
        # at a time (c(3) 139 ms, c(4) 116 ms for the default target on a 2-core Xeon), so
        # plain sequences in fours must not be priced as dear as three; never below c(1), the
        # weights are read once whatever the batch (and noise must not make a draft look free)
        floor = known[0][1] if known and known[0][0] == 1 else 0.0
        self.measured = [(b, max(c, floor)) for b, c in known]
        self.step_s = step_s
        self.tokens, self.sequences = others

    def rate(self, expected: float, extra_s: float, k: int) -> float:
        """What drafting k tokens that yield ``expected`` at ``extra_s`` seconds of drafting is
        worth in the batch this round's verify joins: the S other sequences (one token each)
        share the decode and wait for it all, so a draft must pay for its rows in all of them.
        The time is what the batch takes with every sequence plain, c(S + 1), plus this
        draft's own rows at the batch's size, c(T + k + 1) - c(T + 1): the others' rows beyond
        one each (drafts, a prompt being read) are theirs to pay for, and must not make this
        draft look cheap beside them.  With T = S (the others plain) that is c(S + k + 1).
        The worth is expected^(1 / (S + 1)) / time, the geometric mean of the sequences'
        speeds, as the decode keeps drafts (:meth:`kept_drafts`): a draft that would be cut
        there is not worth drafting.  Alone (S = 0), tokens per second."""
        share = expected ** (1.0 / (self.sequences + 1))
        if self.tokens <= self.sequences:
            return share / (extra_s + self.verify_s(self.tokens + k + 1))
        own = max(0.0, self.verify_s(self.tokens + k + 1) - self.verify_s(self.tokens + 1))
        return share / (extra_s + self.verify_s(self.sequences + 1) + own)

    def kept_drafts(
        self, fixed_rows: int, sequences: int, chances: Sequence[Sequence[float]]
    ) -> list[int]:
        """How many tokens of each draft in one shared decode to verify: the decode's other
        rows (``fixed_rows``: each sequence's last token, prompts being read) are decoded
        anyway, and ``chances[i]`` are draft i's per-token acceptance chances.  Each of the
        ``sequences`` emits a token, a drafting one E = 1 + the chances its draft is accepted
        through each token kept; every one waits for the whole decode.  The tokens kept are
        those that make the sequences' speeds grow together, the most sum of log(E / c(rows))
        over the sequences (proportional fairness; alone, the most tokens per second): by
        the decode's tokens per second alone, one sure draft would slow every other sequence
        for its own gain, and the last of them would end alone, without a batch to share.
        Each sequence planned its draft knowing only the latest decode; here every draft of
        the decode is known, and two drafts that each paid alone may not pay together."""
        through = [[*accumulate((min(1.0, max(0.0, p)) for p in d), mul)] for d in chances]
        expected, kept = [1.0] * len(chances), [0] * len(chances)
        speeds = 0.0  # sum of log(E) over the drafting sequences (the others' is 0)
        best, best_kept = -sequences * math.log(self.verify_s(fixed_rows)), list(kept)
        for rows in range(fixed_rows + 1, fixed_rows + sum(map(len, chances)) + 1):
            i = max(
                (i for i, d in enumerate(through) if kept[i] < len(d)),
                key=lambda i: through[i][kept[i]] / expected[i],
            )
            speeds += math.log1p(through[i][kept[i]] / expected[i])
            expected[i] += through[i][kept[i]]
            kept[i] += 1
            utility = speeds - sequences * math.log(self.verify_s(rows))
            if utility > best:
                best, best_kept = utility, list(kept)
        return best_kept

    def verify_s(self, batch: int) -> float:
        """Seconds for a target decode of ``batch`` tokens: measured, else interpolated
        linearly between measured sizes, else the prior shape scaled to c_verify(1)."""
        known = self.measured
        if not known:
            return self.step_s * (1 + 0.1 * (batch - 1))
        return max(1e-9, min(_interpolated(known, batch), _batch_bound(known, batch)))


def _interpolated(known: list, batch: int) -> float:
    for (b0, c0), (b1, c1) in zip(known, known[1:]):
        if b0 <= batch <= b1:
            return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
    if (
        batch > known[-1][0] and len(known) >= 2
    ):  # past the largest measured batch: its slope goes on
        (b0, c0), (b1, c1) = known[-2], known[-1]
        return max(c1 + (c1 - c0) / (b1 - b0) * (batch - b1), c1)
    b_edge, c_edge = known[0] if batch < known[0][0] else known[-1]
    base = known[0][1] / (1 + 0.1 * (known[0][0] - 1))
    return max(c_edge + base * 0.1 * (batch - b_edge), 1e-6)


def _batch_bound(known: list, batch: int) -> float:
    """A batch of b never costs more than b single steps (plus a margin): a stalled
    measurement (the machine busy elsewhere) must not make drafting look hopeless,
    since a drafter never run again would never correct it."""
    b1, c1 = known[0]
    return _BATCH_MARGIN * batch * c1 / b1 if b1 == 1 else float("inf")
