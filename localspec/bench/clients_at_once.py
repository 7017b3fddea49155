"""Several clients at once against one server: one streamed request (:func:`one_request`,
its text, timing and the server's own account of its time against plain decoding), a level of
N clients sharing a queue of prompts (:func:`level`), every level on a fresh server
(:func:`run_server`).  ``localspec bench concurrency`` and its ``--fresh`` mode
(:mod:`localspec.bench.fresh_clients`) measure with these."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from localspec.bench.client import async_openai_client, client_decode_tps

Starter = Callable[[], AbstractContextManager[str]]  # starts a server, yields its base URL


async def one_request(client, messages, max_tokens: int, extra: dict) -> dict:
    """One greedy chat request streamed through ``client`` (an ``openai.AsyncOpenAI``) with
    ``extra`` in its body: its ``text``; ``sent`` / ``done`` (``time.perf_counter`` seconds),
    ``ttft_s``, ``tokens`` (the usage's completion tokens), ``decode_tps`` (tokens after the
    first over the seconds after it); ``against_plain_ms``, the server's ``timings.against_plain``
    (milliseconds; None from a server that sends none)."""
    sent = time.perf_counter()
    first = None
    pieces: list[str] = []
    usage = account = None
    stream = await client.chat.completions.create(
        model="m",
        messages=messages,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=extra,
    )
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        timings = (chunk.model_extra or {}).get("timings")
        if isinstance(timings, dict) and "against_plain" in timings:
            account = timings["against_plain"]  # the server's own account, milliseconds
        if chunk.choices and (chunk.choices[0].delta.content or chunk.choices[0].delta.tool_calls):
            pieces.append(chunk.choices[0].delta.content or "")
            if first is None:
                first = time.perf_counter()
    done = time.perf_counter()
    tokens = usage.completion_tokens if usage is not None else len(pieces)
    first = first or done
    return {
        "text": "".join(pieces),
        "against_plain_ms": account,
        "sent": sent,
        "ttft_s": first - sent,
        "tokens": tokens,
        "decode_tps": client_decode_tps(tokens, first, done),
        "done": done,
    }


async def level(
    base: str, clients: int, work: list, max_tokens: int, extra: dict, answers: bool = False
) -> dict:
    """``clients`` clients at once through ``work`` (message lists), each sending the next as
    its last ends; the level's figures, and with ``answers`` each prompt's answer text in
    ``work``'s order (``"answers"``)."""
    queue = list(enumerate(work))
    results = []
    async with async_openai_client(base) as client:

        async def run_client():
            while queue:
                index, messages = queue.pop(0)
                results.append(
                    {"index": index, **await one_request(client, messages, max_tokens, extra)}
                )

        start = time.perf_counter()
        await asyncio.gather(*(run_client() for _ in range(clients)))
    wall = max(r["done"] for r in results) - start
    ttfts = sorted(r["ttft_s"] for r in results)
    in_order = sorted(results, key=lambda r: r["index"])
    texts = {"answers": [r["text"] for r in in_order]} if answers else {}
    return {
        "clients": clients,
        "requests": len(results),
        "tokens": sum(r["tokens"] for r in results),
        "aggregate_tps": sum(r["tokens"] for r in results) / wall,
        "request_decode_tps": statistics.median(r["decode_tps"] for r in results),
        "ttft_p50_s": statistics.median(ttfts),
        "ttft_p95_s": ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))],
        "wall_s": wall,
        # each request's tokens over its seconds from sending to its last token, in work's order
        "request_tps": [r["tokens"] / max(r["done"] - r["sent"], 1e-9) for r in in_order],
        "against_plain_s": account_per_request(results),
        **texts,
    }


ACCOUNT = ("won", "lost", "catch_up", "draft_prompt", "policy", "batch_wait", "net")


def account_per_request(results: list[dict]) -> dict:
    """Mean seconds per request of each part of the server's account of its time against
    plain decoding (``timings.against_plain``: won, lost, catch-up, draft prompt, policy, batch
    waits, net); {} unless every request carried one."""
    got = [r.get("against_plain_ms") for r in results]
    if not got or any(a is None for a in got):
        return {}
    return {k: statistics.fmean(a.get(f"{k}_ms", 0.0) for a in got) / 1000 for k in ACCOUNT}


def run_server(
    name: str, start: Starter, levels, work_for, max_tokens: int, answers: bool = False
) -> dict:
    """Every level on one server (``start()`` starts it), each level with prompts of its own
    (``work_for(n)``), never sent to this server before; ``answers`` keeps each level's
    answer texts (:func:`level`)."""
    rows = []
    with start() as base:
        asyncio.run(level(base, 1, [[{"role": "user", "content": "Say hi."}]], 8, {}))  # warm-up
        for n in levels:
            rows.append(asyncio.run(level(base, n, work_for(n), max_tokens, {}, answers)))
            r = rows[-1]
            print(
                f"{name} x{n}: {r['aggregate_tps']:.1f} t/s aggregate, "
                f"{r['request_decode_tps']:.1f} per request, TTFT p50 {r['ttft_p50_s']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    return {name: rows}
