""":class:`Generation`: a generation's state, its steps round by round (prompt, emit, round,
finish), and the caller's side: iteration one round per step (on the owner thread or in a
shared batch), cancel, supersede, the end told once."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from localspec.decoding.drafters import Drafter
from localspec.decoding.loop.drafting import Drafting
from localspec.decoding.loop.emit import Emitting
from localspec.decoding.loop.plan import NO_PLAN, RequestPlan
from localspec.decoding.loop.prompt import PromptPhase
from localspec.decoding.loop.round import RoundPhase
from localspec.decoding.loop.run import _Run
from localspec.decoding.loop.verify import Verifying
from localspec.decoding.params import GenerationParams
from localspec.decoding.policy import Policy
from localspec.decoding.stats import GenerationResult, GenerationStats, TokenEvent
from localspec.decoding.text import ChannelAssembler, TextAssembler
from localspec.decoding.thinking import ThinkingBudget
from localspec.decoding.tool_parser import ToolCallParser
from localspec.errors import ContextOverflowError, EngineError, InvalidOptionError
from localspec.llama.engine import Engine
from localspec.llama.owner import LlamaThread


class Generation(PromptPhase, RoundPhase, Drafting, Verifying, Emitting):
    """An iterator of :class:`TokenEvent`; when it is exhausted, ``result`` holds the
    :class:`GenerationResult`.  ``cancel()`` (from any thread) ends it after the
    current round with finish_reason "cancelled".

    A model runs one generation at a time: starting another on the same model
    supersedes this one (its next step raises EngineError), and stepping it from a
    second thread while a step is running raises EngineError instead of corrupting
    the KV cache.

    Each step runs one whole round on ``owner`` (the pair's llama.cpp thread; the
    target's own by default) and hands back that round's events, so a caller on another
    thread pays one hand-off per round.  With a ``batcher``
    (:class:`~localspec.decoding.scheduler.Batcher`; ``target`` is then one sequence of a
    shared context) the round runs on the caller's thread and its target decode is shared
    with the other sequences' rounds.  ``on_end(generation)`` is called once when it ends.

    With a ``thinking`` plan (:class:`~localspec.decoding.reasoning.ThinkingPlan`) each
    token is labelled with its channel, the answer and the thinking are kept apart, stop
    strings apply to the answer only, and a spent thinking budget forces the close as a
    grammar whose forced tokens are drafted for free (see :meth:`_steer_thinking`)."""

    def __init__(
        self,
        target: Engine,
        drafters: Sequence[Drafter],
        policy: Policy,
        prompt_tokens: Sequence[int],
        params: GenerationParams,
        started_at: float | None = None,
        lock: threading.Lock | None = None,
        owner: LlamaThread | None = None,
        plan: RequestPlan = NO_PLAN,
        batcher=None,
        on_end: Callable[[Generation], None] | None = None,
    ):
        if len(prompt_tokens) == 0:
            raise InvalidOptionError("the prompt is empty")
        if len(prompt_tokens) >= target.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(prompt_tokens)} tokens; the context holds {target.n_ctx} "
                "(raise n_ctx or shorten the prompt)"
            )
        self.target = target
        self.drafters = list(drafters)
        self.policy = policy
        self.prompt_tokens = list(prompt_tokens)
        self.params = params
        self.result: GenerationResult | None = None
        self._started_at = started_at if started_at is not None else time.perf_counter()
        self._cancelled = False
        self._superseded = False
        self._step_lock = lock if lock is not None else threading.Lock()
        self._owner = owner or target.owner
        self.plan = plan  # what the request brings beside the prompt; never changed
        # the grammar every emitted token satisfies now (None: free text); the thinking
        # budget's forced close replaces it while it forces
        self.constraint = plan.constraint
        self._parse = plan.parse  # turns a finished answer into result.parsed
        # reads the answer's tool calls as they are written
        self._calls = ToolCallParser(plan.tool_format) if plan.tool_format else None
        self._batcher = (
            batcher  # shares the target's decodes with other sequences (scheduler.Batcher)
        )
        self._on_end = on_end  # told once when the generation ends (its slot is free again)
        self._prompt_truncated = plan.prompt_truncated  # the caller cut the prompt (FIM)
        self._thinking = plan.thinking  # how the output splits into thinking and answer
        # (a budget beside a grammar was refused when the plan was made: check_thinking)
        self._events = self._run()
        self._ready: deque[TokenEvent] = deque()

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def supersede(self) -> None:
        self._superseded = True

    @property
    def finished(self) -> bool:
        return self.result is not None

    def __iter__(self) -> Iterator[TokenEvent]:
        return self

    def __next__(self) -> TokenEvent:
        if self._superseded and not self.finished:
            raise EngineError("this generation was superseded by a newer call on the same model")
        if self._ready:
            return self._ready.popleft()
        if not self._step_lock.acquire(blocking=False):
            raise EngineError("the model is busy with another generation in another thread")
        ended = True  # unless the round returns normally without finishing
        try:
            if self._batcher is not None:
                with self._batcher.round(self.target.seq):
                    self._next_round()
                if self.finished:
                    self._batcher.leave(self.target.seq)
            else:
                self._owner.run(self._next_round)
            ended = self.finished
        finally:
            self._step_lock.release()
            if (
                ended and self._on_end is not None
            ):  # finished, or failed: either way its slot is free
                on_end, self._on_end = self._on_end, None
                on_end(self)
        if not self._ready:
            raise StopIteration
        return self._ready.popleft()

    def _next_round(self) -> None:
        """Take the events of the next round (on the owner thread); none once finished."""
        for event in self._events:
            if event is _ROUND_END:
                if self._ready:
                    return
                continue
            self._ready.append(event)

    def run(self) -> GenerationResult:
        for _ in self:
            pass
        return self.result

    def _run(self) -> Iterator[TokenEvent]:
        """The generation's events, round by round, each round's closed by ``_ROUND_END``."""
        run = self._start()
        self._steer_thinking(
            run
        )  # a budget of 0 with the block opened by the prompt: close at once
        first = self._read_prompt(run)
        if first is None:  # cancelled while reading the prompt
            run.stats.total_s = time.perf_counter() - self._started_at
            self.result = GenerationResult(
                "", [], [], "cancelled", run.stats, reasoning=run.out.reasoning
            )
            return
        emitted = [first]
        while True:
            finish = yield from self._emit(run, emitted)
            yield _ROUND_END
            finish = finish or self._stop_reason()
            if finish is not None:
                break
            emitted = self._round(run)
        yield from self._finish(run, finish)

    def _start(self) -> _Run:
        """A new generation: the policy and the drafters told, the random streams seeded."""
        self.policy.new_generation()
        inputs = self.plan.drafter_inputs()
        for d in self.drafters:
            d.begin(self.prompt_tokens, inputs)
        seeds = np.random.SeedSequence(self.params.seed).spawn(2)
        return _Run(
            context=list(self.prompt_tokens),
            stats=GenerationStats(
                prompt_tokens=len(self.prompt_tokens), prompt_truncated=self._prompt_truncated
            ),
            out=self._assembler(),
            rng=np.random.default_rng(seeds[0]),
            draft_rng=np.random.default_rng(seeds[1]),
            budget=ThinkingBudget(self._thinking)
            if self._thinking is not None and self._thinking.budget >= 0
            else None,
        )

    def _assembler(self) -> TextAssembler | ChannelAssembler:
        if self._thinking is None:
            return TextAssembler(self.target, self.params.stop)
        return ChannelAssembler(self.target, self.params.stop, self._thinking.splitter())


_ROUND_END = object()  # marks the end of one round's events inside Generation._run
