"""The model workers: ``parallel`` threads run queued generation jobs first in, first out."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from localspec.decoding.stats import GenerationResult, TokenEvent
from localspec.errors import LocalspecError
from localspec.server.errors import APIError

log = logging.getLogger("localspec.server")

DEFAULT_QUEUE = 16


@dataclass(frozen=True)
class Started:
    """The prompt is rendered and the generation has started."""


@dataclass(frozen=True)
class Emitted:
    """One token of the answer, as the generation emitted it."""

    event: TokenEvent


@dataclass(frozen=True)
class Done:
    """The generation ended; ``result`` is its whole answer and statistics."""

    result: GenerationResult


@dataclass(frozen=True)
class Failed:
    """The generation could not start or stopped on ``error`` (a LocalspecError is the
    client's to fix; any other exception is a bug)."""

    error: Exception


@dataclass(frozen=True)
class Skipped:
    """The job never ran: its client left while it waited, or the server is shutting down."""


JobItem = Started | Emitted | Done | Failed | Skipped
FINAL = (Done, Failed, Skipped)  # a job posts nothing after one of these


@dataclass
class Job:
    """One request for the model thread.  ``start(model)`` returns a streaming
    :class:`~localspec.decoding.loop.Generation`; :data:`JobItem` records come back on
    ``events``: :class:`Started`, one :class:`Emitted` per token, then :class:`Done`,
    :class:`Failed` or :class:`Skipped`.  ``generation``: the running one, once started
    (:meth:`cancel` reaches it at once, so a prompt being read stops within one batch)."""

    start: Any
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    generation: Any = None
    finished: bool = False  # its final item was posted
    started_at: float = field(default_factory=time.perf_counter)

    def post(self, item: JobItem) -> None:
        self.finished = self.finished or isinstance(item, FINAL)
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shutting down)
            pass

    def cancel(self) -> None:
        self.cancelled.set()
        generation = self.generation
        if generation is not None and not self.finished:  # a finished one has nothing left to stop
            generation.cancel()

    def prompt_progress(self) -> dict | None:
        """llama-server's ``prompt_progress``: ``{"total", "processed", "time_ms"}``
        (tokens of the prompt, and of its prefix the KV cache holds so far), or None before
        the prompt is rendered.  Read from another thread while the prompt is decoded."""
        generation = self.generation
        if generation is None:
            return None
        prompt = generation.prompt_tokens
        try:
            cached = list(generation.target.cache_tokens)
        except Exception:  # a sequence without a readable cache
            cached = []
        done = next(
            (i for i, (a, b) in enumerate(zip(prompt, cached)) if a != b),
            min(len(prompt), len(cached)),
        )
        time_ms = round((time.perf_counter() - self.started_at) * 1000)
        return {"total": len(prompt), "processed": done, "time_ms": time_ms}


class ModelWorker:
    """Threads that run queued :class:`Job`s on the model first in, first out: as many
    as the model has slots (``model.parallel``, llama-server's ``-np``), so that many
    requests generate at once and their target decodes are batched.

    ``submit`` raises :class:`APIError` (503, with Retry-After) when every thread has a
    job and ``queue_size`` more wait (counted at submission, so a burst that arrives before
    the threads take their jobs is not refused early).  A job cancelled while queued is
    skipped; one cancelled while running stops after its current speculative round.

    ``threads``: how many jobs run at once (default ``model.parallel``); the desktop chat
    serves its pair with one fewer, keeping a slot for its own answers.
    """

    def __init__(
        self, model, queue_size: int = DEFAULT_QUEUE, metrics=None, threads: int | None = None
    ):
        self.model = model
        self.queue_size = queue_size
        self.metrics = (
            metrics  # a localspec.server.metrics.Metrics told of every finished generation
        )
        self._jobs: queue.Queue = queue.Queue()
        self._admitted = 0  # jobs submitted and not yet finished, skipped or withdrawn
        self._admit_lock = threading.Lock()
        self._current: dict[int, Job] = {}  # id(job) -> running job (a Job is not hashable)
        self.last_result: GenerationResult | None = None  # of the latest finished generation
        self.skipped = 0  # queued jobs dropped because their client had left
        self._closed = False
        self._threads = []
        n_threads = threads or model.parallel
        self._capacity = n_threads + queue_size
        for i in range(n_threads):
            thread = threading.Thread(target=self._run, name=f"localspec-model-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    @property
    def busy(self) -> bool:
        return bool(self._current)

    @property
    def running(self) -> int:
        return len(self._current)

    @property
    def threads_alive(self) -> int:
        """How many of the worker's threads have not ended (0 once :meth:`close` returned)."""
        return sum(t.is_alive() for t in self._threads)

    def submit(self, job: Job) -> None:
        if self._closed:
            raise APIError(
                503,
                "the server is shutting down",
                type="server_error",
                code="shutting_down",
                retry=True,
            )
        with self._admit_lock:
            if self._admitted >= self._capacity:
                raise APIError(
                    503,
                    f"the server is busy: {self.queue_size} requests are already waiting",
                    type="server_error",
                    code="queue_full",
                    retry=True,
                    headers={"Retry-After": "1"},
                )
            self._admitted += 1
        self._jobs.put_nowait(job)

    def _release(self) -> None:
        with self._admit_lock:
            self._admitted -= 1

    def withdraw(self, job: Job) -> bool:
        """Take a job whose client left out of the queue at once (its place is free); False
        when it is running or done already."""
        with self._jobs.mutex:
            try:
                self._jobs.queue.remove(job)
            except ValueError:
                return False
        self._release()
        self.skipped += 1
        return True

    def cancel_all(self) -> None:
        """Cancel the running jobs (each ends after its current round) and every waiting one."""
        for job in list(self._jobs.queue):
            if isinstance(job, Job):
                job.cancel()
        for job in list(self._current.values()):
            job.cancel()

    def close(self) -> None:
        """Refuse new jobs, cancel the running one, drop the waiting ones, and stop the
        thread; returns once the model is no longer in use (a running job stops within one
        round, or one prompt batch), so the caller may free it."""
        self._closed = True
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, Job):
                self._release()
                job.cancel()
                job.post(Skipped())
        for job in list(self._current.values()):
            job.cancel()
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._run_job(job)

    def _run_job(self, job: Job) -> None:
        try:
            if job.cancelled.is_set():
                self.skipped += 1
                job.post(Skipped())
                return
            self._current[id(job)] = job
            try:
                self._generate(job)
            finally:
                self._current.pop(id(job), None)
        finally:
            self._release()

    def _generate(self, job: Job) -> None:
        try:
            generation = job.generation = job.start(self.model)
            if job.cancelled.is_set():
                generation.cancel()
            job.post(Started())
            for event in generation:
                if job.cancelled.is_set():
                    generation.cancel()
                job.post(Emitted(event))
            self.last_result = generation.result
            if self.metrics is not None:
                self.metrics.observe(generation.result)
            job.post(Done(generation.result))
        except LocalspecError as exc:
            job.post(Failed(exc))
        except Exception as exc:  # a bug: answer 500, keep serving
            log.exception("generation failed")
            job.post(Failed(exc))
