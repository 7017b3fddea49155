"""``localspec bench``: speed of every drafting strategy against plain decoding, side by side.

For each prompt, temperature and repetition, every strategy runs back to back from a
cold KV cache, so each speed-up is a ratio measured in the same minute on the same
machine.  Reported per workload and strategy: median end-to-end t/s, median speed-up
over plain, acceptance rate, mean accepted length, TTFT.  Peers in the same run:
llama-cpp-python's ``LlamaPromptLookupDecoding``; llama.cpp's C++
``llama-speculative-simple`` is noted as skipped unless it is on PATH.
"""

from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from localspec.api import SpeculativeModel, resolve_pair
from localspec.bench.workloads import (
    MTBENCH_CATEGORIES,
    Prompt,
    call_prompts,
    code_prompts,
    edit_prompts,
    measured_turns,
    mtbench_prompts,
    mtbench_second_turns,
    revision_conversations,
)
from localspec.decoding.policy import BATCH_SIZES
from localspec.errors import InvalidOptionError
from localspec.llama.engine import default_threads
from localspec.llama.peer import load_peer_llama, peer_prompt_lookup
from localspec.llama.report import machine_record


@dataclass(frozen=True)
class Strategy:
    name: str
    options: dict = field(default_factory=dict)


PLAIN = Strategy("plain", {"strategy": "none"})
ALL_STRATEGIES = (
    [PLAIN]
    + [
        Strategy(
            f"draft-model k={k} p-min={p}", {"strategy": "draft-model", "draft_max": k, "p_min": p}
        )
        for k in (2, 4, 8)
        for p in (0.0, 0.75)
    ]
    + [
        Strategy("prompt-lookup k=8", {"strategy": "prompt-lookup", "draft_max": 8}),
        Strategy("suffix k=8", {"strategy": "suffix", "draft_max": 8}),
        Strategy("adaptive", {"strategy": "auto", "draft_max": "auto"}),
    ]
)
LOOKUP, SUFFIX, ADAPTIVE = ALL_STRATEGIES[-3:]
# The draft model at a fixed k is left to the full run (and --strategies): on a CPU it
# loses on nearly every row and is the slowest to run.
QUICK_STRATEGIES = [PLAIN, LOOKUP, SUFFIX, ADAPTIVE]
PEER_LOOKUP = "llama-cpp-python prompt lookup"


@dataclass(frozen=True)
class BenchConfig:
    code: int = 3  # HumanEval prompts
    mtbench_per_category: int = 1
    mtbench_categories: tuple[str, ...] = MTBENCH_CATEGORIES  # first turns asked
    edit: int = 3
    calls: int = 10  # BFCL function calls answered under their JSON schema ("json-call")
    second_turns: int = 8  # MT-Bench conversations measured at turn 2
    revisions: int = 3  # three-turn HumanEval revisions, turns 2 and 3 measured
    max_tokens: int = 128
    temperatures: tuple[float, ...] = (0.0, 0.7)
    reps: int = 3
    strategies: tuple[Strategy, ...] = tuple(ALL_STRATEGIES)
    peers: bool = True
    peer_workloads: tuple[str, ...] = ("code", "edit")  # where the peers run (they are slow)

    @classmethod
    def quick(cls) -> BenchConfig:
        """One repetition: 873 s measured on 2 CPU cores at 106 ms per target step, 231 s at 26 ms
        (before the two json-call prompts were added)."""
        return cls(
            code=1,
            mtbench_per_category=1,
            mtbench_categories=("writing", "math", "coding", "extraction"),
            edit=1,
            calls=2,
            second_turns=2,
            revisions=1,
            max_tokens=64,
            reps=1,
            strategies=tuple(QUICK_STRATEGIES),
            peer_workloads=("edit",),
        )

    @classmethod
    def smoke(cls) -> BenchConfig:
        return cls(
            code=1,
            mtbench_per_category=0,
            edit=1,
            calls=1,
            second_turns=0,
            revisions=1,
            max_tokens=16,
            temperatures=(0.0,),
            reps=1,
            strategies=tuple(QUICK_STRATEGIES),
            peers=False,
        )


def chosen_strategies(names: str) -> tuple[Strategy, ...]:
    """The strategies named in ``names`` (comma-separated, as in the results' "strategy"
    column), plain first and always included.  Raises InvalidOptionError on an unknown name."""
    known = {s.name: s for s in ALL_STRATEGIES}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        raise InvalidOptionError("--strategies names no strategy; choose from: " + ", ".join(known))
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise InvalidOptionError(
            f"unknown strategy {unknown[0]!r}; choose from: " + ", ".join(known)
        )
    return (PLAIN,) + tuple(known[n] for n in dict.fromkeys(wanted) if n != PLAIN.name)


