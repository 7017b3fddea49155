"""A loaded pair: :class:`SpeculativeModel`, its engines, slots, policies and the costs it
measures or loads; its generation calls (chat, raw text, fill in the middle) are
:mod:`localspec.api.generation_calls`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from localspec.api.generation_calls import GenerationCalls
from localspec.api.pairs import auto_context_for, check_pair
from localspec.decoding.loop import Generation
from localspec.decoding.params import DraftParams, LoadOptions
from localspec.decoding.policy import adaptive_parts, batch_sizes
from localspec.decoding.policy.costs import DRAFT_MODEL, fastest_of_two
from localspec.decoding.policy.learned import LearnedState, kind_name
from localspec.decoding.slots import SlotPool
from localspec.decoding.thinking import ChatReasoning, read_chat_template
from localspec.errors import EngineError, InvalidOptionError, UnsupportedModelError
from localspec.llama.assistant import is_assistant
from localspec.llama.engine import Engine
from localspec.llama.owner import LlamaThread


class SpeculativeModel(GenerationCalls):
    """A target model with an optional draft model, loaded once and reused.

    Use as a context manager or call :meth:`close`.  Any thread may call it: every llama.cpp
    call of the pair runs on the pair's own thread (``owner``, a
    :class:`~localspec.llama.owner.LlamaThread`).  The keyword ``options`` are those of
    :class:`~localspec.decoding.params.LoadOptions` (``n_ctx``, ``n_gpu_layers``,
    ``n_gpu_layers_draft``, ``n_threads``, ``draft_max``, ``draft_min``, ``p_min``,
    ``strategy``, ``verbose``, ``suffix_store_tokens``, ``parallel``, ``cache_ram_mib``),
    kept as ``load_options``.  ``parallel`` (1 to 64): how many generations run at once,
    each in its own sequence of one context (the ``n_ctx`` cells are shared); concurrent
    calls from several threads are then batched, their target decodes verified together
    (:mod:`localspec.decoding.scheduler`), and a call waits while all ``parallel`` slots are
    busy.  With ``parallel=1`` one generation runs at a time: a new call supersedes an
    unfinished streamed one, and starting one while another is being stepped in another
    thread raises EngineError.  ``cache_ram_mib``: see :mod:`localspec.llama.state_cache`.
    ``draft_max`` / ``draft_min`` / ``p_min`` / ``strategy`` are the defaults for every
    call (``default_draft``); each call may override them.  Prompt lookup is always
    available as a drafter; the draft model when ``draft`` is given.  ``draft_max="auto"``
    lets :class:`~localspec.decoding.policy.AdaptivePolicy` pick each round's drafter and
    length, learning costs across calls.  ``load_progress(role, fraction)`` reports
    loading: role "target" then "draft", fraction 0.0 to 1.0 of that model's weights read.

    Raises InvalidOptionError (an option out of range), ModelFileError (missing, non-GGUF
    or truncated file), IncompatibleDraftError (the reasons are in ``.reasons``),
    UnsupportedModelError (a recurrent target).
    """

    def __init__(
        self,
        target: str | Path,
        draft: str | Path | None = None,
        *,
        load_progress: Callable[[str, float], None] | None = None,
        **options,
    ):
        self.load_options = LoadOptions(**options)
        self.default_draft = self.load_options.draft
        self.target_path = Path(target)
        self.draft_path = Path(draft) if draft is not None else None
        self._draft_info = check_pair(self.target_path, self.draft_path)
        chat_template = read_chat_template(self.load_options.chat_template)
        self.auto_context = None
        if self.load_options.n_ctx == "auto":
            self.auto_context = auto_context_for(
                self.target_path, self.draft_path, self.load_options
            )
            self.load_options = replace(self.load_options, n_ctx=self.auto_context.n_ctx)
        self.owner = LlamaThread()
        self.target, self.draft_engine = self._load_engines(load_progress)
        self.target.chat_template_override = chat_template
        options = self.load_options
        self.reasoning = ChatReasoning(
            self.target,
            options.reasoning_format,
            options.reasoning_budget,
            options.reasoning_budget_message,
        )
        self.parallel = self.load_options.parallel
        self.slots = SlotPool(
            self.target,
            self.draft_engine,
            self.parallel,
            self.load_options.suffix_store_tokens,
            self.load_options.cache_ram_bytes,
        )
        first = self.slots.slots[0]
        self.drafter, self.lookup, self.suffix = first.drafter, first.lookup, first.suffix
        self.prediction, self.grammar = first.prediction, first.grammar
        self.learned = LearnedState.of_load(self.target_path, self.draft_path, self.load_options)
        if self.parallel > 1 or (
            self.default_draft.adaptive and self.default_draft.strategy != "none"
        ):
            self._policy(
                DraftParams(), greedy=True, predicted=False, constrained=False
            )  # measure costs now
        self._closed = False

    def _load_engines(
        self, load_progress: Callable[[str, float], None] | None
    ) -> tuple[Engine, Engine | None]:
        """(target, draft or None) loaded on the pair's thread; on any failure the engines
        loaded so far are freed and the thread stopped."""
        loaded = []
        assistant = self._assistant_path()
        try:
            for role, path in (("target", self.target_path), ("draft", self.draft_path)):
                if path is not None and not (role == "draft" and assistant is not None):
                    config = self.load_options.engine_config(role, assistant)
                    progress = _for_role(load_progress, role)
                    verbose = self.load_options.verbose
                    loaded.append(
                        Engine(
                            path, config, verbose=verbose, load_progress=progress, owner=self.owner
                        )
                    )
        except BaseException:
            for engine in loaded:
                engine.close()
            self.owner.stop()
            raise
        return loaded[0], loaded[1] if len(loaded) > 1 else None

    def _assistant_path(self) -> Path | None:
        """The draft GGUF when it is Gemma 4's assistant (it drafts as the target's MTP block
        does, not as a draft model); UnsupportedModelError where it cannot run."""
        if self._draft_info is None or not is_assistant(self._draft_info.architecture):
            return None
        if self.load_options.parallel > 1:
            raise UnsupportedModelError(
                f"{self.draft_path.name} (Gemma 4's assistant) drafts for one sequence: "
                "load it with parallel 1 (localspec serve -np 1)"
            )
        if self.load_options.strategy == "draft-model":
            raise InvalidOptionError(
                f"{self.draft_path.name} is Gemma 4's assistant: it drafts as the target's MTP "
                "block does (strategy 'mtp' or 'auto'), not as a draft model"
            )
        return self.draft_path

    @property
    def builtin_drafter(self) -> str:
        """ "built-in drafter (MTP, 1 head)" when the target's own MTP block drafts here,
        "assistant drafter (FILE)" for Gemma 4's assistant, else "" (none, or not loaded:
        parallel > 1, or a strategy without it)."""
        return self.target.mtp.label if self.target.mtp is not None else ""

    @property
    def drafters(self) -> list:
        """Every drafter this model can use: the draft model (if loaded), the target's MTP
        block (if loaded), prompt lookup, suffix, the caller's prediction (which drafts only in
        calls given a ``prediction``) and the grammar's forced tokens (only in calls given a
        ``response_format``): the first slot's :attr:`~localspec.decoding.slots.Slot.drafters`."""
        return self.slots.slots[0].drafters

    def _policy(
        self,
        dp: DraftParams,
        greedy: bool,
        predicted: bool,
        constrained: bool = False,
        slot=None,
        channels: bool = False,
    ):
        """``slot``'s policy for these options (slot 0's by default; ``channels``: estimates
        per channel of a reasoning model, :meth:`Slot.policy`); the pair's first adaptive
        one loads the costs stored for this machine (:attr:`learned`) and measures the rest
        (target batches up to 17 tokens, 65 with several slots); each starts from the
        acceptance stored for its kind of request (and channel)."""
        slot = slot or self.slots.slots[0]
        policy = slot.policy(dp, greedy, predicted, constrained, channels)
        parts = adaptive_parts(policy)
        if parts and not slot.costs.measured:  # the pair's costs, shared: loaded or measured once
            self._load_or_measure_costs(slot.costs, slot.drafter is not None)
        for channel, adaptive in parts:
            self.learned.seed(
                adaptive, kind_name(dp.strategy, greedy, predicted, constrained, channel)
            )
        return policy

    def _load_or_measure_costs(self, costs, with_draft_model: bool) -> None:
        """The stored costs of this pair on this machine where they hold, the rest measured
        (target batches up to 17 tokens, 65 with several slots; the draft model's step)."""
        c1_now = partial(self.owner.run, fastest_of_two, self.target, [100], [0])
        self.learned.load_costs(costs, c1_now)
        missing = costs.unmeasured(batch_sizes(self.parallel))
        draft_missing = with_draft_model and not costs.draft_known()
        if missing or draft_missing:
            engines = {DRAFT_MODEL: self.draft_engine} if draft_missing else {}
            self.owner.run(costs.measure, self.target, engines, 100, missing)
            self.learned.save_slots(self.slots.slots, force=True)

    def _generation_ended(self, generation: Generation) -> None:
        self.slots.release(generation)
        self.learned.save_slots(self.slots.slots)  # at most every few seconds

    def _ensure_open(self) -> None:
        if self._closed:
            raise EngineError("the model is closed")

    def reset_cache(self) -> None:
        """Empty both KV caches and the prompt cache (the next call evaluates its whole prompt)."""
        self.owner.run(self._trim_both, 0)
        if self.slots.prompt_cache is not None:
            self.slots.prompt_cache.clear()

    def _trim_both(self, n_keep: int) -> None:
        for slot in self.slots.slots:
            slot.target.trim(n_keep)
            if slot.drafter is not None:
                slot.drafter.engine.trim(n_keep)

    # --- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        """Free both models; any later call raises EngineError ("the model is closed")."""
        if self._closed:
            return
        self._closed = True
        self.learned.save_slots(self.slots.slots, force=True)
        for slot in self.slots.slots:
            running = slot.generation() if slot.generation is not None else None
            if running is not None:
                running.supersede()
        if self.draft_engine is not None:
            self.draft_engine.close()
        self.target.close()
        self.owner.stop()

    def __enter__(self) -> SpeculativeModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _for_role(
    load_progress: Callable[[str, float], None] | None, role: str
) -> Callable[[float], None] | None:
    return None if load_progress is None else (lambda fraction: load_progress(role, fraction))
