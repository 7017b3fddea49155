"""The speculative decoding loop: draft, verify in one target decode, accept, trim.

Algorithm: Leviathan et al. 2022 (arXiv:2211.17192) and Chen et al. 2023
(arXiv:2302.01318); the acceptance rules live in :mod:`localspec.decoding.sampling`.

Invariant between rounds: the target's KV cache holds the context except its last
token ``t`` (emitted, not yet decoded).  A round decodes ``[t, d_1..d_k]`` with logits
on all k + 1 rows, keeps ``t, d_1..d_n``, removes the rest from the cache, and emits
``d_1..d_n`` plus one token from the target (a correction or the bonus).  With no
drafter, or k = 0, the same round is plain decoding.

:class:`Generation` lives in :mod:`.generation` (its steps, round by round, and the caller's
side: iteration, cancel, supersede) and takes its steps from one module per phase:
:mod:`.prompt` (prompt eval, the first token), :mod:`.round` (a round: draft, verify, accept,
trim; the thinking budget's forced close), :mod:`.drafting` (asking the drafters),
:mod:`.verify` (the target's verdict on a draft) and :mod:`.emit` (tokens handed out as
events, the result); :mod:`.run` holds what the steps of one generation share, :mod:`.plan`
what its request brings (:class:`RequestPlan`, given when it is built).
"""

from localspec.decoding.loop.generation import Generation
from localspec.decoding.loop.plan import RequestPlan

__all__ = ["Generation", "RequestPlan"]
