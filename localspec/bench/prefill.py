"""``localspec bench prefill``: reading a long prompt, the library, the server and
llama-cpp-python side by side.

    localspec bench prefill                   # 2,048, 8,192 and 16,384 tokens, 5 interleaved
    repeats localspec bench prefill --reps 3 --tokens 2048,8192 localspec bench prefill --smoke
    # 512 tokens, 1 repeat

The prompt is real text (:func:`localspec.bench.workloads.real_text`: MT-Bench questions and
HumanEval problems with their solutions), tokenized with the target's tokenizer, cut to the
token count and turned back into text; every reader gets that text and tokenizes it itself
(each run's own count is written as ``prompt_n``).  Every run is a fresh process, the
context ``tokens + 256``:

- ``library``: :class:`~localspec.api.SpeculativeModel` as loaded by default (the default
  pair, the adaptive default), ``generate(text, max_tokens=1)``; prompt seconds are the
  ``prompt_eval_s`` of its statistics (both models' prompt decodes);
- ``server``: ``localspec serve -c CTX``, one ``/v1/completions`` request through the openai
  client, ``max_tokens`` 1; prompt seconds from its ``timings.prompt_ms``;
- ``llama-cpp-python``: ``Llama(target, n_batch=512, flash_attn=True)`` (as ``localspec bench
  engine`` loads it), ``Llama.eval(tokens)`` timed around the call.

Prompt t/s is the prompt's tokens over those seconds.  Repeats are interleaved (each repeat
runs every size and reader, the readers' order rotated per repeat); per size, each reader's
median, the ratios of the medians to llama-cpp-python's, and each repeat's paired ratios.

Written to ``prefill-<machine>-<date>-<commit>.{json,md,png}`` in ``--out``
(``prefill-smoke.*`` for ``--smoke``: no plot), rewritten after each repeat.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from localspec.bench.cli import add_out, add_smoke, positive

NAME = "prefill"
HELP = (
    "prompt t/s at 2 k, 8 k and 16 k real tokens: the library, localspec serve and llama-cpp-python"
)
KIND = "prefill"
SIZES = (2048, 8192, 16384)
READERS = ("library", "server", "llama-cpp-python")
MARGIN = 256  # context cells beyond the prompt: the one answer token, a template's few
PEER_OPTIONS = {"n_batch": 512, "flash_attn": True}


def cut_texts(target: Path, sizes, directory: Path) -> dict[int, Path]:
    """:func:`real_text` cut to each of ``sizes`` tokens of ``target``'s tokenizer, one file
    each in ``directory``; InvalidOptionError when the text is shorter than a size."""
    from localspec.bench.workloads import real_text
    from localspec.errors import InvalidOptionError
    from localspec.llama.peer import load_peer_llama

    vocab = load_peer_llama(target, vocab_only=True, verbose=False)
    tokens = vocab.tokenize(real_text().encode(), add_bos=False, special=False)
    if max(sizes) > len(tokens):
        raise InvalidOptionError(
            f"the real text holds {len(tokens)} tokens, fewer than {max(sizes)}"
        )
    out = {}
    for n in sizes:
        out[n] = directory / f"prompt-{n}.txt"
        out[n].write_text(
            vocab.detokenize(tokens[:n]).decode("utf-8", errors="ignore"), encoding="utf-8"
        )
    vocab.close()
    return out


def library_child(
    text_path: str, n_ctx: int, target: str | None = None, draft: str | None = "auto"
) -> dict:
    """The library reading the prompt at ``text_path`` (the default pair unless given):
    its token count, seconds and time to the first token."""
    from localspec.api import load

    with load(target, draft, n_ctx=n_ctx) as model:
        s = model.generate(
            Path(text_path).read_text(encoding="utf-8"), max_tokens=1, temperature=0
        ).stats
    return {"prompt_n": s.prompt_eval_tokens, "prompt_s": s.prompt_eval_s, "ttft_s": s.ttft_s}


def peer_child(text_path: str, n_ctx: int, target: str | None = None) -> dict:
    """llama-cpp-python's ``Llama.eval`` on the prompt at ``text_path`` (the default
    target unless given): its token count and seconds."""
    import time

    from localspec.api import resolve_pair
    from localspec.llama.engine import default_threads
    from localspec.llama.peer import load_peer_llama

    threads = default_threads()
    llm = load_peer_llama(
        target or resolve_pair(None, None).target,
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        **PEER_OPTIONS,
    )
    tokens = llm.tokenize(
        Path(text_path).read_text(encoding="utf-8").encode(), add_bos=True, special=False
    )
    started = time.perf_counter()
    llm.eval(tokens)
    seconds = time.perf_counter() - started
    llm.close()
    return {"prompt_n": len(tokens), "prompt_s": seconds}


def run_child(function: str, text_path: Path, n_ctx: int) -> dict:
    """``function`` of this module in a fresh interpreter; RuntimeError with its output when it
    fails."""
    code = (
        "import json; from localspec.bench import prefill; "
        f"print(json.dumps(prefill.{function}({str(text_path)!r}, {n_ctx})))"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"prefill.{function} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def server_run(text_path: Path, n_ctx: int) -> dict:
    from localspec.bench.client import openai_client, timings_of
    from localspec.bench.servers import serving

    with serving("-c", str(n_ctx)) as base:
        answer = openai_client(base, timeout=3600).completions.create(
            model="m", prompt=text_path.read_text(encoding="utf-8"), max_tokens=1, temperature=0
        )
    t = timings_of(answer)
    return {
        "prompt_n": t.get("prompt_n") or answer.usage.prompt_tokens,
        "prompt_s": t["prompt_ms"] / 1000,
    }


def measure(reader: str, text_path: Path, n_ctx: int) -> dict:
    got = (
        server_run(text_path, n_ctx)
        if reader == "server"
        else run_child(_CHILDREN[reader], text_path, n_ctx)
    )
    return {**got, "prompt_tps": got["prompt_n"] / got["prompt_s"] if got["prompt_s"] else 0.0}


_CHILDREN = {"library": "library_child", "llama-cpp-python": "peer_child"}


def rotated(rep: int) -> tuple[str, ...]:
    """The readers' order in repeat ``rep``: each reader first in turn."""
    k = rep % len(READERS)
    return READERS[k:] + READERS[:k]


