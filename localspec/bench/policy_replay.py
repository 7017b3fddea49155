"""Record what every drafter would propose along a greedy answer, then replay any policy
under any machine's cost curve, offline.

For greedy decoding the target's answer T is fixed by the text, and so is what each
drafter proposes at each position and how much of it the target keeps: a draft at
position j is accepted up to its first token that differs from T.  A trace stores, per
answer: the prompt length, T, the free drafters' drafts (tokens, confidences and depths,
up to 16) at every position, and the draft model's greedy choice and its probability at every
position (one prefill of prompt + T in the draft model gives them all: after an accepted
token the draft model sees exactly T).  :func:`replay` then runs a policy over a trace
with verify costs c(b), a draft-model cost per token and a prefill cost per token from a
:class:`Profile`, and :func:`best_fixed` finds the best fixed (drafter, k) in hindsight.
Times are seconds; speed-ups are against plain decoding (c(1) per token) of the same answer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from localspec.decoding.drafters import Draft, Drafter, DrafterInputs, round_label
from localspec.decoding.policy import BATCH_SIZES, AdaptivePolicy, CostAverage, CostModel
from localspec.decoding.rounds import RoundOutcome
from localspec.decoding.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
FREE_DRAFTERS = ("prompt-lookup", "suffix", "prediction")
FIXED_KS = (1, 2, 3, 4, 6, 8, 12, 16)
MAX_K = 16


@dataclass
class Profile:
    """A machine's costs in seconds: ``verify_s[b]`` for a target decode of b tokens
    (interpolated linearly between the sizes given), ``draft_s`` per draft-model token,
    ``draft_prefill_s`` per prompt token the draft model reads.  ``source`` says
    whether the figures were measured (and where) or assumed."""

    name: str
    verify_s: dict
    draft_s: float
    draft_prefill_s: float
    source: str = ""

    def verify(self, batch: int) -> float:
        known = sorted((int(b), float(c)) for b, c in self.verify_s.items())
        for (b0, c0), (b1, c1) in zip(known, known[1:]):
            if b0 <= batch <= b1:
                return c0 + (c1 - c0) * (batch - b0) / (b1 - b0)
        (b0, c0), (b1, c1) = known[-2], known[-1]
        return c1 + (c1 - c0) / (b1 - b0) * (batch - b1)

    def ceiling(self) -> tuple[float, int]:
        """The copy ceiling max_b b * c(1) / c(b): the speed-up of a drafter always right."""
        best = max(range(1, MAX_K + 2), key=lambda b: b / self.verify(b))
        return best * self.verify(1) / self.verify(best), best


PROFILES = {
    "machine-A": Profile(
        "machine-A",
        {1: 0.037, 2: 0.061, 5: 0.123, 9: 0.251, 17: 0.348},
        0.021,
        0.0116,
        "measured (design notes, section 7: 2 CPU cores, compute-bound); prefill derived",
    ),
    "machine-B": Profile(
        "machine-B",
        {1: 0.102, 2: 0.120, 5: 0.177, 17: 0.372},
        0.047,
        0.0100,
        "measured (design notes, section 7: Xeon with AVX-512, memory-bound); prefill derived",
    ),
    "gpu-like": Profile(
        "gpu-like",
        {1: 0.015, 2: 0.0151, 9: 0.0160, 17: 0.0175},
        0.0015,
        0.00005,
        "assumed: verify nearly flat to 16 tokens, draft model 10 % of a target step",
    ),
}


@dataclass
class Trace:
    """One greedy answer and every drafter's view of it (see the module docstring).
    ``free[name][j]`` = (tokens, confidences, depths) proposed after ``prompt + answer[:j]``
    (depths absent in traces recorded before drafts had them);
    ``draft_next[j]`` / ``draft_conf[j]``: the draft model's choice for answer[j] and its
    probability, having read ``prompt + answer[:j]``; ``eog``: the target's
    end-of-generation token ids, where every replayed draft ends as live (empty in traces
    recorded before drafts were cut there)."""

    workload: str
    name: str
    n_prompt: int
    answer: list[int]
    free: dict = field(default_factory=dict)
    draft_next: list[int] = field(default_factory=list)
    draft_conf: list[float] = field(default_factory=list)
    eog: list[int] = field(default_factory=list)


def record(
    model,
    prompt_tokens: list[int],
    answer: list[int],
    workload: str,
    name: str,
    prediction: list[int] | None = None,
    suffix=None,
) -> Trace:
    """A trace of ``answer`` (the target's greedy tokens after ``prompt_tokens``) with the
    drafters of ``model`` (a :class:`~localspec.api.SpeculativeModel`) and ``suffix``, a
    :class:`~localspec.decoding.drafters.SuffixDrafter` whose store holds the earlier answers but
    not this one (default: the model's own, which already holds ``answer`` if the model
    produced it: its drafts would then copy the answer from itself).  The suffix store
    then holds this answer as an earlier output, as after a live request."""
    trace = Trace(workload, name, len(prompt_tokens), list(answer), eog=model.target.eog_tokens())
    drafters = {
        "prompt-lookup": model.lookup,
        "suffix": suffix if suffix is not None else model.suffix,
    }
    if prediction:
        drafters["prediction"] = model.prediction
    inputs = DrafterInputs(prediction=tuple(prediction or ()))
    for d in drafters.values():
        d.begin(prompt_tokens, inputs)
    context = list(prompt_tokens) + [answer[0]]
    for name_ in drafters:
        trace.free[name_] = [([], [], [])]  # position 0 comes from prompt eval, never drafted
    for j in range(1, len(answer)):
        for name_, d in drafters.items():
            draft = d.propose(context, MAX_K, GREEDY, 0.0, None)
            trace.free[name_].append(
                (draft.tokens, list(draft.confidence or []), list(draft.depth or []))
            )
        context.append(answer[j])
    for d in drafters.values():
        d.end(context, len(prompt_tokens))
    model.prediction.begin([])  # no prediction: off until a request brings one
    if model.drafter is not None:
        trace.draft_next, trace.draft_conf = _draft_model_view(model, prompt_tokens, answer)
    return trace


def _draft_model_view(model, prompt_tokens, answer, chunk: int = 64):
    engine = model.drafter.engine
    engine.trim(0)
    tokens = list(prompt_tokens) + list(answer)
    first = len(prompt_tokens) - 1  # the row predicting answer[0]
    nexts, confs = [], []
    engine.decode(tokens[:first])
    for start in range(first, len(tokens) - 1, chunk):
        piece = tokens[start : min(start + chunk, len(tokens) - 1)]
        logits = engine.decode(piece, range(len(piece)))
        for row in logits:
            row = model.drafter._fit(row).astype(np.float64)
            best = int(np.argmax(row))
            nexts.append(best)
            confs.append(float(1.0 / np.exp(row - row[best]).sum()))
    engine.trim(0)
    return nexts, confs


# --- replay --------------------------------------------------------------------------------


class _Stand(Drafter):
    """A drafter as the policy sees it during replay: name, prior, free flag, catch-up lag."""

    def __init__(self, name: str, prior: float, free: bool, prior_cost_s: float):
        self.name, self.prior_acceptance, self.free, self.prior_cost_s = (
            name,
            prior,
            free,
            prior_cost_s,
        )
        self.seen = 0  # context tokens a draft model has read

    def lag(self, n_context: int) -> int:
        return 0 if self.free else max(0, n_context - self.seen)


def _policy(profile: Profile, stands: list[_Stand]) -> AdaptivePolicy:
    costs = CostModel(verify={b: CostAverage(profile.verify(b), weight=1.0) for b in BATCH_SIZES})
    for s in stands:
        if not s.free:
            costs.draft[s.name] = CostAverage(profile.draft_s, weight=1.0)
            costs.prefill[s.name] = profile.draft_prefill_s
    return AdaptivePolicy(
        stands, caps={s.name: (8 if not s.free else MAX_K) for s in stands}, costs=costs
    )


def _session_policy(trace: Trace, profile: Profile, policy_maker, session: dict | None) -> tuple:
    """(policy, stands) for ``trace``'s drafters: the session's for the same drafters, else new."""
    names = tuple(n for n in FREE_DRAFTERS if n in trace.free)
    key = names + (("draft-model",) if trace.draft_next else ())
    if session is not None and key in session:
        return session[key]
    priors = {"prompt-lookup": 0.3, "suffix": 0.5, "prediction": 0.8}
    stands = [_Stand(n, priors[n], True, 3e-5) for n in names]
    if trace.draft_next:
        stands.insert(0, _Stand("draft-model", 0.7, False, profile.draft_s))
    policy = (policy_maker or _policy)(profile, stands)
    if session is not None:
        session[key] = policy, stands
    return policy, stands


def _accepted(tokens: list[int], answer: list[int], j: int) -> int:
    n = 0
    while n < len(tokens) and j + n < len(answer) and tokens[n] == answer[j + n]:
        n += 1
    return n


def _free_draft(trace: Trace, drafter: str, j: int) -> Draft:
    """The recorded free draft (tokens, confidences[, depths]) at j, ended at its first
    end-of-generation token as the live loop ends it."""
    tokens, confidence, depth = (list(trace.free[drafter][j]) + [[]])[:3]
    draft = Draft(
        list(tokens), confidence=list(confidence or []) or None, depth=list(depth or []) or None
    )
    return draft.through_first(trace.eog.__contains__) if trace.eog else draft


def _draft_model_draft(trace: Trace, j: int, k: int) -> Draft:
    """What the draft model proposes at j: its choices along the answer, up to and
    including its first miss (after a miss its further tokens can no longer be accepted)."""
    tokens, conf = [], []
    for i in range(j, min(j + k, len(trace.answer))):
        tokens.append(trace.draft_next[i])
        conf.append(trace.draft_conf[i])
        if trace.draft_next[i] != trace.answer[i]:
            break
    return Draft(tokens, confidence=conf)


def replay(
    trace: Trace,
    profile: Profile,
    policy_maker=None,
    overhead_s: float = 0.0,
    session: dict | None = None,
) -> dict:
    """Run the adaptive policy (``policy_maker(profile, stands)``, default as in
    :class:`~localspec.api.SpeculativeModel`) over ``trace``; returns {"time_s",
    "plain_s", "speedup", "rounds": {drafter: n}}.  ``overhead_s``: our own cost per round.

    ``session``: a dict kept across calls, as one loaded model keeps its policies across
    requests (one per set of drafters: calls with a prediction use their own), so what
    the policy learnt of each drafter's confidences carries from one answer to the next;
    None = a fresh policy for this answer alone."""
    policy, stands = _session_policy(trace, profile, policy_maker, session)
    for s in stands:
        s.seen = 0  # a new prompt: the draft model has read none of it
    policy.new_generation()
    answer, j, time_s, rounds = trace.answer, 1, 0.0, {}
    while j < len(answer):
        n_context = trace.n_prompt + j
        drafter, draft, catch_up_s, draft_s = _replayed_draft(policy, stands, trace, profile, j)
        n = _accepted(draft.tokens, answer, j)
        verify_s = profile.verify(len(draft.tokens) + 1)
        time_s += catch_up_s + draft_s + verify_s + overhead_s
        outcome = RoundOutcome(
            verify_s=verify_s,
            verify_batch=len(draft.tokens) + 1,
            drafter=drafter if draft.tokens else None,
            draft=draft,
            n_accepted=n,
            draft_s=draft_s,
            emitted=tuple(answer[j : j + n + 1]),
        )
        policy.observe(outcome)
        if drafter is not None and not drafter.free:
            drafter.seen = n_context + n
        name = round_label(drafter, draft)
        rounds[name] = rounds.get(name, 0) + 1
        j += n + 1
    plain_s = (len(answer) - 1) * profile.verify(1)
    return {
        "time_s": time_s,
        "plain_s": plain_s,
        "speedup": plain_s / time_s if time_s else 1.0,
        "rounds": rounds,
    }


def _replayed_draft(policy, stands: list[_Stand], trace: Trace, profile: Profile, j: int) -> tuple:
    """(drafter, draft, catch-up seconds, drafting seconds) of the round at answer[j]:
    the policy's plan over the recorded free drafts, or the draft model's recorded view."""
    n_context = trace.n_prompt + j
    proposals = {s.name: _free_draft(trace, s.name, j) for s in stands if s.free}
    k_cap = len(trace.answer) - j  # tokens left, as live (each drafter's own cap is at most MAX_K)
    drafter, k = policy.plan(k_cap, proposals, n_context)
    if drafter is None:
        return None, Draft([]), 0.0, 0.0
    if drafter.free:
        return drafter, proposals[drafter.name].truncated(k), 0.0, 0.0
    draft = _draft_model_draft(trace, j, k)
    catch_up_s = drafter.lag(n_context) * profile.draft_prefill_s
    draft_s = len(draft.tokens) * profile.draft_s
    return drafter, draft.truncated(policy.length(drafter, draft, k)), catch_up_s, draft_s


def replay_fixed(trace: Trace, profile: Profile, drafter: str, k: int) -> float:
    """Speed-up of one drafter at a fixed draft length k (an empty draft: a plain round)."""
    answer, j, time_s, seen = trace.answer, 1, 0.0, 0
    while j < len(answer):
        kk = min(k, len(answer) - j)
        n_context = trace.n_prompt + j
        if drafter == "draft-model":
            draft = _draft_model_draft(trace, j, kk).tokens
            time_s += max(0, n_context - seen) * profile.draft_prefill_s + kk * profile.draft_s
        else:
            draft = _free_draft(trace, drafter, j).tokens[:kk]
        n = _accepted(draft, answer, j)
        time_s += profile.verify(len(draft) + 1)
        seen = n_context + n
        j += n + 1
    return (len(answer) - 1) * profile.verify(1) / time_s


def fixed_acceptance(
    trace: Trace, drafter: str, k: int, max_spec_factor: float | None = None
) -> tuple[int, int, int]:
    """(drafted, accepted, rounds) of a free drafter at a fixed draft length k along the
    greedy answer, each draft cut to ``max_spec_factor`` times the match it rests on (as
    :class:`~localspec.decoding.policy.FixedPolicy` cuts the suffix drafter's; None = no cut).
    Accepted over drafted is the drafter's acceptance rate on this text.  Raises
    ValueError for k < 0 and KeyError for a drafter the trace did not record."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    answer, j, drafted, accepted, rounds = trace.answer, 1, 0, 0, 0
    while j < len(answer):
        recorded = _free_draft(trace, drafter, j)
        tokens, depth = recorded.tokens, recorded.depth
        keep = min(k, len(answer) - j)
        if max_spec_factor is not None and depth:
            keep = min(keep, max(1, int(max_spec_factor * depth[0])))
        n = _accepted(tokens[:keep], answer, j)
        drafted, accepted, rounds = drafted + len(tokens[:keep]), accepted + n, rounds + 1
        j += n + 1
    return drafted, accepted, rounds


def best_fixed(traces: list[Trace], profile: Profile) -> tuple[str, int, float]:
    """The fixed (drafter, k) with the best total decode time over ``traces``, and its
    speed-up (total plain time over total time)."""
    names = sorted({n for t in traces for n in t.free}) + (
        ["draft-model"] if all(t.draft_next for t in traces) else []
    )
    best = ("plain", 0, 1.0)
    plain = sum((len(t.answer) - 1) * profile.verify(1) for t in traces)
    for name in names:
        if any(name not in t.free and name != "draft-model" for t in traces):
            continue
        for k in FIXED_KS:
            total = sum(
                (len(t.answer) - 1) * profile.verify(1) / replay_fixed(t, profile, name, k)
                for t in traces
            )
            if plain / total > best[2]:
                best = (name, k, plain / total)
    return best


def save(traces: list[Trace], path: Path, extra: dict | None = None) -> None:
    path.write_text(json.dumps({**(extra or {}), "traces": [asdict(t) for t in traces]}))


def load(path: Path) -> tuple[list[Trace], dict]:
    data = json.loads(path.read_text())
    traces = [
        Trace(**{**t, "free": {k: [tuple(x) for x in v] for k, v in t["free"].items()}})
        for t in data.pop("traces")
    ]
    return traces, data
