"""Quantizing a GGUF with llama.cpp itself (``llama_model_quantize``): the AMX probe's model
and the benchmarks' models of a real model's dimensions are written in float and quantized
here, as users' files are."""

from __future__ import annotations

from pathlib import Path

import llama_cpp


def quantize_q4_k_m(source: Path, target: Path) -> bool:
    """Write ``source`` quantized to Q4_K_M at ``target``; False when llama.cpp cannot."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    return llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) == 0
