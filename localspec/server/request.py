"""One generation request, whatever protocol asked for it.

Each protocol module translates its own body into a :class:`GenerationRequest` at the edge
(chat-format messages, OpenAI-format tools and ``tool_choice``, the field paths its errors
name); :func:`request_options` validates it, once for every protocol, against the server's
:class:`Limits` and gives the one :class:`~localspec.decoding.params.CallOptions` that
:meth:`localspec.api.SpeculativeModel.chat` takes; :func:`start_generation` starts it on the
model's thread.  Every refusal is a
:class:`~localspec.server.errors.RequestError` naming the protocol's own field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from localspec.decoding.params import CallOptions, DraftParams, call_options
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
OWN_NAMES = ("response_format", "max_tokens", "strategy", "draft_min", "draft_max")


def given(**options) -> dict:
    """``options`` without those that are None (not set by the client)."""
    return {name: value for name, value in options.items() if value is not None}


@dataclass(frozen=True)
class Sampling:
    """Sampling options a request sets (None: the server's default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None

    @classmethod
    def of(cls, body) -> Sampling:
        """The sampling fields a protocol's pydantic ``body`` declares (others stay None,
        even when an ``extra="allow"`` body carries them)."""
        declared = type(body).model_fields
        return cls(**{f.name: getattr(body, f.name) for f in fields(cls) if f.name in declared})

    def options(self) -> dict:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class Speculative:
    """Speculative options under the library's names; ``prediction``: Predicted Outputs' text."""

    draft_max: int | str | None = None
    draft_min: int | None = None
    p_min: float | None = None
    strategy: str | None = None
    prediction: str | None = None

    def options(self) -> dict:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class Reasoning:
    """What a request asks of a reasoning model's thinking, under the library's names
    (None: the server's default, ``--reasoning-budget``): ``budget`` thinking tokens (-1
    unlimited, 0 none), ``enable_thinking`` (False: thinking off), ``reasoning_format``
    ("auto": thinking apart from the answer, "none": all of it answer), ``template_kwargs``
    (more chat-template variables) and ``budget_message`` (text forced before the close when
    the budget ends the thinking).  See docs/reasoning.md."""

    budget: int | None = None
    budget_message: str | None = None
    enable_thinking: bool | None = None
    reasoning_format: str | None = None
    template_kwargs: dict | None = None

    def options(self) -> dict:
        """The :meth:`SpeculativeModel.chat` options set (``reasoning_budget``, ...)."""
        return given(
            reasoning_budget=self.budget,
            reasoning_budget_message=self.budget_message,
            enable_thinking=self.enable_thinking,
            reasoning_format=self.reasoning_format,
            chat_template_kwargs=self.template_kwargs,
        )


@dataclass(frozen=True)
class FieldPaths:
    """Where the protocol's body holds what a refusal names (its errors' ``param``)."""

    max_tokens: FieldPath = ("max_tokens",)
    response_format: FieldPath = ("response_format",)
    prompt: FieldPath = ("messages",)  # named when the prompt does not fit the context
    suffix: FieldPath = ("suffix",)  # named when the model has no FIM tokens
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
    """What a protocol asks of one generation.

    ``protocol``: who asked ("openai.chat", "openai.completions", "anthropic.messages",
    "openai.responses", "llama.infill").  The prompt is ``messages`` (chat-format dicts),
    plus ``prefill`` (text the answer continues), or else ``prompt`` (plain text) with
    ``suffix`` and ``extra`` (fill in the middle; ``extra``: other files as ``{"filename",
    "text"}``).  ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` / ``response_format``
    in OpenAI's chat form.  ``max_tokens``: None for the server's default; over the
    server's limit it is refused, or lowered when ``clip_max_tokens``.  ``logprobs``: how
    many alternatives per token (None: no logprobs).  ``include_usage``: a stream ends with
    usage (OpenAI's ``stream_options``).  ``thinking`` ("enabled", "adaptive", "disabled";
    None: not asked) and ``effort`` ("low" … "max"): what the client asked of the model's
    reasoning, as it asked it; ``reasoning``: the same as the library's options
    (:class:`Reasoning`); ``cache_key``: the client's conversation key (Responses'
    ``prompt_cache_key``), a hint for the prompt cache."""

    protocol: str
    messages: tuple[dict, ...] = ()
    prefill: str | None = None
    prompt: str | None = None
    suffix: str | None = None
    extra: tuple[dict, ...] = ()
    tools: tuple[dict, ...] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict | None = None
    sampling: Sampling = field(default_factory=Sampling)
    speculative: Speculative = field(default_factory=Speculative)
    stop: tuple[str, ...] | None = None
    max_tokens: int | None = None
    clip_max_tokens: bool = False
    logprobs: int | None = None
    stream: bool = False
    include_usage: bool = False
    thinking: str | None = None
    effort: str | None = None
    reasoning: Reasoning = field(default_factory=Reasoning)
    cache_key: str | None = None
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


def request_options(request: GenerationRequest, limits: Limits) -> CallOptions:
    """The :class:`CallOptions` of :meth:`SpeculativeModel.chat` (``generate``, ``infill``)
    for ``request``: the server's defaults, then what the request sets; RequestError (400)
    for what this server cannot run, or for a value out of range."""
    try:
        return call_options(_option_values(request, limits), limits.draft)
    except InvalidOptionError as exc:
        raise refusal(exc, request) from None


def refusal(exc: LocalspecError, request: GenerationRequest) -> RequestError:
    """The library's refusal of ``request`` (when its options are made, or when it starts) as
    a 400 naming the protocol's own field: its names for the library's options (FieldPaths),
    its shape of a tool, the prompt for a prompt over the context."""
    param = exc.param if isinstance(exc, InvalidOptionError) else None
    if param in OWN_NAMES:  # the library's name of a field the protocol names its way
        message = str(exc)
        for name in OWN_NAMES:
            message = message.replace(name, dotted(getattr(request.paths, name)))
        return RequestError(message, getattr(request.paths, param), code="invalid_value")
    if param and param.startswith("tools."):
        exc = InvalidOptionError(str(exc), request.paths.tool_param(param))
    return from_localspec_error(exc, request.paths.prompt)


def _option_values(request: GenerationRequest, limits: Limits) -> dict:
    """The request's option values under the library's names, over the server's defaults."""
    if request.suffix is not None and not limits.fim:
        raise RequestError(
            NO_FIM.format(limits.model_name), request.paths.suffix, code="unsupported_value"
        )
    options = dict(limits.defaults)
    options["max_tokens"] = _max_tokens(request, limits.max_tokens, options.get("max_tokens"))
    options.update(request.sampling.options())
    if request.stop is not None:
        options["stop"] = list(request.stop)
    if request.response_format is not None:
        options["response_format"] = request.response_format
    options.update(request.speculative.options())
    if request.speculative.prediction is None and options.get("strategy") == "prediction":
        message = f"{dotted(request.paths.strategy)} 'prediction' needs a prediction"
        raise RequestError(message, request.paths.strategy, code="invalid_value")
    if request.logprobs is not None:
        options["logprobs"] = request.logprobs
    options.update(_tool_options(request, limits))
    calls = request.tools is not None and options.get("tool_choice") != "none"
    if calls and request.prefill is not None:
        raise RequestError(
            "a final assistant message (prefill) cannot be combined with tools", ("messages",)
        )
    options.update(_reasoning_options(request, calls, limits))
    if request.cache_key is not None:
        options["prompt_cache_key"] = request.cache_key
    return options


def _reasoning_options(request: GenerationRequest, tools: bool, limits: Limits) -> dict:
    """The request's reasoning options, for a chat without a prefill only (raw text and a
    continued answer have no thinking).  With tools no budget is enforced (the library
    cannot force the close beside a tool-call grammar yet): the thinking is bounded by
    ``max_tokens`` only; thinking off (budget 0) stays off where the template reads
    ``enable_thinking``, and is unbounded where it cannot be turned off in the prompt."""
    if request.prompt is not None or request.prefill is not None:
        return {}
    options = request.reasoning.options()
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


def _max_tokens(request: GenerationRequest, limit: int, default: int | None) -> int:
    asked = request.max_tokens
    if asked is not None and asked > limit and not request.clip_max_tokens:
        message = (
            f"{dotted(request.paths.max_tokens)} is {asked}; this server allows at most {limit}"
        )
        raise RequestError(message, request.paths.max_tokens, code="invalid_value")
    return min(asked or default or limit, limit)


def _tool_options(request: GenerationRequest, limits: Limits) -> dict:
    """``tools`` / ``tool_choice`` / ``parallel_tool_calls`` as the request sets them (checked
    with the options record); RequestError where the model has no tool-call format."""
    if request.tools is None:
        return {} if request.tool_choice is None else {"tool_choice": request.tool_choice}
    choice = request.tool_choice or "auto"
    if choice != "none" and not limits.tools:
        message = f"{limits.model_name} has no tool-call format in its chat template"
        raise RequestError(message, ("tools",), code="unsupported_value")
    options = {"tools": list(request.tools), "tool_choice": choice}
    if request.parallel_tool_calls is not None:
        options["parallel_tool_calls"] = request.parallel_tool_calls
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


def start_generation(model, request: GenerationRequest, options: CallOptions):
    """Start ``request`` on ``model`` with ``options`` (:func:`request_options`): a streaming
    :class:`~localspec.decoding.loop.Generation`.  System messages after the first turn are
    rendered as the chat template writes them; a template that refuses them gets them folded
    into the nearest user turn (:func:`fold_late_system`).  Runs on the model's thread."""
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
