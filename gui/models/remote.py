"""A remote pair: an OpenAI-compatible server (``localspec serve``, llama-server, vLLM, SGLang)
the window chats with instead of a pair it loads.

:class:`RemoteModel` offers what the window's model thread uses of a
:class:`~localspec.api.SpeculativeModel`: ``chat(messages, stream=True, **options)``
returning an iterable of token events with ``cancel()`` and ``result``.  Text arrives
as the server streams it (one event per chunk); which tokens a draft proposed is not
known from outside, so every piece shows as the target's own.  Statistics come from the
server's llama.cpp ``timings`` when it sends them (localspec, llama-server); otherwise
the answer's stats say ``unavailable``.  A reasoning model's thinking, streamed as
``delta.reasoning_content`` (localspec serve, llama-server) or ``delta.reasoning`` (vLLM),
arrives as "reasoning" events; thinking turned off is sent as ``chat_template_kwargs:
{"enable_thinking": false}`` (those servers' field).  Built on the ``openai`` client.
"""

from __future__ import annotations

import time

from localspec.decoding.stats import GenerationResult, GenerationStats, TokenEvent, TokenSource
from localspec.errors import LocalspecError

_OPTIONS = {
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
}  # what an OpenAI server takes of ours


class RemoteError(LocalspecError):
    """The server could not be reached, refused the key, or does not have the model."""


def _one_line(exc, url: str, model: str | None = None) -> RemoteError:
    import openai

    if isinstance(exc, openai.AuthenticationError):
        return RemoteError(f"{url} refused the API key (401)")
    if isinstance(exc, openai.NotFoundError):
        what = f"model {model!r}" if model else "this endpoint"
        return RemoteError(f"{url} has no {what} (404)")
    if isinstance(exc, openai.APIConnectionError):
        return RemoteError(f"cannot reach {url} (is the server running?)")
    if isinstance(exc, openai.APIStatusError):
        return RemoteError(f"{url} answered {exc.status_code}: {exc.message}")
    return RemoteError(f"{url}: {exc}")


class RemoteModel:
    """``url``: the server's base, with or without ``/v1``; ``api_key``: its key (any
    text when it takes none); ``model``: one of its ``/v1/models`` ids, or None for the
    first it lists.  Connecting lists the models, so a wrong URL, key or model fails here
    with a one-line :class:`RemoteError`; so does a request later."""

    parallel = 1

    def __init__(
        self, url: str, api_key: str = "", model: str | None = None, timeout_s: float = 600.0
    ):
        import openai

        base = url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise RemoteError(f"the server URL must start with http:// or https://, got {url!r}")
        self.url = base if base.endswith("/v1") else base + "/v1"
        self.client = openai.OpenAI(
            base_url=self.url, api_key=api_key or "none", max_retries=0, timeout=timeout_s
        )
        try:
            ids = [m.id for m in self.client.models.list()]
        except Exception as exc:
            raise _one_line(exc, self.url) from None
        if model and ids and model not in ids and not self._serves_any_name(model):
            raise RemoteError(f"{self.url} has no model {model!r} (it lists {', '.join(ids)})")
        if not model and not ids:
            raise RemoteError(f"{self.url} lists no model")
        self.model = model or ids[0]
        self.models = ids

    def _serves_any_name(self, model: str) -> bool:
        """localspec serve answers any model id (``GET /v1/models/{id}``)."""
        try:
            self.client.models.retrieve(model)
            return True
        except Exception:
            return False

    def chat(self, messages: list[dict], stream: bool = True, **options) -> RemoteGeneration:
        sent = {k: v for k, v in options.items() if k in _OPTIONS}
        if options.get("enable_thinking") is False:
            sent["extra_body"] = {"chat_template_kwargs": {"enable_thinking": False}}
        generation = RemoteGeneration(self, messages, sent)
        return generation if stream else generation.run()

    def close(self) -> None:
        self.client.close()


class RemoteGeneration:
    """One streamed answer from the server; iterate for :class:`TokenEvent`; ``result``
    once done; ``cancel()`` (any thread) closes the stream after the current chunk."""

    def __init__(self, model: RemoteModel, messages: list[dict], options: dict):
        self.model, self.messages, self.options = model, messages, options
        self.result: GenerationResult | None = None
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def run(self) -> GenerationResult:
        for _ in self:
            pass
        return self.result

    def __iter__(self):
        started = time.perf_counter()
        first_at, pieces, thinking, finish, timings = None, [], [], None, None
        try:
            stream = self.model.client.chat.completions.create(
                model=self.model.model, messages=self.messages, stream=True, **self.options
            )
            with stream:
                for n, chunk in enumerate(stream):
                    timings = (chunk.model_extra or {}).get("timings") or timings
                    choice = chunk.choices[0] if chunk.choices else None
                    if choice is not None and choice.finish_reason:
                        finish = choice.finish_reason
                    text, reasoning = delta_texts(choice)
                    if reasoning:
                        first_at = first_at or time.perf_counter()
                        thinking.append(reasoning)
                        yield TokenEvent(
                            -1, "", TokenSource.TARGET, n, channel="reasoning", reasoning=reasoning
                        )
                    if text:
                        first_at = first_at or time.perf_counter()
                        pieces.append(text)
                        yield TokenEvent(-1, text, TokenSource.TARGET, n)
                    if self._cancelled:
                        finish = "cancelled"
                        break
        except Exception as exc:
            raise _one_line(exc, self.model.url, self.model.model) from None
        stats = _stats(timings, started, first_at, time.perf_counter(), len(pieces))
        text = "".join(pieces)
        sources = [TokenSource.TARGET] * (len(pieces) + len(thinking))
        self.result = GenerationResult(
            text, [], sources, finish or "stop", stats, reasoning="".join(thinking) or None
        )


def delta_texts(choice) -> tuple[str, str]:
    """(answer text, thinking text) of one streamed choice ("" where it has none)."""
    delta = choice.delta if choice is not None else None
    if delta is None:
        return "", ""
    extra = delta.model_extra or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning") or ""
    return delta.content or "", reasoning if isinstance(reasoning, str) else ""


def _stats(timings: dict | None, started: float, first_at: float | None, ended: float, pieces: int):
    """GenerationStats from llama.cpp's ``timings`` (milliseconds) and the client's clock;
    ``unavailable`` (an attribute the window reads) when the server sent no timings."""
    stats = GenerationStats(total_s=ended - started, ttft_s=(first_at or ended) - started)
    stats.unavailable = timings is None
    if timings is None:
        stats.generated_tokens = pieces
        return stats
    stats.prompt_tokens = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
    stats.prompt_cached_tokens = int(timings.get("cache_n", 0))
    stats.prompt_eval_s = timings.get("prompt_ms", 0.0) / 1000
    stats.generated_tokens = int(timings.get("predicted_n", 0)) + 1
    stats.drafted_tokens = int(timings.get("draft_n", 0))
    stats.accepted_tokens = int(timings.get("draft_n_accepted", 0))
    stats.drafted_by_drafter = dict(timings.get("draft_n_by_drafter", {}))
    stats.accepted_by_drafter = dict(timings.get("draft_n_accepted_by_drafter", {}))
    return stats
