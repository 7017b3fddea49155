"""The one thread that every llama.cpp call of a loaded model pair runs on.

Why: llama.cpp's CPU backend runs its matrix work on an OpenMP thread team, and OpenMP keeps
one team per calling thread.  A pair loaded in one thread (weights are repacked on the load
thread's team) and decoded in another leaves two teams on the cores; on a 2-core AMD EPYC a
plain decode then ran at 20.4-21.0 t/s instead of 29.5-30.9 (measured before this module
existed; ``benchmarks/thread_bench.py`` measures the callers' threads now).  So a pair gets one
:class:`LlamaThread` and every caller, whichever thread it is on (the CLI's main thread, the
server's model worker, the desktop chat's QThread, a user's thread pool), hands its llama.cpp work
to it.

Callers already on the owning thread run directly; others wait for the result.  A hand-off
costs about 60 microseconds (median of 5 x 2,000 empty calls on a 2-core AMD EPYC, under
load), paid once per speculative round, not per llama.cpp call, because
:class:`~localspec.decoding.loop.Generation` runs a whole round per hand-off.
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from localspec.errors import EngineError

T = TypeVar("T")
_names = itertools.count(1)


class _Call:
    __slots__ = ("fn", "args", "kwargs", "done", "result", "error")

    def __init__(self, fn: Callable, args: tuple, kwargs: dict):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done = threading.Lock()
        self.done.acquire()
        self.result: Any = None
        self.error: BaseException | None = None


class LlamaThread:
    """A daemon thread that runs submitted calls one at a time, first in, first out.

    ``run(fn, *args)`` returns ``fn(*args)`` computed on this thread (directly when the
    caller is this thread) and re-raises its exception in the caller.  ``stop()`` ends the
    thread after the calls already queued; later ``run`` calls raise
    :class:`~localspec.errors.EngineError`.
    """

    def __init__(self, name: str | None = None):
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._serve, name=name or f"localspec-llama-{next(_names)}", daemon=True
        )
        self._thread.start()
        self.ident: int = self._thread.ident  # type: ignore[assignment]

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopped

    def owns_current_thread(self) -> bool:
        return threading.get_ident() == self.ident

    def run(self, fn: Callable[..., T], *args, **kwargs) -> T:
        if threading.get_ident() == self.ident:
            return fn(*args, **kwargs)
        if self._stopped:
            raise EngineError("the model is closed (its llama.cpp thread has stopped)")
        call = _Call(fn, args, kwargs)
        self._calls.put(call)
        call.done.acquire()  # interruptible: Ctrl-C reaches the waiting main thread
        if call.error is not None:
            raise call.error.with_traceback(call.error.__traceback__)
        return call.result

    def post(self, fn: Callable, *args) -> None:
        """Queue ``fn(*args)`` without waiting (its errors are dropped); for finalizers,
        which must not block."""
        if threading.get_ident() == self.ident:
            fn(*args)
        elif not self._stopped:
            self._calls.put(_Call(fn, args, {}))

    def stop(self) -> None:
        """End the thread once the queued calls are done; waits unless called on the thread."""
        if self._stopped:
            return
        self._stopped = True
        self._calls.put(None)
        if threading.get_ident() != self.ident:
            self._thread.join()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            try:
                call.result = call.fn(*call.args, **call.kwargs)
            except BaseException as exc:  # handed to the caller, never lost in this thread
                call.error = exc
            finally:
                call.done.release()
            call = None  # drop references (a model's arrays) before waiting for the next one


def owned(method: Callable[..., T]) -> Callable[..., T]:
    """Run an instance method on its ``self.owner`` (:class:`LlamaThread`)."""

    @functools.wraps(method)
    def on_owner(self, *args, **kwargs):
        owner = self.owner
        if threading.get_ident() == owner.ident:
            return method(self, *args, **kwargs)
        return owner.run(method, self, *args, **kwargs)

    return on_owner
