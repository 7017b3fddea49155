"""The options records, each checked once when made: how a pair is loaded
(:class:`LoadOptions`), what one generation is asked for (:class:`GenerationParams`, with
its :class:`DraftParams`), and a call's keyword options parsed once (:class:`CallOptions`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from localspec.decoding.grammar import response_format_grammar
from localspec.decoding.sampling import SamplingParams
from localspec.decoding.tool_calls import check_tools
from localspec.errors import InvalidOptionError, require_int
from localspec.llama.engine_config import EngineConfig

STRATEGIES = ("auto", "draft-model", "mtp", "prompt-lookup", "suffix", "prediction", "none")
MAX_N_CTX = 1 << 20


@dataclass(frozen=True)
class DraftParams:
    """draft_max: most tokens drafted per round, or "auto": the adaptive policy chooses
    each round's drafter and length (0 included) from costs measured on this machine.
    draft_min: a shorter draft is dropped (the round runs plain).  p_min: the draft model
    stops once its top probability falls below it.  strategy: "auto" (every available
    drafter), "draft-model", "prompt-lookup", "suffix", "prediction" (the caller's
    predicted output only) or "none".  Names and meaning as llama.cpp's
    ``--draft-max``, ``--draft-min``, ``--draft-p-min``.  Raises InvalidOptionError when
    out of range."""

    draft_max: int | str = "auto"
    draft_min: int = 0
    p_min: float = 0.75
    strategy: str = "auto"

    @property
    def adaptive(self) -> bool:
        return self.draft_max == "auto"

    def __post_init__(self) -> None:
        if not self.adaptive:
            require_int("draft_max", self.draft_max, 0, expected="'auto' or an integer >= 0")
        require_int("draft_min", self.draft_min, 0)
        if not self.adaptive and self.draft_min > self.draft_max:
            raise InvalidOptionError(
                f"draft_min ({self.draft_min}) must not exceed draft_max ({self.draft_max})",
                param="draft_min",
            )
        if (
            isinstance(self.p_min, bool)
            or not isinstance(self.p_min, (int, float))
            or not 0.0 <= self.p_min <= 1.0
        ):
            raise InvalidOptionError(f"p_min must be a number in [0, 1], got {self.p_min!r}")
        if self.strategy not in STRATEGIES:
            raise InvalidOptionError(
                f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )


@dataclass(frozen=True)
class LoadOptions:
    """How :class:`~localspec.api.SpeculativeModel` loads a pair; its keyword arguments.

    n_ctx: context window in tokens (16 to 2**20), shared by the ``parallel`` slots, or
    "auto": the pair's trained context capped by memory
    (:func:`localspec.models.memory.auto_context`). n_gpu_layers / n_gpu_layers_draft: target /
    draft layers offloaded to the GPU (-1 = all). n_threads: CPU threads, 1 to 512 (None = all
    CPUs).  draft_max / draft_min / p_min / strategy: every call's default :class:`DraftParams`
    (``.draft``); each call may override them.  verbose: show llama.cpp's log.  suffix_store_tokens:
    how many tokens of earlier outputs the suffix drafter keeps (oldest dropped first).  parallel:
    generations running at once, 1 to 64 (llama-server's ``-np``).  cache_ram_mib: host memory for a
    prompt cache across conversations, in MiB (0 = off; llama-server's ``--cache-ram``).
    chat_template: a Jinja chat template (its text, or the path of a file holding it) used instead
    of the GGUF's ``tokenizer.chat_template`` (llama-server's ``--chat-template-file``).
    reasoning_format: "auto" (split the thinking from the answer when the template has a reasoning
    format) or "none" (everything is answer text; llama-server's ``--reasoning-format``).
    reasoning_budget: every chat call's default thinking budget in tokens (-1 = unlimited, 0 = no
    thinking; llama-server's ``--reasoning-budget``). reasoning_budget_message: text forced before
    the end of the thinking when the budget ends it (llama-server's
    ``--reasoning-budget-message``), so the model goes on to its answer.  Raises
    InvalidOptionError when out of range."""

    n_ctx: int | str = 4096
    n_gpu_layers: int = -1
    n_gpu_layers_draft: int = -1
    n_threads: int | None = None
    draft_max: int | str = "auto"
    draft_min: int = 0
    p_min: float = 0.75
    strategy: str = "auto"
    verbose: bool = False
    suffix_store_tokens: int = 100_000
    parallel: int = 1
    cache_ram_mib: int = 0
    chat_template: str | None = None
    reasoning_format: str = "auto"
    reasoning_budget: int = -1
    reasoning_budget_message: str = ""
    draft: DraftParams = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.n_ctx != "auto":
            require_int("n_ctx", self.n_ctx, 16, MAX_N_CTX, unit=" tokens")
        if self.n_threads is not None:
            require_int("n_threads", self.n_threads, 1, 512)
        require_int("parallel", self.parallel, 1, 64)
        require_int("cache_ram_mib", self.cache_ram_mib, 0, unit=" (MiB; 0 = off)")
        check_reasoning_options(
            self.reasoning_format, self.reasoning_budget, self.reasoning_budget_message
        )
        if self.chat_template is not None and not isinstance(self.chat_template, str):
            raise InvalidOptionError(
                f"chat_template must be a string (a template or a path), got {self.chat_template!r}"
            )
        draft = DraftParams(self.draft_max, self.draft_min, self.p_min, self.strategy)
        object.__setattr__(self, "draft", draft)

    @property
    def cache_ram_bytes(self) -> int:
        return self.cache_ram_mib * 1024 * 1024

    def engine_config(self, role: str, assistant: Path | None = None) -> EngineConfig:
        """How to load the "target" or the "draft" model; ``assistant``: a Gemma 4 assistant
        GGUF that drafts for the target (as its MTP block would) where the strategy uses one."""
        layers = self.n_gpu_layers if role == "target" else self.n_gpu_layers_draft
        mtp = role == "target" and self.parallel == 1 and self.strategy in ("auto", "mtp")
        # snapshots serve a target's verify only (a draft model decodes a token at a time)
        snapshots = 0 if role == "draft" or self.strategy == "none" else None
        return EngineConfig(
            n_ctx=self.n_ctx,
            n_gpu_layers=layers,
            n_threads=self.n_threads,
            n_seq_max=self.parallel,
            load_mtp=mtp,
            rs_snapshots=snapshots,
            assistant=assistant if mtp else None,
        )


@dataclass(frozen=True)
class GenerationParams:
    """max_tokens: most tokens to generate.  stop: strings that end the generation
    (not included in the text).  seed: None draws a fresh one.  logprobs: None, or the
    number (0 to 20) of most likely alternatives each :class:`TokenEvent` reports with
    its own log-probability (natural log, the target's raw distribution, before
    temperature and filters)."""

    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft: DraftParams = field(default_factory=DraftParams)
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        require_int("max_tokens", self.max_tokens, 1)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidOptionError(
                f"stop strings must be non-empty strings, got {list(self.stop)!r}", param="stop"
            )
        if self.seed is not None:
            require_int(
                "seed",
                self.seed,
                0,
                2**64 - 1,
                expected="an integer from 0 to 2^64 - 1, or None / -1 for a random one",
            )
        if self.logprobs is not None:
            require_int("logprobs", self.logprobs, 0, 20)


@dataclass(frozen=True, eq=False)
class CallOptions:
    """One call's options, checked once when made (:func:`call_options` makes one from
    keywords): the generation's ``params``, and what the API turns into drafters and grammars:
    ``prediction`` (the expected output text), ``response_format`` (as given; its grammar and
    the pydantic class an answer is parsed into are ``format_grammar`` / ``parse_as``),
    ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` (OpenAI's; ``tool_choice`` None:
    "auto" with tools); ``prompt_cache_key``: which conversation this call continues, the slot
    hint of :meth:`~localspec.decoding.slots.SlotPool.acquire`.  InvalidOptionError, with the
    option's name as ``param`` (``"tools.0.function.parameters"``, ``"tool_choice"``,
    ``"response_format"``), for bad tools, a bad format, or a format beside tool calls."""

    params: GenerationParams = field(default_factory=GenerationParams)
    prediction: str | None = None
    response_format: object = None
    tools: list | None = None
    tool_choice: object = None
    parallel_tool_calls: bool = True
    reasoning_budget: int | None = None
    reasoning_budget_message: str | None = None
    reasoning_format: str | None = None
    enable_thinking: bool | None = None
    chat_template_kwargs: dict | None = None
    prompt_cache_key: str | None = None
    format_grammar: str | None = field(init=False, default=None)
    parse_as: type | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.params, GenerationParams):
            raise InvalidOptionError(
                f"params must be a GenerationParams, got {type(self.params).__name__}"
            )
        if not isinstance(self.parallel_tool_calls, bool):
            raise InvalidOptionError(
                f"parallel_tool_calls must be True or False, got {self.parallel_tool_calls!r}",
                param="parallel_tool_calls",
            )
        if self.tools is not None:
            tools, choice = check_tools(self.tools, self.tool_choice or "auto")
            object.__setattr__(self, "tools", tools)
            object.__setattr__(self, "tool_choice", choice)
        elif self.tool_choice not in (None, "none", "auto"):
            raise InvalidOptionError("tool_choice needs tools", param="tool_choice")
        try:
            grammar, parse_as = response_format_grammar(self.response_format)
        except InvalidOptionError as exc:
            raise InvalidOptionError(str(exc), param="response_format") from None
        if grammar is not None and self.calls_tools:
            raise InvalidOptionError(
                "response_format and tools cannot be combined in one request",
                param="response_format",
            )
        object.__setattr__(self, "format_grammar", grammar)
        object.__setattr__(self, "parse_as", parse_as)

    @property
    def calls_tools(self) -> bool:
        """Tools are given and tool_choice is not "none": the model may call them."""
        return self.tools is not None and self.tool_choice != "none"

    @property
    def asks_reasoning(self) -> bool:
        """A reasoning option is set (they need a chat template)."""
        return any(
            value is not None
            for value in (
                self.reasoning_budget,
                self.reasoning_budget_message,
                self.reasoning_format,
                self.enable_thinking,
                self.chat_template_kwargs,
            )
        )


GENERATION_OPTIONS = frozenset(
    "max_tokens temperature top_k top_p min_p seed stop"
    " draft_max draft_min p_min strategy logprobs".split()
)
TOOL_OPTIONS = frozenset("tools tool_choice parallel_tool_calls".split())
REASONING_OPTIONS = frozenset(
    "reasoning_budget reasoning_budget_message reasoning_format enable_thinking"
    " chat_template_kwargs".split()
)
KNOWN_OPTIONS = (
    GENERATION_OPTIONS
    | TOOL_OPTIONS
    | REASONING_OPTIONS
    | {"prediction", "response_format", "prompt_cache_key"}
)
REASONING_FORMATS = ("auto", "none")


def check_reasoning_options(
    reasoning_format: str | None, budget: int | None, message: str | None = None
) -> None:
    """InvalidOptionError unless ``reasoning_format`` is "auto" / "none" / None, ``budget``
    an integer >= -1 or None and ``message`` a string or None."""
    if message is not None and not isinstance(message, str):
        raise InvalidOptionError(
            f"reasoning_budget_message must be a string, got {type(message).__name__}"
        )
    if reasoning_format is not None and reasoning_format not in REASONING_FORMATS:
        raise InvalidOptionError(
            f"reasoning_format must be 'auto' or 'none', got {reasoning_format!r}"
        )
    if budget is not None:
        require_int(
            "reasoning_budget",
            budget,
            -1,
            expected="an integer >= -1 (-1 = unlimited, 0 = no thinking)",
        )


def call_options(options: Mapping, draft: DraftParams, tools: bool = True) -> CallOptions:
    """The :class:`CallOptions` of a call's keyword options (see
    :meth:`~localspec.api.SpeculativeModel.chat`), the draft options over the model's
    defaults ``draft``; ``options`` is only read.  ``tools``: whether the tool options are
    known (a raw-text call has none, nor the reasoning options).  InvalidOptionError for an
    unknown option or a bad value."""
    unknown = set(options) - (
        KNOWN_OPTIONS if tools else KNOWN_OPTIONS - TOOL_OPTIONS - REASONING_OPTIONS
    )
    if unknown:
        raise InvalidOptionError(f"unknown option(s): {', '.join(sorted(unknown))}")
    prediction = options.get("prediction")
    if prediction is not None and not isinstance(prediction, str):
        raise InvalidOptionError(f"prediction must be a string, got {type(prediction).__name__}")
    thinking, kwargs = options.get("enable_thinking"), options.get("chat_template_kwargs")
    if thinking is not None and not isinstance(thinking, bool):
        raise InvalidOptionError(f"enable_thinking must be True or False, got {thinking!r}")
    if kwargs is not None and not (
        isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs)
    ):
        raise InvalidOptionError(
            f"chat_template_kwargs must be a dict with string keys, got {kwargs!r}"
        )
    check_reasoning_options(
        options.get("reasoning_format"),
        options.get("reasoning_budget"),
        options.get("reasoning_budget_message"),
    )
    key = options.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        raise InvalidOptionError(
            f"prompt_cache_key must be a string, got {type(key).__name__}",
            param="prompt_cache_key",
        )
    return CallOptions(
        params=params_from_options(
            {k: v for k, v in options.items() if k in GENERATION_OPTIONS}, draft
        ),
        prediction=prediction,
        response_format=options.get("response_format"),
        tools=options.get("tools"),
        tool_choice=options.get("tool_choice"),
        parallel_tool_calls=options.get("parallel_tool_calls", True),
        reasoning_budget=options.get("reasoning_budget"),
        reasoning_budget_message=options.get("reasoning_budget_message"),
        reasoning_format=options.get("reasoning_format"),
        enable_thinking=thinking,
        chat_template_kwargs=dict(kwargs) if kwargs is not None else None,
        prompt_cache_key=key,
    )


def params_from_options(options: Mapping, draft: DraftParams) -> GenerationParams:
    """The :class:`GenerationParams` of the generation options (``max_tokens``,
    ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed`` (-1: random), ``stop``,
    ``logprobs``, and ``draft_max`` / ``draft_min`` / ``p_min`` / ``strategy`` over the
    model's defaults ``draft``).  InvalidOptionError for any other option or a bad value."""
    unknown = set(options) - GENERATION_OPTIONS
    if unknown:
        raise InvalidOptionError(f"unknown option(s): {', '.join(sorted(unknown))}")
    stop = options.get("stop")
    stop = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, (list, tuple)):
        raise InvalidOptionError(
            f"stop must be a string or a list of strings, got {stop!r}", param="stop"
        )
    seed = options.get("seed")
    return GenerationParams(
        max_tokens=options.get("max_tokens", 512),
        sampling=SamplingParams(
            temperature=options.get("temperature", 0.0),
            top_k=options.get("top_k", 40),
            top_p=options.get("top_p", 0.95),
            min_p=options.get("min_p", 0.05),
        ),
        draft=DraftParams(
            draft_max=options.get("draft_max", draft.draft_max),
            draft_min=options.get("draft_min", draft.draft_min),
            p_min=options.get("p_min", draft.p_min),
            strategy=options.get("strategy", draft.strategy),
        ),
        stop=tuple(stop),
        seed=None if seed == -1 else seed,  # -1 = random, as in llama.cpp
        logprobs=options.get("logprobs"),
    )
