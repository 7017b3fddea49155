"""OpenAI's ``POST /v1/chat/completions`` and ``POST /v1/completions``.

Shapes follow the OpenAI API reference (openai-python ``types/chat/*``): chat
completion objects and ``chat.completion.chunk`` streams ending in ``data: [DONE]``,
``usage`` with ``prompt_tokens_details.cached_tokens`` (the reused KV prefix) and
``completion_tokens_details.accepted_prediction_tokens`` / ``rejected_prediction_tokens``,
errors as ``{"error": {message, type, param, code}}``.  Speculative statistics also come
as llama.cpp's server ``timings`` (milliseconds), and per-request speculative options
under its names (``speculative: {n_max, n_min, p_min}``, plus our ``strategy``).

Reasoning models (docs/reasoning.md): ``reasoning_format``, ``chat_template_kwargs``,
``reasoning_effort`` and our ``reasoning_budget``; the thinking comes as
``message.reasoning_content`` / ``delta.reasoning_content`` (also read back from earlier
assistant turns, for the template), its tokens as
``completion_tokens_details.reasoning_tokens``, per-channel speculation as
``timings.channels``.

Predicted Outputs: ``prediction.content`` drafts through
:class:`localspec.decoding.drafters.PredictionDrafter`.  ``accepted_prediction_tokens`` counts
prediction tokens that were drafted and kept by the target, ``rejected_prediction_tokens``
those drafted and rejected (tokens of the prediction never drafted count in neither;
OpenAI's billing counts differ).  A completion with ``suffix`` fills in the middle.
"""

from __future__ import annotations

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from localspec.server.errors import RequestError
from localspec.server.openai_shapes import ChatShape, CompletionShape
from localspec.server.reasoning_fields import chat_reasoning
from localspec.server.request import (
    FieldPaths,
    GenerationRequest,
    Limits,
    generation_request,
    sampling_of,
)
from localspec.server.schemas import (
    ChatRequest,
    CommonRequest,
    CompletionRequest,
    speculative_options,
)


def _common(body: CommonRequest) -> dict:
    """The fields chat and completions share, as :func:`generation_request`'s arguments."""
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    usage = body.stream_options is not None and body.stream_options.include_usage
    return {
        **sampling_of(body),
        **speculative_options(body.speculative),
        "stop": stop,
        "response_format": body.response_format.as_option()
        if body.response_format is not None
        else None,
        "stream": body.stream,
        "include_usage": usage,
    }


def chat_request(body: ChatRequest, limits: Limits) -> GenerationRequest:
    """A chat completion's body as the generation it asks for, under the server's ``limits``."""
    if body.top_logprobs is not None and not body.logprobs:
        raise RequestError("top_logprobs needs logprobs: true", ("top_logprobs",))
    choice = (
        body.tool_choice.model_dump()
        if isinstance(body.tool_choice, BaseModel)
        else body.tool_choice
    )
    reasoning = chat_reasoning(
        body.reasoning_format,
        body.chat_template_kwargs,
        body.reasoning_effort,
        body.reasoning_budget,
        body.reasoning_budget_message,
    )
    return generation_request(
        "openai.chat",
        limits,
        messages=[m.for_model() for m in body.messages],
        tools=None if body.tools is None else [t.for_model() for t in body.tools],
        tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        paths=FieldPaths(
            max_tokens=("max_completion_tokens",) if body.max_completion_tokens else ("max_tokens",)
        ),
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        prediction=body.prediction.text() if body.prediction is not None else None,
        effort=body.reasoning_effort,
        prompt_cache_key=body.prompt_cache_key,
        **reasoning,
        **_common(body),
    )


def completion_request(body: CompletionRequest, limits: Limits) -> GenerationRequest:
    """A legacy completion's body (one prompt; with ``suffix``, fill in the middle)."""
    prompt = body.prompt if isinstance(body.prompt, str) else body.prompt[0]
    return generation_request(
        "openai.completions",
        limits,
        prompt=prompt,
        suffix=body.suffix,
        max_tokens=body.max_tokens,
        logprobs=body.logprobs,
        paths=FieldPaths(prompt=("prompt",)),
        **_common(body),
    )


def routes(state) -> list[Route]:
    """``POST /v1/chat/completions`` and ``POST /v1/completions`` on a :class:`ServerState`."""

    async def chat(http: Request) -> Response:
        body = await state.read_body(http, ChatRequest)
        request = chat_request(body, state.limits())
        shape = ChatShape(state.config.model_name, body.logprobs, state.model.target.token_bytes)
        return await state.run(http, request, shape)

    async def completions(http: Request) -> Response:
        body = await state.read_body(http, CompletionRequest)
        request = completion_request(body, state.limits())
        return await state.run(
            http,
            request,
            CompletionShape(
                state.config.model_name, body.logprobs is not None, state.model.target.token_bytes
            ),
        )

    return [
        state.route("/v1/chat/completions", chat, protocol="openai.chat"),
        state.route("/v1/completions", completions, protocol="openai.completions"),
    ]
