"""``localspec bench concurrency --fresh``: several clients at once on prompts no server has
seen, the adaptive default against plain decoding, and whether their greedy answers agree.

    localspec bench concurrency --fresh                     # 1, 2, 4, 8 clients
    localspec bench concurrency --fresh --llama-server PATH # llama-server plain beside them
    localspec bench concurrency --fresh --smoke             # 2 clients, 2 prompts, 16 tokens

Two prompt sets, each measured on every server:

- ``fresh``: MT-Bench first turns (prose) and HumanEval prompts (code), alternating, in an
  order drawn from ``--seed`` (a new seed each run unless given, written to the result), so
  a repeated run sends other prompts than the last
  (:func:`~localspec.bench.workloads.fresh_prompts`);
- ``committed``: the prompts ``localspec bench concurrency`` sends
  (:func:`~localspec.bench.concurrency.committed_prompts`), beside them.

Servers, each a fresh process per prompt set (no prompt cache, no suffix store from an
earlier set or mode): ``localspec serve --draft none`` (plain), ``localspec serve``
(default), and ``llama-server -np 4 -c 4096`` plain (``--llama-server PATH``, else
``llama-server`` on ``PATH``; skipped with a printed line when there is none).  At each of
1, 2, 4 and 8 clients, 3 N requests (three waves), greedy, 64 tokens, the same prompts for
every server; the async openai client, streaming (:func:`localspec.bench.clients_at_once.level`).

Reported per set and clients: aggregate t/s per server (completion tokens / wall seconds),
default / plain and default / llama-server plain, and the greedy equality count: how many
of default's answers are plain's text, and for each that is not, the prompt, the first
differing character and a few characters of each answer from there.

Written to ``concurrency-fresh-<machine>-<date>-<commit>.{json,md,png}`` in ``--out``
(``concurrency-fresh-smoke.*`` for ``--smoke``: no plot), rewritten after each server.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from localspec.bench.clients_at_once import ACCOUNT, Starter
from localspec.bench.ratios import interval_text, mean_interval
from localspec.bench.servers import free_port, llama_server, running, serving
from localspec.bench.workloads import Prompt, concurrency_prompts, fresh_prompts
from localspec.llama.report import machine_line

KIND = "concurrency-fresh"
PLAIN, DEFAULT, LLAMA = "localspec plain", "localspec default", "llama-server plain"
WAVES = 3
SNIPPET = 24  # characters of each answer shown from the first difference on


def first_difference(a: str, b: str) -> int | None:
    """The index of the first character where ``a`` and ``b`` differ (the shorter one's
    length when one is the other's start), None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def equality(default: list[str], plain: list[str], names: list[str]) -> dict:
    """How many of ``default``'s answers equal ``plain``'s (same prompts, same order), and
    for each that differs its prompt (``names``), the first differing character and
    :data:`SNIPPET` characters of each answer from there."""
    differ = []
    for name, a, b in zip(names, default, plain):
        at = first_difference(a, b)
        if at is not None:
            differ.append(
                {
                    "prompt": name,
                    "position": at,
                    "default": a[at : at + SNIPPET],
                    "plain": b[at : at + SNIPPET],
                    "default_answer": a,
                    "plain_answer": b,
                }
            )
    compared = min(len(default), len(plain))
    return {"equal": compared - len(differ), "compared": compared, "differ": differ}


def classify(summary: list[dict], work: dict[int, list[Prompt]], model) -> None:
    """Mark each divergence of ``summary`` (:func:`compare`'s rows) with the fresh prefill's
    top-2 gap where the two answers part (``model``: the target, loaded plainly), against twice
    this machine's path noise on that prompt (docs/exactness.md): ``near_tie`` True where the
    gap is under it, as greedy speculation may part there; False is a finding to look into."""
    from localspec.bench.noise import fresh_gap, path_noise

    prompts = {p.name: p for prompts in work.values() for p in prompts}
    for row in summary:
        for d in row.get("equality", {}).get("differ", []):
            messages = prompts[d["prompt"]].messages
            prompt = model.target.chat_tokens(messages)
            plain = model.target.tokenize(d["plain_answer"], add_special=False)
            other = model.target.tokenize(d["default_answer"], add_special=False)
            at = next((i for i, (a, b) in enumerate(zip(plain, other)) if a != b), None)
            if at is None or at >= len(plain):
                d.update(gap=None, tolerance=None, near_tie=None)  # parted within one token
                continue
            tolerance = 2 * path_noise(model, prompt, plain[: max(at + 1, 8)])
            gap = fresh_gap(model, prompt, plain, at)
            d.update(gap=gap, tolerance=tolerance, near_tie=gap < tolerance)


def split(pool: list[Prompt], levels, waves: int) -> dict[int, list[Prompt]]:
    """Each level's own prompts from ``pool``: ``waves`` × clients of them, in order."""
    out, start = {}, 0
    for n in levels:
        out[n] = pool[start : start + waves * n]
        start += waves * n
    return out


def llama_server_binary(given: str | None) -> str | None:
    """``--llama-server PATH``, else ``llama-server`` on ``PATH``, else None (said once)."""
    found = given or shutil.which("llama-server")
    if found is None:
        print(
            "llama-server: no binary found (--llama-server PATH); its plain column is skipped",
            file=sys.stderr,
        )
    return found


def servers(pair, binary: str | None) -> list[tuple[str, Starter]]:
    """The servers to measure, by name, each a function that starts a fresh one."""
    out: list[tuple[str, Starter]] = [
        (PLAIN, lambda: serving("--draft", "none")),
        (DEFAULT, lambda: serving()),
    ]
    if binary:
        args = ["-m", str(pair.target), "-c", "4096", "-np", "4"]
        out.append((LLAMA, lambda: start_llama_server(binary, *args)))
    return out


@contextmanager
def start_llama_server(binary: str, *args: str) -> Iterator[str]:
    """A fresh ``llama-server`` at ``binary`` with ``args`` on a free port; its base URL."""
    port = free_port()
    with running(llama_server(binary, port, *args), port) as base:
        yield base


def compare(results: dict, work: dict[int, list[Prompt]]) -> list[dict]:
    """Per level: aggregate t/s of each server, the ratios to plain and to llama-server
    plain, and the greedy equality of default and plain (:func:`equality`)."""
    rows = []
    for n, prompts in work.items():
        at = {
            name: next((r for r in got if r["clients"] == n), None) for name, got in results.items()
        }
        tps = {name: r["aggregate_tps"] for name, r in at.items() if r is not None}
        row: dict = {"clients": n, "aggregate_tps": tps}
        if tps.get(DEFAULT) and tps.get(PLAIN):
            row["default_over_plain"] = tps[DEFAULT] / tps[PLAIN]
            row["per_request"] = per_request(at[DEFAULT], at[PLAIN])
            row["attribution"] = at[DEFAULT].get("against_plain_s") or {}
            row["plain_batch_wait"] = (at[PLAIN].get("against_plain_s") or {}).get("batch_wait")
            row["equality"] = equality(
                at[DEFAULT]["answers"], at[PLAIN]["answers"], [p.name for p in prompts]
            )
        if tps.get(DEFAULT) and tps.get(LLAMA):
            row["default_over_llama_server_plain"] = tps[DEFAULT] / tps[LLAMA]
        rows.append(row)
    return rows


def per_request(default: dict, plain: dict) -> dict:
    """Each prompt's request speed under default over plain's (the same prompt, the same
    place in the level's queue): their mean with its 95 % interval
    (:func:`~localspec.bench.ratios.mean_interval`), the pairs the aggregate ratio has no
    spread for.  Empty where a level has no per-request speeds (results of an older run)."""
    pairs = zip(default.get("request_tps") or (), plain.get("request_tps") or ())
    ratios = [d / p for d, p in pairs if p > 0]
    return mean_interval(ratios) if ratios else {}


def markdown(result: dict) -> str:
    lines = [
        f"Machine: {machine_line(result['machine'])}.",
        "",
        f"{result['max_tokens']} tokens, greedy, {result['waves']} waves; fresh prompts drawn "
        f"with seed {result['seed']}.",
    ]
    for set_name, got in result["sets"].items():
        lines += [
            "",
            f"**{set_name} prompts**, aggregate t/s:",
            "",
            f"| clients | {PLAIN} | {DEFAULT} | {LLAMA} | default ÷ plain | default ÷ plain "
            "per request, mean [95 % interval] | default ÷ llama-server plain "
            "| default's answers equal to plain's |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in got["summary"]:
            lines.append(_table_row(row))
        lines += _attribution_table(got["summary"])
        for row in got["summary"]:
            for d in row.get("equality", {}).get("differ", []):
                lines.append(
                    f"- {row['clients']} clients, {d['prompt']}: from character {d['position']}, "
                    f"default {d['default']!r}, plain {d['plain']!r}{_verdict(d)}"
                )
    return "\n".join(lines) + "\n"


def _attribution_table(summary: list[dict]) -> list[str]:
    """Where default's time went against plain decoding, per level: the server's account,
    mean seconds per request (:func:`~localspec.bench.clients_at_once.account_per_request`);
    beside it plain's own batch waits (its decodes wait for the other sequences' rounds too)
    and default's net with those added back: what default's drafting itself cost or won."""
    rows = [r for r in summary if r.get("attribution")]
    if not rows:
        return []
    lines = [
        "",
        "Where default's time went against plain decoding, mean seconds per request (the "
        "server's account; net: won − lost − catch-up − draft prompt − policy − batch waits; "
        "plain's decodes wait for each other too, and the last column adds its waits back):",
        "",
        "| clients | won | lost | catch-up | draft prompt | policy | batch waits | net "
        "| plain's batch waits | net beside plain's waits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = " | ".join(f"{r['attribution'][k]:+.2f}" for k in ACCOUNT)
        plain_waits = r.get("plain_batch_wait")
        beside = (
            f"{plain_waits:.2f} | {r['attribution']['net'] + plain_waits:+.2f}"
            if plain_waits is not None
            else " | "
        )
        lines.append(f"| {r['clients']} | {cells} | {beside} |")
    return lines + [""]


def _verdict(d: dict) -> str:
    """What :func:`classify` said of a divergence ("" before it ran)."""
    if d.get("gap") is None:
        return ""
    kind = "a near-tie" if d["near_tie"] else "NOT a near-tie"
    return f": {kind} (fresh top-2 gap {d['gap']:.3f}, tolerance {d['tolerance']:.3f})"


def _table_row(row: dict) -> str:
    def f(x, fmt):
        return "" if x is None else format(x, fmt)

    tps, eq = row["aggregate_tps"], row.get("equality")
    same = f"{eq['equal']} of {eq['compared']}" if eq else ""
    each = interval_text(row["per_request"]) if row.get("per_request") else ""
    return (
        f"| {row['clients']} | {f(tps.get(PLAIN), '.1f')} | {f(tps.get(DEFAULT), '.1f')} | "
        f"{f(tps.get(LLAMA), '.1f')} "
        f"| {f(row.get('default_over_plain'), '.2f')} | {each} | "
        f"{f(row.get('default_over_llama_server_plain'), '.2f')} "
        f"| {same} |"
    )


def prompt_sets(
    levels, waves: int, seed: int, committed: bool = True
) -> dict[str, dict[int, list[Prompt]]]:
    """Each set's prompts by level: ``fresh`` (drawn by ``seed``) and, with ``committed``,
    the committed workload's."""
    total = waves * sum(levels)
    sets = {"fresh": split(fresh_prompts(total, seed), levels, waves)}
    if committed:
        sets["committed"] = split(concurrency_prompts(total), levels, waves)
    return sets
