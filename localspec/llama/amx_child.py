"""The AMX probe's child process (see :mod:`localspec.llama.amx_probe`): quantize a tiny
model to Q4_K_M with llama.cpp, load it with AMX allowed, decode.  A crash kills only
this child."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from localspec.llama.amx_probe import OK_LINE
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.quantize import quantize_q4_k_m
from localspec.llama.synthetic import write_model


def write_probe_model(folder: Path) -> Path | None:
    """A tiny random model quantized to Q4_K_M by llama.cpp itself (the tensor types whose
    AMX kernels crash), written in ``folder``; None when llama.cpp cannot quantize it."""
    f32 = write_model(folder / "f32.gguf", seed=0, n_embd=256, n_ff=512)
    q4k = folder / "q4_k_m.gguf"
    return q4k if quantize_q4_k_m(f32, q4k) else None


def probe_child() -> int:
    """The probe itself: quantize a tiny model to Q4_K_M, load it with AMX allowed, decode."""
    with tempfile.TemporaryDirectory(prefix="localspec-amx-probe-") as tmp:
        q4k = write_probe_model(Path(tmp))
        if q4k is None:
            print("llama_model_quantize failed", file=sys.stderr)
            return 3
        engine = Engine(
            q4k, EngineConfig(n_ctx=256, n_gpu_layers=0, n_threads=2, cpu_buffers="default")
        )
        prompt = [3 + (i * 7) % 300 for i in range(64)]
        engine.decode(prompt, [63])  # a batch: llama.cpp's AMX tile kernels
        for token in (5, 6, 7, 8):
            engine.decode([token], [0])  # single rows: its AVX-512 VNNI kernels
        engine.close()
    print(OK_LINE)
    return 0
