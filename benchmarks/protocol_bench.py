"""Do the Anthropic Messages and OpenAI Responses paths decode as fast as chat completions?

    .venv/bin/python benchmarks/protocol_bench.py             # HumanEval/0-9, 128 tokens, 2 rounds (about 8 min)
    .venv/bin/python benchmarks/protocol_bench.py --prompts 2 --rounds 1

The same user messages go, greedy and with the adaptive default, to
``/v1/chat/completions``, ``/v1/messages`` and ``/v1/responses``, each path on a fresh
``localspec serve`` of its own (as the README starts it) that gets every prompt in the
same order, over plain HTTP: each path's server has then seen the same earlier answers
(the suffix drafter copies from them), so no path gains from another's.  The paths'
order rotates from round to round.  Decode speed is the ``timings.predicted_per_second``
every path returns.  Reported: the median over prompts and rounds of each path's t/s over
chat's for the same prompt and round.

Written to benchmarks/results/protocols-<machine>.json with the machine record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import urllib.request
from pathlib import Path

from local_server import free_port, localspec_serve, running

from localspec.bench.workloads import code_prompts
from localspec.llama.report import machine_line, machine_record

N_TOKENS = 128


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", "x-api-key": "none"}
    )
    with urllib.request.urlopen(request, timeout=600) as r:
        return json.loads(r.read())


def _bodies(text: str) -> dict[str, tuple[str, dict]]:
    message = [{"role": "user", "content": text}]
    return {
        "chat": ("/v1/chat/completions", {"model": "m", "messages": message, "max_tokens": N_TOKENS, "temperature": 0}),
        "messages": ("/v1/messages", {"model": "m", "messages": message, "max_tokens": N_TOKENS, "temperature": 0}),
        "responses": ("/v1/responses", {"model": "m", "input": text, "max_output_tokens": N_TOKENS, "temperature": 0}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    prompts = code_prompts(args.prompts)
    rows = [{"prompt": p.name, "round": r, "tps": {}} for r in range(args.rounds) for p in prompts]
    names = list(_bodies("").keys())
    for round_no in range(args.rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            port = free_port()
            with running(localspec_serve(port), port) as base:
                for i, prompt in enumerate(prompts):
                    path, body = _bodies(prompt.text)[name]
                    tps = _post(base + path, body)["timings"]["predicted_per_second"]
                    rows[round_no * len(prompts) + i]["tps"][name] = tps
                    print(f"{prompt.name} round {round_no} {name}: {tps:.1f} t/s", file=sys.stderr, flush=True)
    summary = {
        f"{name}_over_chat": statistics.median(r["tps"][name] / r["tps"]["chat"] for r in rows)
        for name in ("messages", "responses")
    }
    summary["chat_tps_median"] = statistics.median(r["tps"]["chat"] for r in rows)
    print(json.dumps(summary, indent=1))
    path = Path(args.out) / f"protocols-{record['cpu'].lower().replace(' ', '-')}.json"
    command = " ".join(["benchmarks/protocol_bench.py", *sys.argv[1:]])
    path.write_text(
        json.dumps({"machine": record, "command": command, "summary": summary, "rows": rows}, indent=1) + "\n"
    )
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
