"""llama.cpp server's ``POST /infill``: code completion at the cursor, as llama.vscode and
llama.vim ask for it.

Request (llama-server's fields): ``input_prefix`` and ``input_suffix`` (the code before and
after the cursor), ``input_extra`` (``[{"filename", "text"}]``: other open files),
``prompt`` (text typed after the prefix), ``n_predict`` (-1: the server's limit),
``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``, ``stop``, ``stream``, and
``speculative`` as in chat (``{n_max, n_min, p_min, strategy}``); the
other knobs llama.vscode sends (``samplers``, ``cache_prompt``, ``n_indent``,
``t_max_prompt_ms``, ``t_max_predict_ms``, ``id_slot``, ``response_fields``, ...) are
accepted and ignored.  The prompt is built by :func:`localspec.decoding.fim.fim_prompt`.

Response (llama-server's ``/completion`` shape): ``content``, ``stop``, ``stop_type``
("eos" or "limit"), ``tokens_predicted``, ``tokens_evaluated``, ``tokens_cached``,
``truncated`` and ``timings``; streamed as ``data:`` objects with ``content`` pieces and
``stop: false``, then one with ``stop: true`` and the totals (no ``[DONE]``, as
llama-server).  Errors in OpenAI's shape, as llama-server answers them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from localspec.decoding.stats import GenerationResult
from localspec.server import sse
from localspec.server.openai_shapes import timings
from localspec.server.request import (
    FieldPaths,
    GenerationRequest,
    Limits,
    generation_request,
    sampling_of,
)
from localspec.server.schemas import SpeculativeOptions, speculative_options
from localspec.server.shape import Shape


class ExtraChunk(BaseModel):
    model_config = ConfigDict(extra="ignore")
    filename: str = "tmp"
    text: str = ""


class InfillRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # llama.cpp's sampler and slot knobs
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraChunk] = Field(default_factory=list)
    prompt: str = ""
    n_predict: int = Field(-1, ge=-1)
    temperature: float | None = Field(None, ge=0)
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    min_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    stop: list[str] | None = None
    stream: bool = False
    speculative: SpeculativeOptions | None = None  # as in chat: {n_max, n_min, p_min, strategy}


class InfillShape(Shape):
    """llama-server's completion objects for one request."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.sent = 0  # tokens streamed so far

    def _obj(self, content: str, result: GenerationResult | None) -> dict:
        obj = {
            "index": 0,
            "content": content,
            "tokens": [],
            "id_slot": 0,
            "stop": result is not None,
        }
        obj["model"] = self.model_name
        obj["tokens_predicted"] = self.sent if result is None else len(result.tokens)
        if result is not None:
            stats = result.stats
            obj["tokens_evaluated"] = stats.prompt_tokens
            obj["tokens_cached"] = stats.prompt_cached_tokens
            obj["truncated"] = stats.prompt_truncated
            obj["has_new_line"] = "\n" in result.text
            obj["stop_type"] = _stop_type(result)
            obj["stopping_word"] = ""
            obj["timings"] = timings(result)
        return obj

    def stream_start(self) -> list[str]:
        return []

    def stream_events(self, events: list) -> list[str]:
        text = "".join(e.text for e in events)
        self.sent += len(events)
        return [sse.data(self._obj(text, None))] if text else []

    def stream_end(self, result: GenerationResult, include_usage: bool) -> list[str]:
        return [sse.data(self._obj("", result))]

    def stream_error(self, message: str = "internal server error") -> list[str]:
        return [sse.data({"error": {"code": 500, "message": message, "type": "server_error"}})]

    def whole(self, events: list, result: GenerationResult) -> dict:
        return self._obj(result.text, result)


def _stop_type(result: GenerationResult) -> str:
    """llama-server's "limit" for a length cut; "eos" for every other stop (a stop string too)."""
    return "limit" if result.finish_reason in ("length", "context") else "eos"


def infill_request(body: InfillRequest, limits: Limits) -> GenerationRequest:
    """An /infill body as the generation it asks for (``n_predict`` -1: the server's limit)."""
    return generation_request(
        "llama.infill",
        limits,
        prompt=body.input_prefix + body.prompt,
        suffix=body.input_suffix,
        extra=[c.model_dump() for c in body.input_extra],
        stop=body.stop,
        max_tokens=None if body.n_predict < 0 else body.n_predict or 1,
        stream=body.stream,
        paths=FieldPaths(
            max_tokens=("n_predict",), prompt=("input_prefix",), suffix=("input_prefix",)
        ),
        **sampling_of(body),
        **speculative_options(body.speculative),
    )


def routes(state) -> list[Route]:
    """``POST /infill`` on a :class:`ServerState`."""

    async def answer(http: Request) -> Response:
        request = infill_request(await state.read_body(http, InfillRequest), state.limits())
        return await state.run(http, request, InfillShape(state.config.model_name))

    return [state.route("/infill", answer, protocol="llama.infill")]
