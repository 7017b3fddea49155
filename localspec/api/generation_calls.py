"""The calls that start a generation on a loaded pair: :meth:`~GenerationCalls.chat`,
:meth:`~GenerationCalls.generate` (raw text or token ids) and :meth:`~GenerationCalls.infill`
(fill in the middle).  Each takes one :class:`~localspec.decoding.params.CallOptions` (what the
server builds from a request) or the same options as keywords (parsed into one), and starts a
:class:`~localspec.decoding.loop.Generation` in a slot of the pair."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, overload

from localspec.decoding.fim import engine_fim_prompt
from localspec.decoding.grammar import Constraint
from localspec.decoding.loop import Generation, RequestPlan
from localspec.decoding.params import CallOptions, DraftParams, GenerationParams, call_options
from localspec.decoding.slots import SlotPool
from localspec.decoding.stats import GenerationResult
from localspec.decoding.thinking import ChatReasoning
from localspec.decoding.tool_calls import (
    ToolFormat,
    ToolRequest,
    normalise_messages,
    tool_format,
    tool_request,
)
from localspec.errors import EngineError, InvalidOptionError
from localspec.llama.engine import Engine
from localspec.llama.grammar_vocab import grammar_tokenizer
from localspec.llama.owner import LlamaThread

Messages = list[dict]


class GenerationCalls:
    """The generation calls of :class:`~localspec.api.SpeculativeModel`, which holds the
    engines, slots, policies and costs they use (declared here, set there)."""

    target: Engine
    target_path: Path
    owner: LlamaThread
    default_draft: DraftParams
    reasoning: ChatReasoning
    slots: SlotPool
    _policy: Callable
    _generation_ended: Callable[[Generation], None]
    _ensure_open: Callable[[], None]

    @overload
    def generate(
        self,
        prompt: str | list[int],
        options: CallOptions | None = None,
        *,
        stream: Literal[False] = False,
        **keywords,
    ) -> GenerationResult: ...
    @overload
    def generate(
        self,
        prompt: str | list[int],
        options: CallOptions | None = None,
        *,
        stream: Literal[True],
        **keywords,
    ) -> Generation: ...
    def generate(self, prompt, options=None, *, stream=False, **keywords):
        """Continue raw text (no chat template), or a list of token ids used as given.
        See :meth:`chat` for options (no tools nor reasoning options: there is no template)."""
        started = time.perf_counter()
        self._ensure_open()
        call = self._call_options(options, keywords, chat=False)
        if isinstance(prompt, str):
            tokens = self.target.tokenize(prompt, add_special=True, parse_special=False)
        else:
            if not isinstance(prompt, (list, tuple)) or not all(isinstance(t, int) for t in prompt):
                raise InvalidOptionError(
                    f"prompt must be a string or a list of token ids, got {type(prompt).__name__}"
                )
            tokens = list(prompt)
            if any(not 0 <= t < self.target.n_vocab for t in tokens):
                raise InvalidOptionError(f"token ids must be in [0, {self.target.n_vocab})")
        return self._start(tokens, started, stream, call)

    @overload
    def infill(
        self,
        prefix: str,
        suffix: str = "",
        options: CallOptions | None = None,
        *,
        extra: Sequence[dict] = (),
        stream: Literal[False] = False,
        **keywords,
    ) -> GenerationResult: ...
    @overload
    def infill(
        self,
        prefix: str,
        suffix: str = "",
        options: CallOptions | None = None,
        *,
        extra: Sequence[dict] = (),
        stream: Literal[True],
        **keywords,
    ) -> Generation: ...
    def infill(self, prefix, suffix="", options=None, *, extra=(), stream=False, **keywords):
        """Fill in the middle between ``prefix`` and ``suffix`` (code before and after the
        cursor) with the target's FIM tokens; ``extra``: other files as ``[{"filename",
        "text"}]`` (llama-server's ``input_extra``).  Layout and trimming to the context:
        :func:`localspec.decoding.fim.fim_prompt`.  Options as in :meth:`generate`.
        InvalidOptionError for a model without FIM tokens."""
        started = time.perf_counter()
        self._ensure_open()
        call = self._call_options(options, keywords, chat=False)
        reserve = min(call.params.max_tokens, self.target.n_ctx // 2)
        prompt = engine_fim_prompt(self.target, prefix, suffix, extra, reserve)
        return self._start(prompt.tokens, started, stream, call, prompt_truncated=prompt.truncated)

    @overload
    def chat(
        self,
        messages: str | Messages,
        options: CallOptions | None = None,
        *,
        stream: Literal[False] = False,
        **keywords,
    ) -> GenerationResult: ...
    @overload
    def chat(
        self,
        messages: str | Messages,
        options: CallOptions | None = None,
        *,
        stream: Literal[True],
        **keywords,
    ) -> Generation: ...
    def chat(self, messages, options=None, *, stream=False, **keywords):
        """Answer a conversation rendered with the target's own chat template.

        Args:
            messages: OpenAI-style ``[{"role": "user", "content": "..."}]``, or a string
                (one user message).
            options: the call's options as one
                :class:`~localspec.decoding.params.CallOptions`; or leave it out and give
                them as ``keywords`` (not both).
            stream: False returns a :class:`GenerationResult`; True returns a
                :class:`Generation` to iterate for :class:`TokenEvent`s, with
                ``.result`` set at the end.
            keywords: ``max_tokens`` (512), ``temperature`` (0 = greedy), ``top_k`` (40),
                ``top_p`` (0.95), ``min_p`` (0.05), ``seed`` (None), ``stop`` (strings),
                ``draft_max`` (an int or "auto"), ``draft_min``, ``p_min``, ``strategy``
                ("auto", "draft-model", "mtp", "prompt-lookup", "suffix", "prediction",
                "none"); defaults from :meth:`__init__`.  ``prediction``: text the answer is
                expected to repeat (OpenAI's Predicted Outputs), drafted from by
                :class:`~localspec.decoding.drafters.PredictionDrafter`; the stats count its
                tokens under ``drafted_by_drafter["prediction"]`` /
                ``accepted_by_drafter["prediction"]``.  ``logprobs``: None, or 0 to 20
                alternatives per token (see :class:`GenerationParams`).
                ``response_format``: OpenAI's ``{"type": "json_object"}`` or
                ``{"type": "json_schema", "json_schema": {"name", "schema"}}``, or a pydantic
                model class: every token then satisfies the schema (llguidance), the tokens
                the schema forces are drafted for free (``drafted_by_drafter["grammar"]``),
                and with a pydantic class ``result.parsed`` is the validated object.
                ``tools`` / ``tool_choice`` ("auto", "none", "required", or
                ``{"type": "function", "function": {"name"}}``) / ``parallel_tool_calls``
                (True): OpenAI's function tools, rendered by the GGUF's chat template; a
                call the model writes follows the function's schema (formats: Qwen's
                ``<tool_call>``, Llama 3.x JSON; see :mod:`localspec.decoding.tool_calls`)
                and comes back in ``result.tool_calls`` (OpenAI's shape) with finish_reason
                "tool_calls"; ``result.content`` is the text before it.  Messages may hold
                an assistant's ``tool_calls`` and ``{"role": "tool", "content"}`` replies.
                InvalidOptionError for a template without a call format.  Thinking models:
                ``reasoning_budget``, ``reasoning_budget_message``, ``enable_thinking``,
                ``chat_template_kwargs``, ``reasoning_format``; ``result.reasoning``
                (docs/reasoning.md, :class:`ChatReasoning`).  ``prompt_cache_key``: a string
                naming the conversation (OpenAI's field); with ``parallel`` > 1 the call
                takes the slot that last ran that key.

        The KV cache prefix shared with the previous call is reused, so a multi-turn
        chat only evaluates the new tokens.  Raises InvalidOptionError for bad messages or
        options, ContextOverflowError when the prompt does not fit into ``n_ctx``.
        """
        started = time.perf_counter()
        self._ensure_open()
        call = self._call_options(options, keywords, chat=True)
        tools = self._tools(call)
        tokens, thinking = self.reasoning.chat_prompt(
            normalise_messages(messages), tools, call, self._constraint
        )
        return self._start(tokens, started, stream, call, tools, thinking=thinking)

    def options(self, **keywords) -> CallOptions:
        """The keyword options of :meth:`chat` as one record, over this model's draft
        defaults (checked now: InvalidOptionError for an unknown option or a bad value)."""
        return call_options(keywords, self.default_draft)

    def _call_options(self, options: CallOptions | None, keywords: dict, chat: bool) -> CallOptions:
        """The call's one options record: ``options`` as given, or ``keywords`` parsed over
        this model's draft defaults.  InvalidOptionError for both at once, or for tools or
        reasoning options in a call with no chat template (``chat`` False)."""
        if options is None:
            return call_options(keywords, self.default_draft, tools=chat)
        if not isinstance(options, CallOptions):
            raise InvalidOptionError(
                f"options must be a CallOptions (or give keyword options), "
                f"got {type(options).__name__}"
            )
        if keywords:
            raise InvalidOptionError(
                "give either a CallOptions or keyword options, not both "
                f"(also given: {', '.join(sorted(keywords))})"
            )
        if not chat and options.calls_tools:
            raise InvalidOptionError("tools need a chat call (a chat template renders them)")
        if not chat and options.asks_reasoning:
            raise InvalidOptionError(
                "reasoning options need a chat call (a chat template renders the thinking)"
            )
        return options

    @property
    def tool_format(self) -> ToolFormat | None:
        """The target's tool-call format (None: its chat template has none localspec knows)."""
        if not hasattr(self, "_tool_format"):
            self._tool_format = tool_format(
                self.target.chat_template,
                lambda text: self.target.tokenize(text, add_special=False, parse_special=True),
            )
        return self._tool_format

    @property
    def supports_tools(self) -> bool:
        return self.tool_format is not None

    def _tools(self, call: CallOptions) -> ToolRequest | None:
        """The call's tools to render, their call grammar and format; None without tools or
        with tool_choice "none"."""
        return tool_request(call, lambda: self.tool_format, self.target_path.name)

    def _start(
        self,
        tokens: list[int],
        started: float,
        stream: bool,
        call: CallOptions,
        tool_grammar: ToolRequest | None = None,
        prompt_truncated: bool = False,
        thinking=None,
    ):
        params = call.params
        predicted = self._tokenize_prediction(call.prediction)
        constraint, parse_as = self._call_constraint(call, tool_grammar)
        plan = RequestPlan(
            constraint=constraint,
            prediction=tuple(predicted),
            tool_format=tool_grammar.format if tool_grammar else None,
            parse=parse_as.model_validate_json if parse_as is not None else None,
            thinking=thinking,
            prompt_truncated=prompt_truncated,
        )
        kind = (params.draft, params.sampling.greedy, bool(predicted), constraint is not None)
        self.slots.slots[0].policy(*kind)  # InvalidOptionError before waiting for a slot
        slot = self.slots.acquire(tokens, call.prompt_cache_key)
        try:
            generation = self._generation_in(
                slot,
                self._policy(*kind, slot=slot, channels=thinking is not None),
                tokens,
                params,
                started_at=started,
                plan=plan,
            )
        except BaseException:
            self.slots.unreserve(slot)
            raise
        return generation if stream else generation.run()

    def _call_constraint(self, call: CallOptions, tool_grammar: ToolRequest | None):
        """(the call's grammar compiled, or None; the pydantic class to parse the answer
        into, or None): the tool-call grammar, or the ``response_format``'s (the record
        refuses both at once)."""
        if tool_grammar is not None:
            return self._constraint(tool_grammar.grammar, tool_grammar.trigger), None
        return self._constraint(call.format_grammar), call.parse_as

    def _generation_in(
        self, slot, policy, tokens: list[int], params: GenerationParams, **options
    ) -> Generation:
        """A generation of ``tokens`` in ``slot``, superseding the one there (one slot only)."""
        if not slot.step_lock.acquire(blocking=False):
            raise EngineError("the model is busy with a generation in another thread")
        try:
            previous = slot.generation() if slot.generation is not None else None
            if previous is not None and not previous.finished:
                previous.supersede()
            generation = Generation(
                slot.target,
                slot.drafters,
                policy,
                tokens,
                params,
                lock=slot.step_lock,
                owner=self.owner,
                batcher=slot.batcher,
                on_end=self._generation_ended,
                **options,
            )
            self.slots.occupy(slot, generation)
            return generation
        finally:
            slot.step_lock.release()

    def _constraint(self, grammar: str | None, trigger: int | None = None) -> Constraint | None:
        """The grammar compiled against the target's vocabulary (its tokenizer for
        llguidance is built on first use, about 1 s), asleep until ``trigger`` when given;
        InvalidOptionError if it cannot be compiled."""
        if grammar is None:
            return None
        return Constraint.compile(
            grammar_tokenizer(self.target), grammar, self.target.n_vocab, trigger
        )

    def _tokenize_prediction(self, prediction: str | None) -> list[int]:
        return (
            self.target.tokenize(prediction, add_special=False, parse_special=False)
            if prediction
            else []
        )
