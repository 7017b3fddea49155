"""Reasoning models in a chat call and in the loop: the call's template variables and
budget, the plan one generation is given, and the state that forces the close once the
budget is spent (see docs/reasoning.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.decoding.reasoning import (
    CONTENT,
    EITHER,
    NO_REASONING,
    REASONING,
    ChannelSplitter,
    ReasoningFormat,
    channel_splitter,
    close_grammar,
    detect_reasoning,
    prompt_start,
    single_token_markers,
)
from localspec.decoding.stats import GenerationStats
from localspec.errors import InvalidOptionError

UNLIMITED = 1 << 30


@dataclass(frozen=True)
class ThinkingPlan:
    """What the loop needs to split one generation into channels and bound its thinking.

    ``fmt`` / ``start``: from :func:`~localspec.decoding.reasoning.detect_reasoning` /
    :func:`~localspec.decoding.reasoning.prompt_start`; ``marker_tokens``: from
    :func:`~localspec.decoding.reasoning.single_token_markers`.  ``budget``: reasoning
    tokens allowed (-1: unlimited; 0: the close is forced at once).  ``compile_close(text)``:
    the :class:`~localspec.decoding.grammar.Constraint` of
    :func:`~localspec.decoding.reasoning.close_grammar` for ``text`` (called when the budget
    is spent).  ``tokenize(text)``: the close's tokens as the vocabulary spells them (special
    tokens parsed), drafted as the close's forced tokens.  ``message``: text forced before the
    close (llama.cpp's ``--reasoning-budget-message``), so the model goes on to answer."""

    fmt: ReasoningFormat
    start: str = EITHER
    marker_tokens: Mapping[int, str] = field(default_factory=dict)
    budget: int = -1
    compile_close: Callable[[str], object] | None = None
    tokenize: Callable[[str], Sequence[int]] | None = None
    message: str = ""

    def splitter(self) -> ChannelSplitter:
        return channel_splitter(self.fmt, self.start, self.marker_tokens)


class ThinkingBudget:
    """One generation's budget: how many reasoning tokens are left, and the close's
    grammar while it is being forced (``closing``) with the tokens planned for it."""

    def __init__(self, plan: ThinkingPlan):
        self.plan = plan
        self.closing = None  # the forced close's Constraint, while it is forced
        self.closed = False  # the close was forced: the budget no longer counts
        self._planned: list[int] = []  # the close's tokens, drafted as forced tokens
        self._from = 0  # the context's length when the close began

    def left(self, stats: GenerationStats) -> int:
        """Reasoning tokens the budget still allows (:data:`UNLIMITED` without one)."""
        if self.plan.budget < 0 or self.closed:
            return UNLIMITED
        spent = stats.channels.get(REASONING)
        return self.plan.budget - (spent.tokens if spent is not None else 0)

    def steer(self, out, stats: GenerationStats, constraint, context: Sequence[int]):
        """The constraint for the next round (``out``: the loop's ChannelAssembler;
        ``constraint``: the one in force; ``context``: prompt and tokens so far): the close's
        grammar once the budget is spent inside the thinking; None again once the close is
        out; else ``constraint`` unchanged."""
        if self.closing is not None:
            if self._close_out(out, context):
                self.closing = None
                return None
            return constraint
        if out.channel == REASONING and self.left(stats) <= 0:
            forced = out.splitter.forced_close(self.plan.message)
            if forced and self.plan.compile_close is not None:
                self.closing = self.plan.compile_close(forced)
                self._planned = list(self.plan.tokenize(forced)) if self.plan.tokenize else []
                self._from, self.closed = len(context), True
                return self.closing
        return constraint

    def forced_tokens(self, context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens to draft for the close: the rest of the planned tokens while
        the output follows them, else what the close's grammar forces."""
        done = list(context[self._from :])
        if self._planned[: len(done)] == done and len(done) < len(self._planned):
            return self._planned[len(done) :][:k]
        return self.closing.forced(k) if k > 0 else []

    def _close_out(self, out, context: Sequence[int]) -> bool:
        done = list(context[self._from :])
        if self._planned and self._planned == done[: len(self._planned)]:
            return True
        return out.channel == CONTENT and not self.closing.forced(1)


def read_chat_template(value: str | None) -> str | None:
    """A ``chat_template`` option's template: the text itself, or the contents of the file
    it names (a value without Jinja's ``{%`` / ``{{`` that is an existing path).
    InvalidOptionError for a path that cannot be read."""
    if value is None or "{%" in value or "{{" in value:
        return value
    path = Path(value).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidOptionError(
            f"chat_template: cannot read {value!r} as a template file ({exc})"
        ) from None


def thinking_budget(call_budget: int | None, enable_thinking: bool | None, default: int) -> int:
    """The call's thinking budget in tokens: 0 when thinking is turned off
    (``enable_thinking=False``), else the call's ``reasoning_budget``, else ``default``."""
    if enable_thinking is False:
        return 0
    return call_budget if call_budget is not None else default


def template_kwargs(
    fmt: ReasoningFormat, budget: int, enable_thinking: bool | None, extra: Mapping | None
) -> dict | None:
    """The extra template variables of a chat call: ``extra`` (``chat_template_kwargs``),
    and ``enable_thinking`` when given, or False for a template that reads it when the
    budget is 0 (Qwen3 then writes an empty block and the answer starts at once)."""
    kwargs = dict(extra or {})
    if enable_thinking is not None:
        kwargs.setdefault("enable_thinking", enable_thinking)
    elif budget == 0 and fmt.reads_enable_thinking:
        kwargs.setdefault("enable_thinking", False)
    return kwargs or None


def plan_thinking(
    fmt: ReasoningFormat,
    prompt_tail: str,
    marker_tokens: Mapping[int, str],
    budget: int,
    compile_close: Callable[[str], object],
    tokenize: Callable[[str], Sequence[int]] | None = None,
    message: str = "",
) -> ThinkingPlan | None:
    """The :class:`ThinkingPlan` of a chat call whose rendered prompt ends with
    ``prompt_tail``; None without a reasoning format.  ``compile_close(grammar_text)``
    compiles :func:`~localspec.decoding.reasoning.close_grammar`'s grammar."""
    if fmt.kind is None:
        return None
    special = tuple(marker_tokens.values())
    start = prompt_start(fmt, prompt_tail)
    close = (lambda text: compile_close(close_grammar(text, special))) if budget >= 0 else None
    return ThinkingPlan(fmt, start, dict(marker_tokens), budget, close, tokenize, message)


def check_thinking(plan: ThinkingPlan | None, constrained: bool, tools: bool) -> None:
    """InvalidOptionError for what a thinking model cannot do yet: a response_format while
    it may think (the schema would have to start after the close), or a thinking budget
    with tools (two grammars at once).  Turn thinking off (``enable_thinking=False``) or
    the split off (``reasoning_format="none"``) to use them."""
    if plan is None or plan.start == CONTENT:
        return
    if constrained:
        raise InvalidOptionError(
            "response_format with a model that thinks is not supported yet: pass "
            "enable_thinking=False "
            "(or reasoning_budget=0) to answer at once, or reasoning_format='none'"
        )
    if tools and plan.budget >= 0:
        raise InvalidOptionError(
            "a thinking budget cannot be combined with tools yet: pass reasoning_budget=-1"
        )


class ChatReasoning:
    """A model's reasoning format (read from the chat template in use, once) and how a chat
    call renders its prompt for it.  ``load_format`` / ``load_budget`` / ``load_message``: the
    load options ``reasoning_format``, ``reasoning_budget`` and ``reasoning_budget_message``,
    each call's defaults."""

    def __init__(
        self, engine, load_format: str = "auto", load_budget: int = -1, load_message: str = ""
    ):
        self.engine = engine
        self.load_format = load_format
        self.load_budget = load_budget
        self.load_message = load_message
        self._read: tuple[ReasoningFormat, dict[int, str]] | None = None

    @property
    def format(self) -> ReasoningFormat:
        return self._markers()[0]

    def _markers(self) -> tuple[ReasoningFormat, dict[int, str]]:
        if self._read is None:
            fmt = detect_reasoning(self.engine.chat_template)
            tokenize = lambda text: self.engine.tokenize(
                text, add_special=False, parse_special=True
            )  # noqa: E731
            self._read = (fmt, single_token_markers(fmt, tokenize))
        return self._read

    def chat_prompt(self, messages: list[dict], tools, call, compile_close):
        """(prompt tokens, :class:`ThinkingPlan` or None) of a chat call: ``messages``
        normalised, ``tools`` its :class:`~localspec.decoding.tool_calls.ToolRequest` or None,
        ``call`` its :class:`~localspec.decoding.params.CallOptions`, ``compile_close(grammar)``
        -> a Constraint; the template is given ``enable_thinking`` and ``chat_template_kwargs``.
        InvalidOptionError for options a thinking model cannot combine (:func:`check_thinking`)."""
        fmt, markers = self._markers()
        if (call.reasoning_format or self.load_format) != "auto":
            fmt = NO_REASONING
        budget = thinking_budget(call.reasoning_budget, call.enable_thinking, self.load_budget)
        kwargs = template_kwargs(fmt, budget, call.enable_thinking, call.chat_template_kwargs)
        tokens = self.engine.chat_tokens(messages, tools.tools if tools else None, kwargs)
        if fmt.kind is None:
            return tokens, None
        tail = b"".join(self.engine.token_bytes(t) for t in tokens[-16:]).decode(
            "utf-8", errors="replace"
        )
        # noqa: E731
        tokenize = lambda text: self.engine.tokenize(text, add_special=False, parse_special=True)
        message = call.reasoning_budget_message
        message = self.load_message if message is None else message
        plan = plan_thinking(fmt, tail, markers, budget, compile_close, tokenize, message)
        check_thinking(plan, call.response_format is not None, tools is not None)
        return tokens, plan
