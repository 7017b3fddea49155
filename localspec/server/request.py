"""One generation request, whatever protocol asked for it.

Each protocol module translates its own body at the edge (chat-format messages, OpenAI-format
tools and ``tool_choice``, the library's option names, the field paths its errors name) and
:func:`generation_request` makes the :class:`GenerationRequest`: the prompt, and the one
:class:`~localspec.decoding.params.CallOptions` that :meth:`localspec.api.SpeculativeModel.chat`
takes, checked once for every protocol against the server's :class:`Limits`;
:func:`start_generation` starts it on the model's thread.  Every refusal is a
:class:`~localspec.server.errors.RequestError` naming the protocol's own field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from localspec.decoding.params import (
    REASONING_OPTIONS,
    TOOL_OPTIONS,
    CallOptions,
    DraftParams,
    call_options,
)
from localspec.decoding.tool_calls import normalise_messages
from localspec.errors import InvalidOptionError, LocalspecError
from localspec.server.errors import (
    FieldPath,
    RequestError,
    dotted,
    from_localspec_error,
)

NO_FIM = (
    "{} has no fill-in-the-middle tokens (suffix and /infill need a model trained for FIM, "
    "e.g. Qwen2.5-Coder)"
)


# the options whose refusals name the protocol's own field (FieldPaths)
OWN_NAMES = ("response_format", "max_tokens", "strategy", "draft_min", "draft_max", "stop", "seed")


def given(**options) -> dict:
    """``options`` without those that are None (not set by the client)."""
    return {name: value for name, value in options.items() if value is not None}


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "seed")


def sampling_of(body) -> dict:
    """The sampling options a protocol's pydantic ``body`` declares and sets, under the
    library's names (others are left out, even when an ``extra="allow"`` body carries them)."""
    declared = type(body).model_fields
    return given(**{name: getattr(body, name) for name in SAMPLING_FIELDS if name in declared})


@dataclass(frozen=True)
class FieldPaths:
    """Where the protocol's body holds what a refusal names (its errors' ``param``)."""

    max_tokens: FieldPath = ("max_tokens",)
    response_format: FieldPath = ("response_format",)
    prompt: FieldPath = ("messages",)  # named when the prompt does not fit the context
    suffix: FieldPath = ("suffix",)  # named when the model has no FIM tokens
    stop: FieldPath = ("stop",)
    seed: FieldPath = ("seed",)
    strategy: FieldPath = ("speculative", "strategy")
    draft_min: FieldPath = ("speculative", "n_min")  # llama.cpp's server names
    draft_max: FieldPath = ("speculative", "n_max")
    # a tool's fields as the protocol writes them: (OpenAI chat's name, the protocol's)
    tool_fields: tuple[tuple[str, str], ...] = ()

    def tool_param(self, param: str) -> str:
        """``param`` ("tools.0.function.parameters") in the protocol's own tool shape."""
        for chat_name, own in self.tool_fields:
            head, dot, rest = param.partition(".")
            index, _, field_path = rest.partition(".")
            if head == "tools" and index.isdigit() and field_path == chat_name:
                return ".".join(p for p in ("tools", index, own) if p)
        return param


FLAT_TOOLS = (("function.parameters", "parameters"), ("function.name", "name"), ("function", ""))
ANTHROPIC_TOOLS = (
    ("function.parameters", "input_schema"),
    ("function.name", "name"),
    ("function", ""),
)


@dataclass(frozen=True)
class GenerationRequest:
    """What a protocol asks of one generation: its prompt, and the one options record the
    library takes (:func:`generation_request` makes both).

    ``protocol``: who asked ("openai.chat", "openai.completions", "anthropic.messages",
    "openai.responses", "llama.infill").  The prompt is ``messages`` (chat-format dicts),
    plus ``prefill`` (text the answer continues), or else ``prompt`` (plain text) with
    ``suffix`` and ``extra`` (fill in the middle; ``extra``: other files as ``{"filename",
    "text"}``).  ``options``: the :class:`CallOptions` of
    :meth:`~localspec.api.SpeculativeModel.chat` (``generate``, ``infill``), under the
    server's defaults and limits.  ``include_usage``: a stream ends with usage (OpenAI's
    ``stream_options``).  ``thinking`` ("enabled", "adaptive", "disabled"; None: not asked)
    and ``effort`` ("low" … "max"): what the client asked of the model's reasoning, as it
    asked it.  ``paths``: where its body holds what a refusal names."""

    protocol: str
    options: CallOptions
    messages: tuple[dict, ...] = ()
    prefill: str | None = None
    prompt: str | None = None
    suffix: str | None = None
    extra: tuple[dict, ...] = ()
    stream: bool = False
    include_usage: bool = False
    thinking: str | None = None
    effort: str | None = None
    paths: FieldPaths = field(default_factory=FieldPaths)


