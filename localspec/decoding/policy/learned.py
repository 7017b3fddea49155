"""What the adaptive policy learnt on this machine, kept between processes.

A loaded pair's :class:`LearnedState` reads the :class:`~localspec.llama.machine_store.MachineStore`
record of its key (machine, threads, llama.cpp build, offload, the two GGUFs' sha256) and
writes back what its policies learn:

- ``costs``: the target's verify cost per batch size (seconds, ``{"<b>": s}``) and the
  draft model's ``{"per_token", "prefill"}`` (:class:`~localspec.decoding.policy.CostModel`); loaded
  instead of measured at the first adaptive call, so a known pair has no calibration pause;
- ``priors``: per kind of request (:func:`kind_name`; a reasoning model's thinking is a kind
  of its own), each drafter's acceptance over all texts (:meth:`AdaptivePolicy.learnt_priors`),
  which a new policy starts from (:meth:`AdaptivePolicy.start_from`) instead of the
  drafter's fixed prior;
- ``answers``: per kind, how many tokens its answers run (``{"mean_tokens", "answers"}``,
  :class:`~localspec.decoding.policy.estimates.AnswerLength`), over which the policy prices a
  draft model's catch-up;
- ``pair``: the two GGUFs' file names, for ``localspec doctor``.

Writes happen when a generation ends, at most once every ``SAVE_EVERY_S`` seconds per
process, and at close.  Merging with what another process wrote meanwhile: **newest wins,
per field** (per batch size, per draft cost, per kind and drafter); fields only the other
process knows are kept.  Not a weighted mean, because both processes started from the same
stored values and each estimate is a moving average already weighted toward its recent
readings: averaging two of them would count the shared record twice and lag the machine's
current state.  A store that cannot be read or written costs one log line, never a load.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from localspec.decoding.params import LoadOptions
from localspec.decoding.policy.adaptive import AdaptivePolicy
from localspec.decoding.policy.costs import CostModel
from localspec.decoding.reasoning import CONTENT, REASONING
from localspec.llama import backend
from localspec.llama.engine_config import default_threads
from localspec.llama.machine_store import MachineStore, StoreKey, this_machine_key

SAVE_EVERY_S = 5.0  # at most one write per this many seconds per process (but at close)
log = logging.getLogger("localspec.store")


def kind_name(
    strategy: str, greedy: bool, predicted: bool, constrained: bool, channel: str = CONTENT
) -> str:
    """The stored name of a kind of request: ``"auto|greedy"``, ``"auto|sampled|predicted"``…;
    a reasoning model's thinking (``channel`` ``"reasoning"``) is a kind of its own,
    ``"auto|greedy|reasoning"`` (:mod:`localspec.decoding.policy.channels`)."""
    parts = [strategy, "greedy" if greedy else "sampled"]
    parts += ["predicted"] if predicted else []
    parts += ["constrained"] if constrained else []
    parts += [REASONING] if channel == REASONING else []
    return "|".join(parts)


class LearnedState:
    """The stored record of one loaded pair (``target`` / ``draft`` paths; ``threads`` and
    ``offload`` as the engines run).  The key (which hashes each GGUF once, memoised) is
    computed on first use; with an unreadable file or store the state is empty and
    nothing is written."""

    def __init__(
        self,
        target: Path,
        draft: Path | None,
        threads: int,
        offload: bool,
        store: MachineStore | None = None,
    ):
        self._pair = (Path(target), Path(draft) if draft is not None else None, threads, offload)
        self.store = store or MachineStore()
        self._key: StoreKey | None = None
        self._key_tried = False
        self._record: dict | None = None
        self._loaded = False
        self._seeded: set[AdaptivePolicy] = set()
        self._last_save = 0.0
        self._saving = threading.Lock()

    @classmethod
    def of_load(cls, target: Path, draft: Path | None, options: LoadOptions) -> LearnedState:
        """The state of a pair loaded with these :class:`LoadOptions` (threads, offload)."""
        offload = backend.supports_gpu_offload() and options.n_gpu_layers != 0
        return cls(target, draft, options.n_threads or default_threads(), offload)

    @property
    def key(self) -> StoreKey | None:
        if self._key is None and not self._key_tried:
            self._key_tried = True  # an unreadable GGUF is said once, not at every write
            try:
                self._key = this_machine_key(*self._pair)
            except OSError as exc:
                log.warning("localspec: not keeping what this pair learns (%s)", exc)
        return self._key

    @property
    def record(self) -> dict:
        """The record as loaded ({} when none, or unreadable)."""
        if not self._loaded:
            key = self.key
            self._loaded = True
            try:
                self._record = self.store.load(key) if key is not None else None
            except OSError as exc:
                log.warning("localspec: could not read the learned store (%s)", exc)
        return self._record or {}

    def load_costs(self, costs: CostModel, c1_now: Callable[[], float | None]) -> None:
        """Put the stored costs into the pair's ``costs`` where they hold
        (:meth:`~localspec.decoding.policy.costs.CostModel.load_stored`; ``c1_now()``: one
        reading of c(1) now, seconds); costs that do not hold are left out with one log line."""
        why = costs.load_stored(self.record.get("costs"), c1_now)
        if why is not None:
            log.warning(
                "localspec: measuring this pair's costs again, the stored ones do not hold (%s)",
                why,
            )

    def seed(self, policy: AdaptivePolicy, kind: str) -> None:
        """Start a policy new to this process from the stored priors of its kind (once)."""
        if policy in self._seeded:
            return
        self._seeded.add(policy)
        stored = _dict(_dict(self.record.get("priors")).get(kind))
        policy.start_from(stored, _dict(self.record.get("answers")).get(kind))

    def save_slots(self, slots: Sequence, force: bool = False) -> bool:
        """:meth:`save` what the adaptive policies of these :class:`~localspec.decoding.slots.Slot`
        learnt (their shared costs, slot 0's draft model); False when they have none."""
        policies = [
            (kind_name(*key), policy) for slot in slots for key, policy in slot.adaptive.items()
        ]
        return bool(policies) and self.save(slots[0].costs, policies, force)

    def save(
        self, costs: CostModel, policies: Iterable[tuple[str, AdaptivePolicy]], force: bool = False
    ) -> bool:
        """Write the current estimates (``costs``: the pair's shared :class:`CostModel`;
        ``policies``: (kind name, policy) of every slot), merged with the stored record.  Skipped
        (False) within ``SAVE_EVERY_S`` of the last write unless ``force``, while another thread
        writes, or without a key."""
        now = time.monotonic()
        if (not force and now - self._last_save < SAVE_EVERY_S) or self.key is None:
            return False
        if not self._saving.acquire(blocking=False):
            return False
        try:
            self._last_save = now
            try:
                mine = self._current(costs, policies)
            except RuntimeError:  # a cost dict grew under us (another slot's round): next time
                return False
            try:
                self._record = self.store.update(self.key, lambda old: _merged(old or {}, mine))
            except (OSError, TimeoutError) as exc:
                log.warning("localspec: could not write the learned store (%s)", exc)
                return False
            return True
        finally:
            self._saving.release()

    def _current(self, costs: CostModel, policies) -> dict:
        target, draft_path = self._pair[0], self._pair[1]
        priors: dict = {}
        answers: dict = {}
        for kind, policy in list(policies):
            answer = policy.answer.record()  # several slots: the one of most answers wins
            if kind not in answers or answer["answers"] > answers[kind]["answers"]:
                answers[kind] = answer
            mine = priors.setdefault(kind, {})
            for (
                name,
                entry,
            ) in policy.learnt_priors().items():  # several slots: the most judged wins
                if name not in mine or entry["trials"] > mine[name]["trials"]:
                    mine[name] = entry
        return {
            "pair": {"target": target.name, "draft": draft_path.name if draft_path else None},
            "costs": costs.record(),
            "priors": {k: v for k, v in priors.items() if v},
            "answers": answers,
        }


def _merged(old: dict, new: dict) -> dict:
    """``new`` over ``old``, field by field (module docstring: newest wins)."""
    old_costs = old.get("costs") if isinstance(old.get("costs"), dict) else {}
    costs = {
        part: {**_dict(old_costs.get(part)), **new["costs"][part]} for part in ("verify", "draft")
    }
    old_priors = _dict(old.get("priors"))
    priors = {
        kind: {**_dict(old_priors.get(kind)), **_dict(new["priors"].get(kind))}
        for kind in {*old_priors, *new["priors"]}
    }
    answers = {**_dict(old.get("answers")), **new["answers"]}
    return {**old, "pair": new["pair"], "costs": costs, "priors": priors, "answers": answers}


def _dict(x) -> dict:
    return x if isinstance(x, dict) else {}
