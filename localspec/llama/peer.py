"""llama-cpp-python's own ``Llama``, the peer the benchmarks compare against, placed on
this machine's CPU as an :class:`~localspec.llama.engine.Engine` is."""

from __future__ import annotations

import threading
from pathlib import Path

import llama_cpp

from localspec.llama import amx_probe, backend
from localspec.models.gguf_info import check_gguf_file

_peer_patch_lock = threading.Lock()


def load_peer_llama(path: str | Path, **kwargs):
    """llama-cpp-python's own ``Llama(path, **kwargs)``, the peer the benchmarks compare
    against, with its CPU weights placed as an :class:`Engine` places them: where
    :func:`localspec.llama.amx_probe.amx_decision` says llama.cpp's AMX kernels crash this
    machine, ``Llama`` (which has no option for it) would die with SIGILL at its first
    decode, so its model parameters get the same no-AMX placement for the load.

    ``kwargs`` go to ``Llama`` unchanged.  Raises :class:`ModelFileError` for a missing,
    non-GGUF or truncated file where the placement is needed (it reads the file's tensor
    list first), else whatever ``Llama`` raises (``ValueError`` for a file it cannot load)."""
    from llama_cpp import Llama

    if not amx_probe.amx_decision().avoid_amx:
        return Llama(str(path), **kwargs)
    info = check_gguf_file(Path(path))
    bindings = llama_cpp.llama_cpp  # the module Llama calls it through
    placements = []  # the override tables, kept alive with the Llama that points at them

    with _peer_patch_lock:  # two loads at once would each take the other's patch for the original
        original = bindings.llama_model_default_params

        def params_without_amx():
            mparams = original()
            placements.append(
                backend.apply_no_amx(
                    mparams,
                    info,
                    offloaded=kwargs.get("n_gpu_layers", 0) != 0 and backend.supports_gpu_offload(),
                )
            )
            return mparams

        bindings.llama_model_default_params = params_without_amx
        try:
            llm = Llama(str(path), **kwargs)
        finally:
            bindings.llama_model_default_params = original
    llm._localspec_no_amx_tables = placements
    return llm


def peer_prompt_lookup(num_pred_tokens: int = 10):
    """llama-cpp-python's ``LlamaPromptLookupDecoding`` drafter, for ``Llama(draft_model=...)``."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    return LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens)
