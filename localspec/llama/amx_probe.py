"""Does llama.cpp's AMX path run on this machine?  Ask a child process, once.

On some Xeons with AMX (Sapphire Rapids class, seen in VMs) a llama-cpp-python built
natively enables llama.cpp's AMX kernels, and the first decode of a Q4_K model dies
with SIGILL (``tilezero`` in ``ggml_backend_amx_mul_mat``; upstream, llama.cpp PR 26954).
So before the first model loads on a build with AMX, a child process quantizes a tiny
random model to Q4_K_M with llama.cpp itself, loads it with the default buffer types
(AMX included), prefills 64 tokens and decodes 4.  A child killed by a signal means
the engine loads weights without the AMX buffer type (:func:`localspec.llama.backend.apply_no_amx`);
a child that finishes means AMX stays in use.  The answer is cached per machine and
build in the user cache dir (``amx-probe.json``).

``LOCALSPEC_NO_AMX=1`` forces the fallback without probing (for users, and for tests
on machines without AMX).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import platformdirs

from localspec import machine
from localspec.llama import backend

ENV_NO_AMX = "LOCALSPEC_NO_AMX"
PROBE_TIMEOUT_S = 180.0
OK_LINE = "localspec-amx-probe: ok"
# How llama.cpp's AMX kernels have been seen to kill the child: SIGILL (``tilezero`` on a CPU
# whose hypervisor hides the tile state), SIGSEGV / SIGBUS (tile configuration faults), SIGFPE
# and SIGABRT (a GGML_ASSERT).  Another signal (SIGKILL from the OOM killer, SIGTERM) says
# nothing about AMX; it still avoids AMX to be safe, but is reported as a failed probe.
CRASH_SIGNALS = frozenset({"SIGILL", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGABRT"})


@dataclass(frozen=True)
class ProbeResult:
    """How the child ended: ``ok`` (it decoded), or ``crash_signal`` ("SIGILL", ...)
    when a signal killed it, else ``detail`` says what went wrong.  ``seconds``: wall time."""

    ok: bool
    crash_signal: str | None
    detail: str
    seconds: float


@dataclass(frozen=True)
class AmxDecision:
    """``avoid_amx``: load weights without the AMX buffer type.  ``status`` is one line
    for people; ``source`` is "build" (no AMX compiled in), "env" (LOCALSPEC_NO_AMX),
    "probe" (run now) or "cache" (an earlier probe on this machine and build)."""

    avoid_amx: bool
    status: str
    source: str


def forced_off() -> bool:
    return os.environ.get(ENV_NO_AMX, "").strip().lower() in ("1", "true", "yes", "on")


def cache_file() -> Path:
    return Path(platformdirs.user_cache_dir("localspec")) / "amx-probe.json"


def machine_key() -> str:
    """Identifies this CPU, kernel and llama.cpp build: a probe answer holds for it only."""
    parts = [
        machine.cpu_model(),
        " ".join(sorted(machine.cpu_flags())),
        platform.release(),
        backend.llama_cpp_python_version(),
        backend.system_info(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def child_command() -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from localspec.llama.amx_child import probe_child; sys.exit(probe_child())",
    ]


def run_probe(command: list[str] | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run the probe child (default :func:`child_command`) and read how it ended.  A
    SIGILL (or any other fatal signal) in the child is a result, never an exception."""
    started = time.perf_counter()
    env = {**os.environ, "PYTHONFAULTHANDLER": ""}  # a crash report would only be noise here
    try:
        done = subprocess.run(
            command or child_command(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return ProbeResult(
            False,
            None,
            f"the probe did not finish in {timeout_s:.0f} s",
            time.perf_counter() - started,
        )
    except OSError as exc:
        return ProbeResult(
            False, None, f"the probe could not start: {exc}", time.perf_counter() - started
        )
    seconds = time.perf_counter() - started
    if done.returncode < 0:
        name = (
            signal.Signals(-done.returncode).name
            if -done.returncode in signal.Signals._value2member_map_
            else f"signal {-done.returncode}"
        )
        return ProbeResult(False, name, f"killed by {name}", seconds)
    if done.returncode == 0 and OK_LINE in done.stdout:
        return ProbeResult(
            True, None, "decoded a Q4_K_M model with llama.cpp's default buffer types", seconds
        )
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return ProbeResult(False, None, f"exit status {done.returncode}: {tail}", seconds)


def decide(
    amx_built: bool, cache: Path, probe: Callable[[], ProbeResult] = run_probe
) -> AmxDecision:
    """The decision without process-wide memory (see :func:`amx_decision`)."""
    if forced_off():
        return AmxDecision(True, f"off: forced by {ENV_NO_AMX}=1", "env")
    if not amx_built:
        return AmxDecision(False, "not in this build (nothing to avoid)", "build")
    key = machine_key()
    cached = _read_cache(cache, key)
    if cached is not None:
        return AmxDecision(not cached.ok, _status(cached), "cache")
    result = probe()
    _write_cache(cache, key, result)
    return AmxDecision(not result.ok, _status(result), "probe")


_decision: AmxDecision | None = None


def amx_decision() -> AmxDecision:
    """Whether this process loads weights without AMX; probes at most once per machine
    and build (the answer is cached on disk) and once per process."""
    global _decision
    if _decision is None or (_decision.source == "env") != forced_off():
        _decision = decide(backend.amx_in_build(), cache_file())
    return _decision


def _status(result: ProbeResult) -> str:
    if result.ok:
        return "in use (the probe decoded with it)"
    if result.crash_signal in CRASH_SIGNALS:
        return (
            "off: llama.cpp's AMX kernels crash on this machine (probe child killed by "
            f"{result.crash_signal})"
        )
    return f"off: the probe failed ({result.detail}); AMX avoided to be safe"


def _read_cache(cache: Path, key: str) -> ProbeResult | None:
    try:
        data = json.loads(cache.read_text())
        return ProbeResult(**data[key]) if key in data else None
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _write_cache(cache: Path, key: str, result: ProbeResult) -> None:
    try:
        data = json.loads(cache.read_text()) if cache.is_file() else {}
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = asdict(result)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(cache)
    except OSError:
        pass  # an unwritable cache only means probing again next time
