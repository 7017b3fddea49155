"""Emitting: a round's tokens handed out as events (text held back while incomplete, tool
calls read from it), and the end: the drafters told, the timings taken, the result set
(:class:`Emitting`, a mixin of :class:`~localspec.decoding.loop.Generation`)."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import replace
from typing import Any

from localspec.decoding.loop.run import _Run
from localspec.decoding.reasoning import CONTENT, REASONING
from localspec.decoding.stats import GenerationResult, TokenEvent, TokenSource


class Emitting:
    """Hand out tokens as events; finish the generation."""

    def _emit(
        self, run: _Run, emitted: list[TokenEvent]
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
            event = replace(
                token,
                text=run.out.take_delta(),
                round=run.round_no,
                channel=run.out.label,
                reasoning=run.out.take_reasoning(),
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

    def _finish(self, run: _Run, finish: str) -> Iterator[TokenEvent]:
        """The drafters told, the timings taken, the text held back handed out, the result set."""
        context, stats = run.context, run.stats
        for d in self.drafters:
            d.feedback(context, 0, 0)
            d.end(context, len(self.prompt_tokens))
        stats.draft_s = sum(d.decode_s for d in self.drafters) - run.draft_start_s
        stats.verify_s = self.target.decode_s - run.verify_start_s
        account = stats.against_plain
        account.catch_up_s = sum(d.catch_up_s for d in self.drafters) - run.catch_up_start_s
        account.batch_wait_s = self.target.wait_s - run.wait_start_s
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