def prompts_for(config: BenchConfig, model: SpeculativeModel | None = None) -> list[Prompt]:
    """The benchmark's prompts; multi-turn ones need ``model`` to answer their earlier
    turns (greedy, plain decoding, ``config.max_tokens``), once, before any measurement."""
    prompts = code_prompts(config.code) + edit_prompts(config.edit) + call_prompts(config.calls)
    if config.mtbench_per_category:
        prompts += mtbench_prompts(config.mtbench_per_category, config.mtbench_categories)
    conversations = mtbench_second_turns(1)[: config.second_turns] + revision_conversations(
        config.revisions
    )
    if conversations and model is not None:

        def answer(messages):
            model.reset_cache()
            return model.chat(messages, max_tokens=config.max_tokens, strategy="none").text

        for conversation in conversations:
            prompts += measured_turns(conversation, answer)
    return prompts


def run(config: BenchConfig, log=print) -> dict:
    """Run the benchmark on the default pair; returns {"config", "machine", "rows", "summary"}."""
    pair = resolve_pair()
    n_threads = default_threads()
    rows = []
    peer = _PeerLookup(pair.target, n_threads) if config.peers else None
    with SpeculativeModel(pair.target, pair.draft, n_ctx=4096, n_threads=n_threads) as model:
        prompts = prompts_for(config, model)
        total = len(prompts) * len(config.temperatures) * config.reps
        done = 0
        for rep in range(config.reps):
            for temp in config.temperatures:
                for prompt in prompts:
                    for strategy in config.strategies:
                        rows.append(_run_one(model, prompt, strategy, temp, rep, config.max_tokens))
                    first = len(rows) - len(config.strategies)
                    if peer is not None and prompt.workload in config.peer_workloads:
                        rows.append(peer.run(model, prompt, temp, rep, config.max_tokens))
                    done += 1
                    log(
                        f"[{done}/{total}] {prompt.workload} {prompt.name} T={temp}: "
                        + ", ".join(
                            f"{r['strategy']} {r['tokens_per_s']:.1f}" for r in rows[first:]
                        )
                    )
        ceiling = copy_ceiling(model)
    if peer is not None:
        peer.close()
    peers_note = {
        PEER_LOOKUP: "ran in the same process" if config.peers else "not run",
        "llama-speculative-simple": "on PATH but not driven by this script"
        if shutil.which("llama-speculative-simple")
        else "skipped: not on PATH",
    }
    return {
        "config": {**asdict(config), "strategies": [s.name for s in config.strategies]},
        "machine": machine_record(n_threads),
        "peers": peers_note,
        "ceiling": ceiling,
        "rows": rows,
        "summary": summarize(rows, ceiling["speedup"]),
    }


def copy_ceiling(model: SpeculativeModel) -> dict:
    """This machine's copy ceiling max_b b*c(1)/c(b) from the calibrated verify costs c(b):
    the decode speed-up of a drafter that is always right."""
    policy = model._policy(model.default_draft, greedy=True, predicted=False)
    c1 = policy.costs.verify_s(1)
    best = max(range(1, 18), key=lambda b: b / policy.costs.verify_s(b))
    return {
        "speedup": best * c1 / policy.costs.verify_s(best),
        "batch": best,
        "verify_ms": {b: 1000 * policy.costs.verify_s(b) for b in BATCH_SIZES},
    }


def _run_one(
    model: SpeculativeModel,
    prompt: Prompt,
    strategy: Strategy,
    temp: float,
    rep: int,
    max_tokens: int,
) -> dict:
    model.reset_cache()
    # no answer of another run in the store: each run sees only its own conversation
    model.suffix.reset()
    structured = {"response_format": prompt.response_format} if prompt.response_format else {}
    r = model.chat(
        prompt.messages,
        max_tokens=max_tokens,
        temperature=temp,
        seed=1000 * rep + 7,
        **strategy.options,
        **structured,
    )
    s = r.stats
    return {
        "workload": prompt.workload,
        "prompt": prompt.name,
        "strategy": strategy.name,
        "temperature": temp,
        "rep": rep,
        "tokens": len(r.tokens),
        "total_s": s.total_s,
        "tokens_per_s": len(r.tokens) / s.total_s if s.total_s else 0.0,
        "decode_tokens_per_s": s.tokens_per_s,
        "acceptance_rate": s.acceptance_rate,
        "mean_accepted_length": s.mean_accepted_length,
        "drafted_tokens": s.drafted_tokens,
        "accepted_tokens": s.accepted_tokens,
        "ttft_s": s.ttft_s,
        "overhead_share": s.overhead_s / max(s.total_s - s.ttft_s, 1e-9),
        "overhead_ms_per_round": s.overhead_ms_per_round,
        "rounds_by_drafter": s.rounds_by_drafter,
    }