@dataclass(frozen=True)
class Limits:
    """What the server allows: ``max_tokens`` per request, whether the model's chat template
    has a tool-call format (``tools``) and FIM tokens (``fim``); ``defaults``: options for
    what a request leaves out; ``reasoning_budget``: the thinking budget of a request that
    sets none (the load option, ``--reasoning-budget``); ``reads_enable_thinking``: the chat
    template reads ``enable_thinking`` (Qwen3), so thinking can be turned off in the prompt;
    ``draft``: the model's draft options, under those a request or ``defaults`` set."""

    model_name: str
    max_tokens: int
    tools: bool
    fim: bool
    defaults: Mapping = field(default_factory=dict)
    reasoning_budget: int = -1
    reads_enable_thinking: bool = False
    draft: DraftParams = field(default_factory=DraftParams)


def generation_request(
    protocol: str,
    limits: Limits,
    *,
    messages=(),
    prefill: str | None = None,
    prompt: str | None = None,
    suffix: str | None = None,
    extra=(),
    stream: bool = False,
    include_usage: bool = False,
    thinking: str | None = None,
    effort: str | None = None,
    clip_max_tokens: bool = False,
    paths: FieldPaths | None = None,
    **asked,
) -> GenerationRequest:
    """The :class:`GenerationRequest` a protocol's body asks for.  ``asked``: the options it
    sets, under the library's keyword names (:meth:`~localspec.api.SpeculativeModel.chat`;
    None: not set), over the server's defaults; ``max_tokens`` over the server's limit is
    refused, or lowered when ``clip_max_tokens``.  RequestError (400) naming the protocol's
    own field for what this server cannot run, or for a value out of range."""
    paths = paths or FieldPaths()
    if suffix is not None and not limits.fim:
        raise RequestError(NO_FIM.format(limits.model_name), paths.suffix, code="unsupported_value")
    answers_chat = prompt is None and prefill is None  # only such a turn has thinking
    asked = given(**asked)
    values = _option_values(
        asked, limits, paths, clip_max_tokens, prefill is not None, answers_chat
    )
    try:
        options = call_options(values, limits.draft)
    except InvalidOptionError as exc:
        raise refusal(exc, paths, asked) from None
    return GenerationRequest(
        protocol,
        options,
        tuple(messages),
        prefill,
        prompt,
        suffix,
        tuple(extra),
        bool(stream),
        bool(include_usage),
        thinking,
        effort,
        paths,
    )


def refusal(exc: LocalspecError, paths: FieldPaths, asked: Mapping | None = None) -> RequestError:
    """The library's refusal of a request (when its options are made, or when it starts) as
    a 400 naming the protocol's own field (``paths``): its names for the library's options,
    its shape of a tool, the prompt for a prompt over the context.  Another option the
    message names that the request did not set (``asked``) is called the server's."""
    param = exc.param if isinstance(exc, InvalidOptionError) else None
    if param in OWN_NAMES:  # the library's name of a field the protocol names its way
        message = str(exc)
        for name in OWN_NAMES:
            own = dotted(getattr(paths, name))
            if asked is not None and name != param and name not in asked:
                own = f"this server's {own}"
            message = re.sub(rf"\b{name}\b", own, message)
        return RequestError(message, getattr(paths, param), code="invalid_value")
    if param and param.startswith("tools."):
        exc = InvalidOptionError(str(exc), paths.tool_param(param))
    return from_localspec_error(exc, paths.prompt)


def _option_values(
    asked: dict,
    limits: Limits,
    paths: FieldPaths,
    clip_max_tokens: bool,
    prefill: bool,
    answers_chat: bool,
) -> dict:
    """The options ``asked`` under the server's defaults and limits."""
    options = {**limits.defaults, **_plain_options(asked)}
    options["max_tokens"] = _max_tokens(
        asked.get("max_tokens"),
        limits.max_tokens,
        limits.defaults.get("max_tokens"),
        clip_max_tokens,
        paths,
    )
    options.update(_tool_options(asked, limits))
    calls = asked.get("tools") is not None and options.get("tool_choice") != "none"
    if calls and prefill:
        raise RequestError(
            "a final assistant message (prefill) cannot be combined with tools", ("messages",)
        )
    if answers_chat:
        options.update(_reasoning_options(asked, calls, limits))
    return options


def _plain_options(asked: dict) -> dict:
    """The options ``asked`` that need no server rule (sampling, stop, draft options, ...)."""
    ruled = TOOL_OPTIONS | REASONING_OPTIONS | {"max_tokens"}
    return {name: value for name, value in asked.items() if name not in ruled}


