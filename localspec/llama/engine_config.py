"""How to load one model (:class:`EngineConfig`) and llama.cpp's process-wide settings
(thread count, its log, the load-progress callback)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localspec import machine
from localspec.errors import InvalidOptionError, require_int

CPU_BUFFERS = ("auto", "default", "no-amx", "no-extra")


@dataclass(frozen=True)
class EngineConfig:
    """How to load one model.

    n_ctx: context window in tokens.  n_gpu_layers: layers offloaded to Metal/CUDA
    (-1 = all; ignored by CPU-only builds).  n_threads: CPU threads (None = all CPUs).
    n_batch: largest batch handed to one ``llama_decode`` call, in tokens.
    flash_attn: None lets llama.cpp choose.  cpu_buffers: where CPU weights go: "auto"
    (llama.cpp's choice, except without AMX where :func:`localspec.llama.amx_probe.amx_decision`
    says AMX crashes here), "default" (llama.cpp's choice, always), "no-amx" (the fallback:
    no AMX buffer, CPU_REPACK kept), "no-extra" (no extra buffer types at all, as
    llama.cpp's ``--no-repack``).  rs_snapshots: recurrent-state snapshots per sequence for a
    model that keeps a recurrent state (None: :data:`~localspec.llama.engine.rollback.SNAPSHOTS`;
    0: none, every rollback from a saved state; :mod:`~localspec.llama.engine.rollback`).
    load_mtp: load the model's MTP (NextN) blocks, if it has any, and keep its MTP context in
    step (``Engine.mtp``, :class:`~localspec.llama.mtp.MtpHead`; one sequence only).
    assistant: a Gemma 4 assistant GGUF to draft for this model in its place
    (``Engine.mtp``, :class:`~localspec.llama.assistant.AssistantHead`; one sequence only).
    """

    n_ctx: int = 4096
    n_gpu_layers: int = -1
    n_threads: int | None = None
    n_batch: int = 512
    flash_attn: bool | None = None
    cpu_buffers: str = "auto"
    n_seq_max: int = 1
    rs_snapshots: int | None = None
    load_mtp: bool = False
    assistant: Path | None = None

    def __post_init__(self) -> None:
        require_int("parallel", self.n_seq_max, 1, 64)
        if self.rs_snapshots is not None:
            require_int("rs_snapshots", self.rs_snapshots, 0, 64)
        if self.cpu_buffers not in CPU_BUFFERS:
            raise InvalidOptionError(
                f"cpu_buffers must be one of {', '.join(CPU_BUFFERS)}, got {self.cpu_buffers!r}"
            )


def default_threads() -> int:
    return machine.usable_cpus()


def set_llama_log(verbose: bool) -> None:
    """Show llama.cpp's own log lines (verbose) or nothing at all."""
    logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.CRITICAL)


def _progress_reporter(load_progress: Callable[[float], None]) -> Callable:
    """Wrap a callback for llama.cpp: it must return True (go on) and never raise
    through ctypes (an exception there would be printed and read as "abort")."""

    def report(fraction: float, _user_data) -> bool:
        try:
            load_progress(min(1.0, max(0.0, float(fraction))))
        except Exception:  # a broken progress display must not stop the load
            pass
        return True

    return report
