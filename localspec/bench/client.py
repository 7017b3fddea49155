"""The one client every HTTP benchmark measures a server with, and the one t/s reader.

Decode speed is llama.cpp server's ``timings.predicted_per_second``: tokens after the first
over the seconds after the first.  ``localspec serve`` and llama-server return it; for a
server that sends no ``timings`` (vLLM) the caller's own clock gives the same figure
(:func:`client_decode_tps`)."""

from __future__ import annotations

import json
import urllib.request


def openai_client(base: str, *, timeout: float = 600, max_retries: int = 0):
    """An ``openai.OpenAI`` for the server at ``base`` (``http://host:port``)."""
    import openai

    return openai.OpenAI(
        base_url=base + "/v1", api_key="none", max_retries=max_retries, timeout=timeout
    )


def async_openai_client(base: str, *, timeout: float = 900, max_retries: int = 2):
    import openai

    return openai.AsyncOpenAI(
        base_url=base + "/v1", api_key="none", max_retries=max_retries, timeout=timeout
    )


def post_json(url: str, body: dict, timeout: float = 600) -> dict:
    """POST ``body`` as JSON, return the decoded JSON answer (urllib errors propagate)."""
    headers = {"Content-Type": "application/json", "x-api-key": "none"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.loads(r.read())


def timings_of(answer) -> dict:
    """The llama.cpp ``timings`` of an answer: an openai response object, a decoded JSON body,
    or a library :class:`~localspec.decoding.stats.GenerationResult`; ``{}`` when it has none."""
    if isinstance(answer, dict):
        return answer.get("timings") or {}
    if hasattr(answer, "stats") and hasattr(answer, "tokens"):
        from localspec.server.openai_shapes import timings

        return timings(answer)
    return (getattr(answer, "model_extra", None) or {}).get("timings") or {}


def decode_tps(answer) -> float | None:
    """Tokens per second after the first token (``timings.predicted_per_second``), or None
    when the answer carries no timings."""
    return timings_of(answer).get("predicted_per_second")


def client_decode_tps(tokens: int, first_s: float, done_s: float) -> float:
    """The same figure from the caller's clock: ``tokens`` streamed, the first at ``first_s``,
    the last at ``done_s`` (seconds)."""
    return (tokens - 1) / (done_s - first_s) if tokens > 1 and done_s > first_s else 0.0
