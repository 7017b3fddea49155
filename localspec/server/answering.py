"""Answering a generation request, the half of :class:`~localspec.server.state.ServerState`
that every protocol's ``state.run`` reaches (:class:`Answering`): queueing it on the model's
worker, then its answer in the protocol's shape, whole or as a stream of server-sent events
with keep-alives while the prompt is read; a client that leaves cancels its job, and a
cancelled request's log line waits for the generation's counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from localspec.decoding.stats import TokenEvent
from localspec.errors import LocalspecError
from localspec.server.access_log import RequestRecord, log_request
from localspec.server.errors import APIError
from localspec.server.request import GenerationRequest, refusal, start_generation
from localspec.server.shape import Shape
from localspec.server.worker import FINAL, Done, Emitted, Failed, Job, JobItem, Skipped

_POLL_S = 0.1  # how often a waiting handler checks that its client is still there
KEEPALIVE_S = 10.0  # a stream sends its protocol's keep-alive after this long with nothing sent
CANCEL_LOG_WAIT_S = (
    30.0  # a cancelled request's log line waits this long for its generation's counts
)
_WAITING = object()  # _next's answer when nothing came within its wait


class Answering:
    """:class:`~localspec.server.state.ServerState`'s answering: :meth:`run` and the stream it
    sends.  The class using it sets ``worker`` (its
    :class:`~localspec.server.worker.ModelWorker`) and ``_lines_waiting`` (a set)."""

    async def run(
        self,
        http: Request,
        request: GenerationRequest,
        shape: Shape,
        on_start: Callable | None = None,
    ) -> Response:
        """Queue ``request`` and answer in ``shape``'s protocol: a
        stream of its events when ``request.stream``, else its whole response.
        ``on_start(generation)`` is called on the model's thread once the prompt
        is rendered.  A stream starts once the prompt is rendered, or after
        :data:`KEEPALIVE_S` in the queue; from then on it carries a keep-alive whenever
        nothing else was sent for KEEPALIVE_S (the prompt is being read)."""

        def start(model):
            generation = start_generation(model, request)
            if on_start is not None:
                on_start(generation)
            return generation

        record = _record(http)
        record.protocol = request.protocol
        job = Job(start, asyncio.get_running_loop())
        self.worker.submit(job)
        first = await _next(job, http, KEEPALIVE_S if request.stream else None)
        if first is None:  # the client left while the request waited or started
            record.cancelled = True
            if not self.worker.withdraw(job):
                self._log_once_stopped(job, record)
            return Response(status_code=499)
        if first is not _WAITING:
            _raise_for_start(first, request)
        if request.stream:
            record.log_later = True
            return StreamingResponse(
                self._sse(http, job, shape, request, record),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        response = await _whole(http, job, shape, record)
        if record.cancelled:
            self._log_once_stopped(job, record)
        return response

    def _log_once_stopped(self, job: Job, record: RequestRecord) -> None:
        """A cancelled request's log line, written once its generation has stopped (within one
        round, at most ``CANCEL_LOG_WAIT_S``), so that it says how long the prompt was and how
        much of it was cached; at once when the job had already ended."""
        record.log_later = True
        if job.finished:
            log_request(record)
            return
        task = asyncio.get_running_loop().create_task(_log_when_done(job, record))
        self._lines_waiting.add(task)
        task.add_done_callback(self._lines_waiting.discard)

    async def _sse(
        self, http: Request, job: Job, shape, request: GenerationRequest, record
    ) -> AsyncIterator[str]:
        """The stream's texts; a keep-alive whenever nothing went out for KEEPALIVE_S: while
        the prompt is read, or while the answer's text is held back (it may be a tool call)."""
        quiet = _Quiet()
        try:
            for text in shape.stream_start():
                yield text
            async for batch in _batches(job, http, quiet.left_s):
                if batch is None:
                    texts = shape.keep_alive(job.prompt_progress()) if not quiet.answering else []
                else:
                    texts, quiet.answering = _stream_texts(shape, batch, request, record), True
                if not texts and quiet.due():
                    texts = shape.idle_keep_alive()
                for text in texts:
                    yield text
                quiet.sent(texts)
        finally:
            job.cancel()  # the client left mid-stream (or the stream ended): stop within one round
            record.cancelled = record.cancelled or not job.finished
            self._log_once_stopped(job, record)