def summary(runs: dict) -> list[dict]:
    """Per size: each reader's median prompt t/s, the medians' ratios to llama-cpp-python's
    and the paired ratio of each repeat (``runs[size][reader]``: one row per repeat)."""
    rows = []
    for size, by_reader in runs.items():
        medians = {
            r: statistics.median(x["prompt_tps"] for x in got)
            for r, got in by_reader.items()
            if got
        }
        peer = by_reader.get("llama-cpp-python") or []
        row = {"tokens": int(size), "median_prompt_tps": medians}
        for r in ("library", "server"):
            if medians.get(r) and medians.get("llama-cpp-python"):
                row[f"{r}_over_llama_cpp_python"] = medians[r] / medians["llama-cpp-python"]
                pairs = zip(by_reader[r], peer)
                row[f"{r}_over_llama_cpp_python_per_rep"] = [
                    a["prompt_tps"] / b["prompt_tps"] for a, b in pairs
                ]
        rows.append(row)
    return rows


def markdown(result: dict) -> str:
    from localspec.llama.report import machine_line

    def f(x, fmt=".1f"):
        return "" if x is None else format(x, fmt)

    lines = [
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"Real text, {result['reps']} interleaved repeats, a fresh process per run; prompt t/s, "
        "median.",
        "",
        "| tokens | library | server | llama-cpp-python `Llama.eval` | library ÷ "
        "llama-cpp-python | server ÷ llama-cpp-python |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["summary"]:
        m = row["median_prompt_tps"]
        lines.append(
            f"| {row['tokens']:,} | {f(m.get('library'))} | {f(m.get('server'))} | "
            f"{f(m.get('llama-cpp-python'))} "
            f"| {f(row.get('library_over_llama_cpp_python'), '.2f')} | "
            f"{f(row.get('server_over_llama_cpp_python'), '.2f')} |"
        )
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = [row["tokens"] for row in result["summary"]]
    for reader in READERS:
        ax.plot(
            sizes,
            [row["median_prompt_tps"].get(reader) for row in result["summary"]],
            marker="o",
            label=reader,
        )
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("prompt t/s (median)")
    ax.set_xticks(sizes)
    ax.set_title(f"prompt reading, {result['reps']} repeats", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(parser) -> None:
    parser.add_argument(
        "--reps",
        type=int,
        default=5,
        help="interleaved repeats (default 5; the median is reported)",
    )
    parser.add_argument(
        "--tokens",
        default=",".join(map(str, SIZES)),
        metavar="N,N",
        help="prompt sizes (default 2048,8192,16384)",
    )
    add_smoke(parser, "512 tokens, 1 repeat")
    add_out(parser)


def sizes_of(text: str) -> tuple[int, ...]:
    """``--tokens``' sizes; InvalidOptionError for anything but positive integers."""
    from localspec.errors import InvalidOptionError

    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidOptionError(
            f"--tokens takes comma-separated token counts, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 16:
        raise InvalidOptionError(f"--tokens takes counts of at least 16 tokens, got {text!r}")
    return sizes


def check(args) -> None:
    positive("--reps", args.reps)
    sizes_of(args.tokens)


def main(args) -> int:
    from localspec.api import resolve_pair
    from localspec.bench.results import Results
    from localspec.llama.report import machine_line, machine_record

    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    sizes, reps = ((512,), 1) if args.smoke else (sizes_of(args.tokens), args.reps)
    results = Results(args.out, KIND, record, smoke=args.smoke)
    result: dict = {"reps": reps, "margin": MARGIN, "peer_options": PEER_OPTIONS}
    runs: dict = {n: {r: [] for r in READERS} for n in sizes}
    with tempfile.TemporaryDirectory(prefix="localspec-prefill-") as tmp:
        texts = cut_texts(resolve_pair(None, None).target, sizes, Path(tmp))
        for rep in range(reps):
            for n in sizes:
                for reader in rotated(rep):
                    got = measure(reader, texts[n], n + MARGIN)
                    runs[n][reader].append(got)
                    print(
                        f"repeat {rep + 1}/{reps}, {n} tokens, {reader}: {got['prompt_tps']:.1f} "
                        "prompt t/s "
                        f"({got['prompt_n']} tokens in {got['prompt_s']:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
            result |= {"runs": runs, "summary": summary(runs)}
            results.write(result, markdown({**results.header(), **result}))
    text = markdown({**results.header(), **result})
    if not args.smoke:
        results.write(result, text, lambda path: plot(result, path))
    print(text)
    results.done()
    return 0