class _PeerLookup:
    """llama-cpp-python's own ``Llama(draft_model=LlamaPromptLookupDecoding(...))``."""

    def __init__(self, target: Path, n_threads: int):
        # logits_all is required by its draft path; n_ctx 2048 bounds that buffer (1.2 GB).
        self.llm = load_peer_llama(
            target,
            n_ctx=2048,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            logits_all=True,
            draft_model=peer_prompt_lookup(10),
            flash_attn=True,
            verbose=False,
        )

    def run(
        self, model: SpeculativeModel, prompt: Prompt, temp: float, rep: int, max_tokens: int
    ) -> dict:
        tokens = model.target.chat_tokens(prompt.messages)
        self.llm.reset()
        start = time.perf_counter()
        out = self.llm.create_completion(
            tokens,
            max_tokens=max_tokens,
            temperature=temp,
            top_k=40 if temp else 1,
            top_p=0.95,
            min_p=0.05,
            seed=1000 * rep + 7,
        )
        total = time.perf_counter() - start
        n = out["usage"]["completion_tokens"]
        return {
            "workload": prompt.workload,
            "prompt": prompt.name,
            "strategy": PEER_LOOKUP,
            "temperature": temp,
            "rep": rep,
            "tokens": n,
            "total_s": total,
            "tokens_per_s": n / total if total else 0.0,
            "decode_tokens_per_s": None,
            "acceptance_rate": None,
            "mean_accepted_length": None,
            "ttft_s": None,
            "overhead_share": None,
            "overhead_ms_per_round": None,
            "rounds_by_drafter": {},
        }

    def close(self) -> None:
        self.llm.close()


def workload_group(workload: str) -> str:
    return "mtbench" if workload.startswith("mtbench") else workload


def _grouped(rows: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """The rows by (workload, temperature, strategy), in workload and temperature order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["temperature"], r["strategy"]), []).append(r)
    return sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1]))


def summarize(rows: list[dict], ceiling: float | None = None) -> list[dict]:
    """Median speed-up over plain (paired by prompt, temperature and repetition) per
    workload, temperature and strategy, plus medians of the other figures but acceptance,
    which is pooled over the runs (their accepted over their drafted tokens) where the rows
    count them, since a rate's median over runs of a few drafted tokens each swings with
    one token (older rows without counts: the median of their rates); with the
    machine's copy ``ceiling``, each speed-up's share of the way to it, (s - 1) / (ceiling - 1).

    The speed-up compares decode speed (tokens after the first over the time after the
    first), which every strategy starts from the same prompt eval; peers that do not
    report it are compared end to end."""
    plain = {
        (r["workload"], r["prompt"], r["temperature"], r["rep"]): r
        for r in rows
        if r["strategy"] == "plain"
    }

    def speedup(r):
        base = plain.get((r["workload"], r["prompt"], r["temperature"], r["rep"]))
        if base is None:
            return None
        key = "decode_tokens_per_s" if r["decode_tokens_per_s"] else "tokens_per_s"
        return r[key] / base[key] if base[key] else None

    out = []
    for (workload, temp, strategy), rs in _grouped(rows):
        speedups = [x for x in map(speedup, rs) if x is not None]

        def med(key, rs=rs):
            values = [r[key] for r in rs if r[key] is not None]
            return statistics.median(values) if values else None

        s = statistics.median(speedups) if speedups else None
        out.append(
            {
                "workload": workload,
                "temperature": temp,
                "strategy": strategy,
                "runs": len(rs),
                "tokens_per_s": med("tokens_per_s"),
                "decode_tokens_per_s": med("decode_tokens_per_s"),
                "speedup": s,
                "share_of_ceiling": (s - 1) / (ceiling - 1)
                if s is not None and ceiling and ceiling > 1
                else None,
                "overhead_ms_per_round": med("overhead_ms_per_round"),
                "acceptance_rate": _pooled_acceptance(rs)
                if _counted(rs)
                else med("acceptance_rate"),
                "mean_accepted_length": med("mean_accepted_length"),
                "ttft_s": med("ttft_s"),
                "overhead_share_max": max(
                    (r["overhead_share"] for r in rs if r["overhead_share"] is not None),
                    default=None,
                ),
            }
        )
    return out


def _counted(rows: list[dict]) -> bool:
    return all(r.get("drafted_tokens") is not None for r in rows)


def _pooled_acceptance(rows: list[dict]) -> float:
    """Accepted over drafted tokens of all ``rows`` together (llama.cpp's n_accept / n_draft):
    a run that drafted 60 tokens weighs more than one that drafted 5."""
    drafted = sum(r["drafted_tokens"] for r in rows)
    return sum(r["accepted_tokens"] for r in rows) / drafted if drafted else 0.0
