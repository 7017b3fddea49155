"""The model worker's queue: its limit, a burst, a closed worker (the synthetic pair)."""

import asyncio
import threading
import time

import openai
import pytest
from support.served import RunningServer

from localspec.api import SpeculativeModel
from localspec.server.errors import APIError
from localspec.server.worker import Job, ModelWorker


class Held:
    """A generation that holds its model thread until ``gate`` is set, then yields nothing."""

    result = None

    def __init__(self, gate: threading.Event):
        self.gate = gate

    def __iter__(self):
        self.gate.wait(30)
        return iter(())

    def cancel(self) -> None:  # as a generation's: the worker's close cancels what runs
        self.gate.set()


def test_a_full_queue_answers_503_with_retry_after(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=2048) as model:
        running = RunningServer(model, queue_size=1)
        try:
            gate = threading.Event()
            loop = asyncio.new_event_loop()

            running.worker.submit(Job(lambda m: Held(gate), loop))  # holds the model thread
            while not running.worker.busy:
                time.sleep(0.01)
            running.worker.submit(Job(lambda m: Held(gate), loop))  # fills the one waiting slot
            with pytest.raises(openai.InternalServerError) as err:
                running.client(key="anything").chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=4
                )
            assert err.value.status_code == 503 and err.value.response.headers["retry-after"] == "1"
            gate.set()
            running.wait_idle()
            ok = running.client(key="anything").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}], max_tokens=4
            )
            assert ok.usage.completion_tokens >= 1
        finally:
            running.stop()
            loop.close()


def test_a_closed_worker_refuses_new_jobs(real_model):
    """After close() a job is a 503, and the worker's threads have ended."""
    worker = ModelWorker(real_model, queue_size=2, threads=2)
    loop = asyncio.new_event_loop()
    try:
        worker.close()
        assert worker.threads_alive == 0
        with pytest.raises(APIError) as err:
            worker.submit(Job(start=lambda m: None, loop=loop))
        assert err.value.status == 503
    finally:
        loop.close()


def test_a_burst_fills_every_thread_before_the_queue_counts():
    """Jobs submitted faster than the threads take them: the limit is threads + queue_size
    jobs at submission, not queue_size jobs not yet taken (a burst was refused early)."""
    gate = threading.Event()
    loop = asyncio.new_event_loop()

    worker = ModelWorker(object(), queue_size=1, threads=2)
    try:
        for _ in range(3):  # two run, one waits
            worker.submit(Job(lambda m: Held(gate), loop))
        with pytest.raises(APIError) as err:
            worker.submit(Job(lambda m: Held(gate), loop))
        assert err.value.status == 503 and err.value.code == "queue_full"
        gate.set()
        deadline = time.monotonic() + 30
        while (worker.busy or worker.waiting) and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(3):  # every place is free again
            worker.submit(Job(lambda m: Held(gate), loop))
    finally:
        gate.set()
        worker.close()
        loop.close()
