"""Structured output under speculation: BFCL function calls as JSON-schema answers.

    .venv/bin/python benchmarks/structured_bench.py             # simple_python 0-39, about 10 minutes on 2 cores
    .venv/bin/python benchmarks/structured_bench.py --cases 4   # a quick look

Each case (``localspec.bench.bfcl``: the Berkeley Function Calling Leaderboard's
``simple_python`` questions, the call asked for as ``{"name", "arguments"}`` under a schema
built from the function) is answered greedily by the default pair three ways, one after the
other in one process: free text with no drafting (unconstrained plain), under the schema with
no drafting (constrained plain), and under the schema with the adaptive default (the
grammar's forced text, suffix, prompt lookup and the draft model as drafters).  Decode speed
is llama.cpp server's ``predicted_per_second`` computed from the statistics (tokens after
the first over the time after the first).  Reported: median ratios per case, the share of
constrained answers that parse and validate, and BFCL's AST check of the call.

Written to benchmarks/results/structured-<machine>.json with the machine record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import jsonschema

from localspec.api import load
from localspec.bench.bfcl import bfcl_cases, call_matches, call_prompt, call_schema
from localspec.llama.report import machine_line, machine_record
from localspec.server.openai_shapes import timings

MAX_TOKENS = 128


def _decode_tps(result) -> float:
    return timings(result)["predicted_per_second"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    record = machine_record()
    print(f"machine: {machine_line(record)}", file=sys.stderr)
    rows = []
    with load() as model:
        for case in bfcl_cases("simple_python", args.cases):
            messages = call_prompt(case)
            schema = call_schema(case)
            fmt = {"type": "json_schema", "json_schema": {"name": "call", "schema": schema}}
            free = model.chat(messages, max_tokens=MAX_TOKENS, strategy="none")
            plain = model.chat(messages, max_tokens=MAX_TOKENS, strategy="none", response_format=fmt)
            spec = model.chat(messages, max_tokens=MAX_TOKENS, response_format=fmt)
            row = {
                "id": case.id,
                "free_tps": _decode_tps(free),
                "constrained_plain_tps": _decode_tps(plain),
                "adaptive_tps": _decode_tps(spec),
                "tokens": len(spec.tokens),
                "drafted": spec.stats.drafted_by_drafter,
                "accepted": spec.stats.accepted_by_drafter,
                "same_text": plain.text == spec.text,
            }
            try:
                call = json.loads(spec.text)
                jsonschema.validate(call, schema)
                row["valid"], row["ast_match"] = True, call_matches(case, call)
            except (ValueError, jsonschema.ValidationError):
                row["valid"], row["ast_match"] = False, False
            rows.append(row)
            print(
                f"{case.id}: x{row['adaptive_tps'] / row['constrained_plain_tps']:.2f} "
                f"valid {row['valid']} ast {row['ast_match']} drafted {row['drafted']}",
                file=sys.stderr,
            )
    summary = {
        "cases": len(rows),
        "adaptive_over_constrained_plain": statistics.median(
            r["adaptive_tps"] / r["constrained_plain_tps"] for r in rows
        ),
        "constrained_plain_over_free_plain": statistics.median(
            r["constrained_plain_tps"] / r["free_tps"] for r in rows
        ),
        "valid_share": sum(r["valid"] for r in rows) / len(rows),
        "ast_accuracy": sum(r["ast_match"] for r in rows) / len(rows),
        "same_text_share": sum(r["same_text"] for r in rows) / len(rows),
        "grammar_tokens_drafted": sum(r["drafted"].get("grammar", 0) for r in rows),
        "grammar_tokens_accepted": sum(r["accepted"].get("grammar", 0) for r in rows),
    }
    print(json.dumps(summary, indent=1))
    name = record["cpu"].lower().replace(" ", "-")
    path = Path(args.out) / f"structured-{name}.json"
    path.write_text(
        json.dumps(
            {
                "machine": record,
                "command": " ".join(["benchmarks/structured_bench.py", *sys.argv[1:]]),
                "max_tokens": MAX_TOKENS,
                "summary": summary,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