def _record(http: Request) -> RequestRecord:
    record = getattr(http.state, "localspec_record", None)
    if record is None:  # a handler called without ServerState.handle (tests)
        record = http.state.localspec_record = RequestRecord(http.method, http.url.path)
    return record


class _Quiet:
    """How long a stream has sent nothing; ``answering`` once the answer's events began."""

    def __init__(self):
        self.at, self.answering = time.monotonic(), False

    def left_s(self) -> float:
        return max(_POLL_S, KEEPALIVE_S - (time.monotonic() - self.at))

    def due(self) -> bool:
        return time.monotonic() - self.at >= KEEPALIVE_S

    def sent(self, texts: list[str]) -> None:
        if texts:
            self.at = time.monotonic()


async def _batches(job: Job, http: Request, wait_s: Callable[[], float]) -> AsyncIterator[list]:
    """The job's items, one batch per round or so, up to its end; None after ``wait_s()``
    of nothing; stops when the client is gone."""
    while True:
        item = await _next(job, http, wait_s())
        if item is _WAITING:
            yield None
            continue
        if item is None or await http.is_disconnected():
            return
        batch = [item]
        while not job.events.empty() and isinstance(batch[-1], Emitted):
            batch.append(job.events.get_nowait())
        yield batch
        if isinstance(batch[-1], FINAL):
            return


def _stream_texts(
    shape: Shape, batch: list[JobItem], request: GenerationRequest, record
) -> list[str]:
    """A batch of job items as the stream's texts: events, then the end (or an error event)."""
    events = [item.event for item in batch if isinstance(item, Emitted)]
    out = shape.stream_events(events) if events else []
    end = batch[-1]
    if isinstance(end, Done):
        record.observe(end.result)
        return out + shape.stream_end(end.result, request.include_usage)
    error = _start_error(end, request)
    if error is not None:
        record.error = error.message
        return out + shape.stream_error(error.message)
    return out


def _internal() -> APIError:
    return APIError(500, "internal server error", type="server_error", retry=True)


def _start_error(item: JobItem, request: GenerationRequest) -> APIError | None:
    """The error a job's item means for the request (None: not an error)."""
    if isinstance(item, Failed):
        return (
            refusal(item.error, request.paths)
            if isinstance(item.error, LocalspecError)
            else _internal()
        )
    if isinstance(item, Skipped):
        return APIError(503, "the server is shutting down", type="server_error", retry=True)
    return None


def _raise_for_start(first: JobItem, request: GenerationRequest) -> None:
    """The job's first item: an error before any token is the request's answer."""
    error = _start_error(first, request)
    if error is not None:
        raise error


async def _whole(http: Request, job: Job, shape: Shape, record) -> Response:
    """The whole answer; a client that leaves first cancels the job (499)."""
    events: list[TokenEvent] = []
    while True:
        item = await _next(job, http)
        if item is None:
            record.cancelled = True
            return Response(status_code=499)
        if isinstance(item, Emitted):
            events.append(item.event)
        elif isinstance(item, Done):
            record.observe(item.result)
            return JSONResponse(shape.whole(events, item.result))
        elif isinstance(item, Failed):
            raise _internal()


async def _log_when_done(job: Job, record: RequestRecord) -> None:
    async def take_counts() -> None:
        while True:
            item = await job.events.get()
            if isinstance(item, Done):
                record.observe(item.result)
            if isinstance(item, FINAL):
                return

    try:
        await asyncio.wait_for(take_counts(), CANCEL_LOG_WAIT_S)
    except asyncio.TimeoutError:
        pass
    log_request(record)


async def _next(job: Job, request: Request, wait_s: float | None = None):
    """The job's next item; None (and the job cancelled) once the client is gone;
    ``_WAITING`` when ``wait_s`` passed with no item."""
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(job.events.get(), _POLL_S)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                return None
            waited += _POLL_S
            if wait_s is not None and waited >= wait_s:
                return _WAITING
