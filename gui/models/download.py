"""Fetching models that are not on disk yet, in a thread of its own, with progress
(bytes and rate) and cancel."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QObject, QThread, Signal, Slot

from localspec.errors import DownloadCancelled, LocalspecError
from localspec.models import discovery


class DownloadJob(QObject):
    """Runs :func:`ensure_local` for some models, one after the other."""

    progress = Signal(str, int, int, float)  # model name, bytes done, bytes total, rate in bytes/s
    done = Signal(object)  # list[Path], in the order asked
    failed = Signal(str)  # message (DownloadCancelled says "cancelled")
    cancelled = Signal()

    def __init__(self, refs: list):
        super().__init__()
        self.refs = list(refs)
        self.cancel_event = threading.Event()

    @Slot()
    def run(self) -> None:
        paths = []
        try:
            for ref in self.refs:
                started = time.monotonic()

                def report(done: int, total: int, name=ref.name, started=started) -> None:
                    elapsed = time.monotonic() - started
                    self.progress.emit(
                        name, int(done), int(total), done / elapsed if elapsed > 0 else 0.0
                    )

                paths.append(discovery.ensure_local(ref, report, self.cancel_event))
        except DownloadCancelled:
            self.cancelled.emit()
        except (LocalspecError, OSError) as exc:
            self.failed.emit(str(exc))
        else:
            self.done.emit(paths)
        finally:
            QThread.currentThread().quit()


def start_download(refs: list, parent: QObject) -> tuple[DownloadJob, QThread]:
    """A :class:`DownloadJob` moved to a new, not yet started thread: connect to the
    job's signals, then ``thread.start()``.  ``job.cancel_event.set()`` cancels."""
    thread = QThread(parent)
    job = DownloadJob(refs)
    job.moveToThread(thread)
    thread.started.connect(job.run)
    thread.finished.connect(thread.deleteLater)
    return job, thread


def human_bytes(n: float) -> str:
    """``1536`` -> "1.5 KiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
