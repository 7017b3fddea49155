"""``localspec bench protocols``: do the Anthropic Messages and OpenAI Responses paths decode
as fast as chat completions?

    localspec bench protocols             # HumanEval/0-9, 128 tokens, 2 rounds (about 8 min)
    localspec bench protocols --prompts 2 --rounds 1

The same user messages go, greedy and with the adaptive default, to
``/v1/chat/completions``, ``/v1/messages`` and ``/v1/responses``, each path on a fresh
``localspec serve`` of its own (as the README starts it) that gets every prompt in the
same order, over plain HTTP: each path's server has then seen the same earlier answers
(the suffix drafter copies from them), so no path gains from another's.  The paths'
order rotates from round to round.  Decode speed is the ``timings.predicted_per_second``
every path returns.  Reported: the median over prompts and rounds of each path's t/s over
chat's for the same prompt and round.

With ``--endpoint URL`` every path goes to that running server instead (it must answer all
three and return ``timings``, as llama-server does).  Written to
``protocols-<machine>-<date>-<commit>.json`` in ``--out``.
"""

from __future__ import annotations

import json
import statistics
import sys

from localspec.bench.cli import add_out, add_peers, add_smoke, positive
from localspec.bench.client import decode_tps, post_json
from localspec.bench.results import Results
from localspec.bench.servers import serving
from localspec.bench.workloads import code_prompts
from localspec.llama.report import machine_line, machine_record

NAME = "protocols"
HELP = (
    "chat completions, Anthropic Messages and OpenAI Responses on one server, decode t/s side "
    "by side"
)

N_TOKENS = 128


def _bodies(text: str) -> dict[str, tuple[str, dict]]:
    message = [{"role": "user", "content": text}]
    return {
        "chat": (
            "/v1/chat/completions",
            {"model": "m", "messages": message, "max_tokens": N_TOKENS, "temperature": 0},
        ),
        "messages": (
            "/v1/messages",
            {"model": "m", "messages": message, "max_tokens": N_TOKENS, "temperature": 0},
        ),
        "responses": (
            "/v1/responses",
            {"model": "m", "input": text, "max_output_tokens": N_TOKENS, "temperature": 0},
        ),
    }


def add_arguments(parser) -> None:
    parser.add_argument("--prompts", type=int, default=10, help="HumanEval prompts (from 0)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds, the paths' order rotated each round"
    )
    add_peers(parser, llama_server=False)
    add_smoke(parser, "1 prompt, 1 round")
    add_out(parser)


def check(args) -> None:
    positive("--prompts", args.prompts)
    positive("--rounds", args.rounds)


def main(args) -> int:
    n_prompts, rounds = (1, 1) if args.smoke else (args.prompts, args.rounds)
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    prompts = code_prompts(n_prompts)
    rows = [{"prompt": p.name, "round": r, "tps": {}} for r in range(rounds) for p in prompts]
    names = list(_bodies("").keys())
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            with serving(endpoint=args.endpoint) as base:
                for i, prompt in enumerate(prompts):
                    path, body = _bodies(prompt.text)[name]
                    tps = decode_tps(post_json(base + path, body))
                    rows[round_no * len(prompts) + i]["tps"][name] = tps
                    print(
                        f"{prompt.name} round {round_no} {name}: {tps:.1f} t/s",
                        file=sys.stderr,
                        flush=True,
                    )
    summary = {
        f"{name}_over_chat": statistics.median(r["tps"][name] / r["tps"]["chat"] for r in rows)
        for name in ("messages", "responses")
    }
    summary["chat_tps_median"] = statistics.median(r["tps"]["chat"] for r in rows)
    print(json.dumps(summary, indent=1))
    results = Results(args.out, NAME, record, smoke=args.smoke)
    results.write({"endpoint": args.endpoint, "summary": summary, "rows": rows})
    results.done()
    return 0