def _reasoning_options(asked: dict, tools: bool, limits: Limits) -> dict:
    """The reasoning options ``asked``, for a chat without a prefill (raw text and a
    continued answer have no thinking).  With tools no budget is enforced (the library
    cannot force the close beside a tool-call grammar yet): the thinking is bounded by
    ``max_tokens`` only; thinking off (budget 0) stays off where the template reads
    ``enable_thinking``, and is unbounded where it cannot be turned off in the prompt."""
    options = {name: value for name, value in asked.items() if name in REASONING_OPTIONS}
    if not tools:
        return options
    budget = options.pop("reasoning_budget", None)
    off = (
        options.pop("enable_thinking", None) is False
        or (limits.reasoning_budget if budget is None else budget) == 0
    )
    if off and limits.reads_enable_thinking:
        options["enable_thinking"] = False  # the prompt closes the block: no budget to force
    else:
        options["reasoning_budget"] = -1
    return options


def _max_tokens(
    asked: int | None, limit: int, default: int | None, clip: bool, paths: FieldPaths
) -> int:
    if asked is not None and asked > limit and not clip:
        message = f"{dotted(paths.max_tokens)} is {asked}; this server allows at most {limit}"
        raise RequestError(message, paths.max_tokens, code="invalid_value")
    return min(asked or default or limit, limit)


def _tool_options(asked: dict, limits: Limits) -> dict:
    """``tools`` / ``tool_choice`` / ``parallel_tool_calls`` as the request sets them (checked
    with the options record); RequestError where the model has no tool-call format."""
    tools, choice = asked.get("tools"), asked.get("tool_choice")
    if tools is None:
        return {} if choice is None else {"tool_choice": choice}
    choice = choice or "auto"
    if choice != "none" and not limits.tools:
        message = f"{limits.model_name} has no tool-call format in its chat template"
        raise RequestError(message, ("tools",), code="unsupported_value")
    options = {"tools": list(tools), "tool_choice": choice}
    if "parallel_tool_calls" in asked:
        options["parallel_tool_calls"] = asked["parallel_tool_calls"]
    return options


def prompt_tokens(target, messages, prefill: str | None, tools: list[dict] | None) -> list[int]:
    """The prompt as the chat template renders it, plus the prefill's tokens.  Calls
    llama.cpp (through the engine's own thread): never call it on the event loop."""
    tokens = target.chat_tokens(normalise_messages(list(messages)), tools)
    return tokens + (target.tokenize(prefill, add_special=False) if prefill else [])


def fold_late_system(messages) -> list[dict]:
    """``messages`` with every system message after the first turn folded into the nearest
    user turn (the next one, else the one before), for chat templates that accept a system
    message only first.  One with no user turn to join becomes a user turn."""
    out, waiting = [], []  # waiting: late system texts for the next user turn
    for i, message in enumerate(messages):
        if message["role"] == "system" and i > 0:
            waiting.append(message["content"])
        elif message["role"] == "user" and waiting:
            out.append({**message, "content": "\n\n".join([*waiting, message["content"]])})
            waiting = []
        else:
            out.append(dict(message))
    if waiting:
        users = [j for j, m in enumerate(out) if m["role"] == "user"]
        if users:
            last = out[users[-1]]
            last["content"] = "\n\n".join([last["content"], *waiting])
        else:
            out.append({"role": "user", "content": "\n\n".join(waiting)})
    return out


def _has_late_system(messages) -> bool:
    return any(m["role"] == "system" for m in list(messages)[1:])


def start_generation(model, request: GenerationRequest):
    """Start ``request`` on ``model`` with its options: a streaming
    :class:`~localspec.decoding.loop.Generation`.  System messages after the first turn are
    rendered as the chat template writes them; a template that refuses them gets them folded
    into the nearest user turn (:func:`fold_late_system`).  Runs on the model's thread."""
    options = request.options
    if request.prompt is not None:
        return _start_plain(model, request, options)
    try:
        return _start_chat(model, request.messages, request.prefill, options)
    except InvalidOptionError:  # the template rejected the messages
        if not _has_late_system(request.messages):
            raise
    return _start_chat(model, fold_late_system(request.messages), request.prefill, options)


def _start_chat(model, messages, prefill: str | None, options: CallOptions):
    if prefill is None:
        return model.chat(list(messages), options, stream=True)
    tokens = prompt_tokens(model.target, messages, prefill, None)
    return model.generate(tokens, options, stream=True)


def _start_plain(model, request: GenerationRequest, options: CallOptions):
    if request.suffix is None:
        return model.generate(request.prompt, options, stream=True)
    return model.infill(
        request.prompt, request.suffix, options, extra=list(request.extra), stream=True
    )
