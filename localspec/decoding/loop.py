"""The speculative decoding loop: draft, verify in one target decode, accept, trim.

Algorithm: Leviathan et al. 2022 (arXiv:2211.17192) and Chen et al. 2023
(arXiv:2302.01318); the acceptance rules live in :mod:`localspec.decoding.sampling`.

Invariant between rounds: the target's KV cache holds the context except its last
token ``t`` (emitted, not yet decoded).  A round decodes ``[t, d_1..d_k]`` with logits
on all k + 1 rows, keeps ``t, d_1..d_n``, removes the rest from the cache, and emits
``d_1..d_n`` plus one token from the target (a correction or the bonus).  With no
drafter, or k = 0, the same round is plain decoding.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from localspec.decoding.drafters import Draft, Drafter, round_label
from localspec.decoding.drafters.grammar import chained
from localspec.decoding.grammar import Constraint
from localspec.decoding.params import GenerationParams
from localspec.decoding.policy import Policy
from localspec.decoding.reasoning import CONTENT, REASONING
from localspec.decoding.rounds import EmittedToken, RoundOutcome
from localspec.decoding.sampling import (
    CandidateRows,
    Candidates,
    RowArgmax,
    accept_greedy,
    accept_sampled,
    row_candidates,
    token_logprobs,
)
from localspec.decoding.stats import GenerationResult, GenerationStats, TokenEvent, TokenSource
from localspec.decoding.text import ChannelAssembler, TextAssembler
from localspec.decoding.thinking import UNLIMITED, ThinkingBudget, ThinkingPlan
from localspec.decoding.tool_calls import ToolFormat
from localspec.decoding.tool_parser import ToolCallParser
from localspec.errors import ContextOverflowError, EngineError, InvalidOptionError
from localspec.llama.engine import Engine
from localspec.llama.owner import LlamaThread


class Generation:
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
        constraint: Constraint | None = None,
        parse: Callable[[str], Any] | None = None,
        tool_format: ToolFormat | None = None,
        batcher=None,
        on_end: Callable[[Generation], None] | None = None,
        prompt_truncated: bool = False,
        thinking: ThinkingPlan | None = None,
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
        self.constraint = constraint  # a grammar every emitted token satisfies (None: free text)
        self._parse = parse  # turns a finished answer into result.parsed
        # reads the answer's tool calls as they are written
        self._calls = ToolCallParser(tool_format) if tool_format else None
        self._batcher = (
            batcher  # shares the target's decodes with other sequences (scheduler.Batcher)
        )
        self._on_end = on_end  # told once when the generation ends (its slot is free again)
        self._prompt_truncated = prompt_truncated  # the caller cut the prompt to fit (a FIM prompt)
        self._thinking = (
            thinking  # how the output splits into thinking and answer (None: all answer)
        )
        if thinking is not None and constraint is not None and thinking.budget >= 0:
            raise InvalidOptionError(
                "a thinking budget cannot be combined with response_format or tools"
            )
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
        for d in self.drafters:
            d.begin(self.prompt_tokens)
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

    def _read_prompt(self, run: _Run) -> EmittedToken | None:
        """Prompt eval: reuse the cached prefix, decode the rest (and let the policy's
        prefill drafters read it: a draft model drafting from round 1), sample the first
        token; None when cancelled while reading."""
        target, context, stats = self.target, run.context, run.stats
        reused = min(target.reuse_prefix(context), len(context) - 1)
        target.trim(reused)
        stats.prompt_cached_tokens = reused
        t0 = target.decode_s
        logits = self._prefill(context[reused:])
        stats.prompt_eval_s = target.decode_s - t0
        if logits is None:
            return None
        if not self._cancelled:
            for d in self.policy.prefill_drafters:
                before = d.decode_s
                d.prefill(context)
                stats.prompt_eval_s += d.decode_s - before
        token, p_token = self._choose(logits[0], run.rng)
        if self.constraint is not None:
            self.constraint.settle(None, [token])
        stats.ttft_s = time.perf_counter() - self._started_at
        run.verify_start_s = target.decode_s
        run.draft_start_s = sum(d.decode_s for d in self.drafters)
        return EmittedToken(
            token, TokenSource.TARGET, p_token, None, *self._logprobs(logits, 0, token)
        )

    def _emit(
        self, run: _Run, emitted: list[EmittedToken]
    ) -> Generator[TokenEvent, None, str | None]:
        """Hand out one round's tokens as events (text held back while incomplete); the
        finish reason ("stop", "length") when the generation ends among them, else None."""
        finish = None
        for token in emitted:
            run.context.append(token.token)
            run.stats.generated_tokens += 1
            finish = run.out.add(token.token, token.source)
            if self._thinking is not None:
                run.stats.count_token(run.out.label)
            event = token.event(
                run.out.take_delta(), run.round_no, run.out.label, run.out.take_reasoning()
            )
            event = self._with_calls(event)
            if event.text or event.reasoning or finish is None:
                yield event
            if finish is None and run.stats.generated_tokens >= self.params.max_tokens:
                finish = "length"
            if finish:
                break
        if finish is None:
            self._steer_thinking(run)
        return finish

    def _steer_thinking(self, run: _Run) -> None:
        """Between rounds: once the thinking budget is spent, force the close as a grammar
        (its forced tokens drafted by :meth:`_forced_draft`, verified like any draft, the
        rest chosen by the target under the mask); drop it once the close is out."""
        if run.budget is not None:
            self.constraint = run.budget.steer(run.out, run.stats, self.constraint, run.context)

    def _stop_reason(self) -> str | None:
        """Why the generation must end before another round: "cancelled", "context" (no
        free cell after the last token), or None."""
        if self._cancelled:
            return "cancelled"
        return "context" if self._room() < 1 else None

    def _room(self) -> int:
        return (
            self.target.n_ctx - len(self.target.cache_tokens) - 1
        )  # free cells after the last token t

    def _round(self, run: _Run) -> list[EmittedToken]:
        """One round: draft, verify in one target decode, trim the rejected tokens from the
        cache, tell the policy, the statistics and the drafters; the tokens it emits."""
        target, context = self.target, run.context
        run.round_no += 1
        started, channel = time.perf_counter(), run.out.channel
        self.policy.enter_channel(channel)  # the round is judged by its channel's estimates
        k_cap = min(self.params.max_tokens - run.stats.generated_tokens - 1, self._room() - 1)
        if self._forcing(run):
            drafter, draft, draft_s = None, self._forced_draft(run, k_cap), 0.0
        else:
            if channel == REASONING:  # a round never runs past the thinking budget
                k_cap = max(
                    0, min(k_cap, (run.budget.left(run.stats) if run.budget else UNLIMITED) - 1)
                )
            drafter, draft, draft_s = self._propose(context, k_cap, run.draft_rng)
        verify_before = target.decode_s
        n_accepted, emitted = self._verify(
            context[-1], draft, run.rng, drafter is not None and drafter.forces
        )
        target.trim(len(context) + n_accepted)
        outcome = RoundOutcome(
            verify_s=target.decode_s - verify_before,
            verify_batch=target.last_batch_tokens,
            drafter=drafter,
            draft=draft,
            n_accepted=n_accepted,
            draft_s=draft_s,
            emitted=tuple(t.token for t in emitted),
        )
        forcing = self._forcing(run) and bool(draft.tokens)
        self.policy.observe(
            replace(outcome, draft=Draft.empty(), n_accepted=0, emitted=()) if forcing else outcome
        )
        label = "grammar" if forcing else round_label(drafter, draft)
        run.stats.record_round(len(draft.tokens), n_accepted, label, draft.forced)
        if self._thinking is not None:
            n_forced = sum((draft.forced or [])[:n_accepted])
            run.stats.record_channel_round(
                channel, len(draft.tokens), n_accepted, n_forced, time.perf_counter() - started
            )
        kept = context + draft.tokens[:n_accepted]
        for d in self.drafters:
            d.feedback(kept, len(draft.tokens), n_accepted)
        return emitted

    def _forcing(self, run: _Run) -> bool:
        return run.budget is not None and run.budget.closing is not None

    def _forced_draft(self, run: _Run, k_cap: int) -> Draft:
        """The close's next tokens (up to ``k_cap``), as a draft of forced tokens."""
        tokens = self._cut(Draft(run.budget.forced_tokens(run.context, k_cap))).tokens
        return Draft(tokens=tokens, confidence=[1.0] * len(tokens), forced=[True] * len(tokens))

    def _finish(self, run: _Run, finish: str) -> Iterator[TokenEvent]:
        """The drafters told, the timings taken, the text held back handed out, the result set."""
        context, stats = run.context, run.stats
        for d in self.drafters:
            d.feedback(context, 0, 0)
            d.end(context, len(self.prompt_tokens))
        stats.draft_s = sum(d.decode_s for d in self.drafters) - run.draft_start_s
        stats.verify_s = self.target.decode_s - run.verify_start_s
        stats.total_s = time.perf_counter() - self._started_at
        text = run.out.finish()
        reasoning = run.out.take_reasoning()
        last = TokenEvent(-1, text, TokenSource.TARGET, run.round_no, reasoning=reasoning)
        last = self._with_calls(last, end=True)
        answer = text or last.calls or last.content
        if answer or reasoning:
            yield replace(last, channel=CONTENT if answer else REASONING)
        out = run.out
        calls = self._calls.finish() if self._calls else []
        self.result = GenerationResult(
            text=out.text,
            tokens=out.tokens,
            sources=out.sources,
            finish_reason="tool_calls" if calls and finish == "stop" else finish,
            stats=stats,
            parsed=self._parsed(out.text, finish),
            tool_calls=calls or None,
            reasoning=out.reasoning,
            content=self._calls.content if self._calls else None,
        )

    def _with_calls(self, event: TokenEvent, end: bool = False) -> TokenEvent:
        """``event`` with its text read for tool calls (``end``: the answer's last text)."""
        if self._calls is None or not (event.text or end):
            return event
        content, calls = self._calls.feed(event.text)
        if end:
            rest, more = self._calls.close()
            content, calls = content + rest, calls + more
        return replace(event, content=content, calls=tuple(calls))

    def _parsed(self, text: str, finish: str) -> Any:
        if self._parse is None or finish != "stop":
            return None
        try:
            return self._parse(text)
        except ValueError:  # pydantic's ValidationError: a constraint JSON Schema cannot express
            return None

    def _prefill(self, pending: list[int]) -> np.ndarray | None:
        """Decode the prompt batch by batch, so ``cancel()`` takes effect within one batch
        (``n_batch`` tokens); the logits after the last token, or None when cancelled."""
        step = self.target.n_batch
        while len(pending) > step:
            self.target.decode(pending[:step])
            pending = pending[step:]
            if self._cancelled:
                return None
        return self.target.decode(pending, [len(pending) - 1])

    def _propose(self, context: list[int], k_cap: int, draft_rng: np.random.Generator) -> tuple:
        """Ask the free drafters for drafts, the policy for (drafter, k), then draft if
        that drafter was not asked yet.  Every draft ends at its first end-of-generation
        token (a copy from the prompt runs into the chat template's ``<|im_end|>``; the
        tokens after it can never be emitted, and verifying them costs).  Returns
        (drafter, draft, cost in seconds of drafting, catching up on skipped tokens
        excluded); drafts shorter than ``draft_min`` are dropped."""
        draft_min = max(1, self.params.draft.draft_min)
        proposals, costs = self._free_drafts(context, k_cap, draft_rng)
        others = self._batcher.outlook(self.target.seq) if self._batcher is not None else (0, 0)
        drafter, k = self.policy.plan(k_cap, proposals, len(context), others)
        if drafter is None or k < draft_min:
            return None, Draft.empty(), 0.0
        if drafter.name in proposals:
            draft, cost_s = proposals[drafter.name], costs[drafter.name]
        else:
            start, lag = time.perf_counter(), drafter.catch_up_s
            draft = self._cut(self._ask(drafter, context, k, draft_rng))
            cost_s = time.perf_counter() - start - (drafter.catch_up_s - lag)
            k = self.policy.length(drafter, draft, k)
        draft = draft.truncated(k)
        return drafter, (draft if len(draft.tokens) >= draft_min else Draft.empty()), cost_s

    def _free_drafts(
        self, context: list[int], k_cap: int, draft_rng: np.random.Generator
    ) -> tuple[dict, dict]:
        """The policy's free drafters' drafts of this round and what each cost in seconds,
        both by drafter name.  Under a grammar, a drafter that ``looks_ahead`` drafts a
        chained draft: the forced tokens, its guess after them, the forced tokens after
        that (:func:`chained`)."""
        proposals, costs, forced = {}, {}, None
        awake = self.constraint is not None and not self.constraint.dormant
        for d in self.policy.free_drafters:  # the grammar first, when there is one
            cap = min(k_cap, self.policy.cap(d))
            if cap <= 0:
                continue
            start = time.perf_counter()
            if forced is not None and awake and d.looks_ahead:  # grammar, guess, grammar
                # noqa: E731
                guess = lambda ahead, k, d=d: self._ask(d, context, k, draft_rng, ahead=ahead)
                proposals[d.name] = chained(self.constraint, forced, guess, self._cut, cap)
            else:
                proposals[d.name] = self._cut(self._ask(d, context, cap, draft_rng))
            forced = proposals[d.name] if d.forces else forced
            costs[d.name] = time.perf_counter() - start
        return proposals, costs

    def _ask(
        self, drafter: Drafter, context: list[int], k: int, draft_rng: np.random.Generator, **ahead
    ) -> Draft:
        return drafter.propose(
            context, k, self.params.sampling, self.params.draft.p_min, draft_rng, **ahead
        )

    def _verify(self, last: int, draft: Draft, rng: np.random.Generator, forced: bool = False):
        """One target decode of [last, d_1..d_k]; returns (n_accepted, the emitted
        :class:`EmittedToken` list); kept draft tokens are FORCED when a grammar drafted
        them (``forced``: all; ``draft.forced``: per token), else ACCEPTED."""
        k = len(draft.tokens)
        logits = self.target.decode([last] + draft.tokens, range(k + 1), copy=False)
        rows = logits if self.constraint is None else self.constraint.rows(logits, draft.tokens)
        sp = self.params.sampling
        if sp.greedy:
            n, nxt = accept_greedy(draft.tokens, RowArgmax(rows))
            p = q = None
        else:
            p = CandidateRows(rows, sp)
            q = draft.probs
            n, nxt = accept_sampled(draft.tokens, p, q, rng)
        kept = [
            TokenSource.FORCED if f else TokenSource.ACCEPTED for f in draft.forced or [forced] * k
        ]
        emitted = [
            EmittedToken(d, kept[i], _prob(p, i, d), _prob(q, i, d), *self._logprobs(logits, i, d))
            for i, d in enumerate(draft.tokens[:n])
        ]
        source = (
            TokenSource.TARGET
            if k == 0
            else (TokenSource.BONUS if n == k else TokenSource.CORRECTION)
        )
        p_draft = _prob(q, n, nxt) if n < k else None
        emitted.append(
            EmittedToken(nxt, source, _prob(p, n, nxt), p_draft, *self._logprobs(logits, n, nxt))
        )
        if self.constraint is not None:
            self.constraint.settle(rows, draft.tokens[:n] + [nxt])
        return n, emitted

    def _cut(self, draft: Draft) -> Draft:
        """``draft`` up to its first end-of-generation token, and under a grammar up to its
        first token the grammar forbids."""
        draft = draft.through_first(self.target.is_eog)
        if self.constraint is not None and draft.tokens:
            draft = draft.truncated(self.constraint.allowed(draft.tokens))
        return draft

    def _logprobs(self, logits: np.ndarray, row: int, token: int) -> tuple:
        """(logprob of ``token``, its top alternatives) from the target's own row, or
        (None, None) when not asked for."""
        if self.params.logprobs is None:
            return None, None
        return token_logprobs(logits[row], token, self.params.logprobs)

    def _choose(self, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, float | None]:
        sp = self.params.sampling
        if self.constraint is not None:
            logits = self.constraint.masked(logits)
        if sp.greedy:
            return int(np.argmax(logits)), None
        probs = row_candidates(logits, sp)
        token = probs.sample(rng)
        return token, probs.prob(token)


_ROUND_END = object()  # marks the end of one round's events inside Generation._run


@dataclass
class _Run:
    """What the steps of one generation share: the context so far (prompt and emitted
    tokens), its statistics and text, the random streams of acceptance and drafting, the
    round number and the decode clocks as prompt eval ended."""

    context: list[int]
    stats: GenerationStats
    out: TextAssembler
    rng: np.random.Generator
    draft_rng: np.random.Generator
    round_no: int = 0
    verify_start_s: float = 0.0
    draft_start_s: float = 0.0
    budget: ThinkingBudget | None = (
        None  # the thinking budget (None: no reasoning format or no budget)
    )


def _prob(probs: Sequence[Candidates] | None, row: int, token: int) -> float | None:
    return None if probs is None else probs[row].prob(token)
