"""Facts about the machine itself (no llama.cpp): CPU model and flags, memory, GPU hardware.

Read from ``/proc/cpuinfo`` and ``/proc/meminfo`` on Linux and ``sysctl`` on macOS;
each reader returns an empty value instead of failing where the source is missing.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


def _cpuinfo_field(name: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return ""


def _sysctl(name: str) -> str:
    if sys.platform != "darwin":
        return ""
    try:
        return subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """E.g. "Intel(R) Xeon(R) Platinum 8481C" (Linux), "Apple M2" (macOS)."""
    return (
        _cpuinfo_field("model name")
        or _sysctl("machdep.cpu.brand_string")
        or platform.processor()
        or platform.machine()
    )


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The kernel's CPU flags (``amx_tile``, ``avx512f``, ...); empty where unknown."""
    return frozenset((_cpuinfo_field("flags") or _cpuinfo_field("Features")).split())


def cpu_has_amx() -> bool:
    return {"amx_tile", "amx_int8"} <= cpu_flags()


def logical_cpus() -> int:
    return os.cpu_count() or 1


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return logical_cpus()


def memory_bytes() -> int:
    """Physical memory in bytes (0 when unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    value = _sysctl("hw.memsize")
    return int(value) if value.isdigit() else 0


@dataclass(frozen=True)
class GpuHardware:
    """A GPU seen on the machine, whatever llama.cpp was built with.  ``backend``: the
    llama.cpp backend that drives it ("CUDA", "Metal", "HIP"); ``cmake_flag``: the
    ``CMAKE_ARGS`` that builds llama-cpp-python for it."""

    vendor: str
    detail: str
    backend: str
    cmake_flag: str


def gpu_hardware() -> GpuHardware | None:
    """An NVIDIA driver, Apple silicon, or AMD's ROCm kernel driver; None when none is seen."""
    nvidia = Path("/proc/driver/nvidia/version")
    if nvidia.is_file() or shutil.which("nvidia-smi"):
        detail = ""
        try:
            detail = nvidia.read_text().splitlines()[0].strip()
        except (OSError, IndexError):
            detail = "nvidia-smi found"
        return GpuHardware("NVIDIA", detail, "CUDA", "-DGGML_CUDA=on")
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return GpuHardware("Apple", cpu_model(), "Metal", "-DGGML_METAL=on")
    if Path("/dev/kfd").exists():
        return GpuHardware("AMD", "ROCm kernel driver (/dev/kfd)", "HIP", "-DGGML_HIP=on")
    return None
