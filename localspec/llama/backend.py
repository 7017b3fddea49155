"""The llama.cpp build under llama-cpp-python: what it was compiled with, which backends
it registered, and how weights are placed in CPU buffer types.

With :mod:`localspec.llama.engine` the only module that touches ``llama_cpp``; the engine asks
it for the AMX fallback's load parameters.  ggml's registry functions (``ggml_backend_reg_*``,
``ggml_backend_dev_*``, ``ggml_backend_buft_name``) come from the ``libggml`` that
llama-cpp-python ships and loads (``llama_cpp._ggml``).

Buffer types, as llama.cpp 0c1e570 chooses them for a weight on the CPU
(``make_cpu_buft_list`` in ``src/llama-model.cpp``): the first of AMX, CPU_REPACK, CPU that
supports the weight's matrix multiplication.  The AMX fallback keeps the second choice:
``use_extra_bufts = False`` drops both extra types, then a tensor buffer-type override
puts back in CPU_REPACK exactly the weights CPU_REPACK takes on this CPU
(``ggml_repack_get_optimal_repack_type`` in ``ggml/src/ggml-cpu/repack.cpp``).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from functools import lru_cache

import llama_cpp
from gguf import GGMLQuantizationType as Q

from localspec.machine import memory_bytes
from localspec.models.gguf_info import GGUFInfo

# llama-cpp-python's CHANGELOG names the llama.cpp commit each release vendors; the
# sdist is built without git, so the library itself reports "unknown".
VENDORED_LLAMA_CPP = {"0.3.36": "0c1e57098"}

GPU_BACKENDS = ("CUDA", "Metal", "Vulkan", "HIP", "ROCm", "SYCL", "MUSA", "CANN", "OpenCL", "RPC")
_DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "ACCEL"}


def _ggml():
    from llama_cpp._ggml import libggml

    lib = libggml
    if not getattr(lib, "_localspec_typed", False):
        for name, res, args in (
            ("ggml_backend_reg_count", ctypes.c_size_t, []),
            ("ggml_backend_reg_get", ctypes.c_void_p, [ctypes.c_size_t]),
            ("ggml_backend_reg_name", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_backend_dev_count", ctypes.c_size_t, []),
            ("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [ctypes.c_void_p]),
            ("ggml_backend_dev_type", ctypes.c_int, [ctypes.c_void_p]),
            (
                "ggml_backend_dev_memory",
                None,
                [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
            ),
            ("ggml_backend_dev_by_type", ctypes.c_void_p, [ctypes.c_int]),
            ("ggml_backend_dev_backend_reg", ctypes.c_void_p, [ctypes.c_void_p]),
            (
                "ggml_backend_reg_get_proc_address",
                ctypes.c_void_p,
                [ctypes.c_void_p, ctypes.c_char_p],
            ),
            ("ggml_backend_buft_name", ctypes.c_char_p, [ctypes.c_void_p]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        lib._localspec_typed = True
    return lib


def _ensure_backends() -> None:
    llama_cpp.llama_backend_init()  # idempotent; registers the compiled-in backends


# --- what the build is ----------------------------------------------------------------------


def llama_cpp_python_version() -> str:
    return llama_cpp.__version__


def llama_cpp_commit() -> str:
    """The llama.cpp commit vendored by this llama-cpp-python (short hash), or "unknown"."""
    return VENDORED_LLAMA_CPP.get(llama_cpp.__version__, "unknown")


@lru_cache(maxsize=1)
def system_info() -> str:
    """``llama_print_system_info()``: the CPU features and backends llama.cpp was built with,
    e.g. "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | ..."."""
    _ensure_backends()
    return llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()


def _features() -> dict[str, str]:
    return dict(re.findall(r"([A-Z0-9_]+) = (\w+)", system_info()))


def has_feature(name: str) -> bool:
    """True when the system info line lists ``NAME = 1`` (e.g. "AVX2", "AMX_INT8", "REPACK")."""
    return _features().get(name) == "1"


def amx_in_build() -> bool:
    """Whether this build has llama.cpp's AMX kernels (only built for a CPU that has AMX)."""
    return has_feature("AMX_INT8")


def supports_gpu_offload() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


def registered_backends() -> list[str]:
    """ggml backends this build registered, e.g. ["CPU"] or ["CUDA", "CPU"]."""
    _ensure_backends()
    lib = _ggml()
    return [
        lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode()
        for i in range(lib.ggml_backend_reg_count())
    ]


def gpu_backend() -> str:
    """The GPU backend compiled in ("CUDA", "Metal", "Vulkan", ...), or "CPU" when none is."""
    for name in registered_backends():
        for known in GPU_BACKENDS:
            if name.lower().startswith(known.lower()):
                return known
    return "CPU"


@dataclass(frozen=True)
class Device:
    """A compute device llama.cpp can place work on; memory in bytes (0 when unknown)."""

    name: str
    description: str
    kind: str  # "CPU", "GPU", "iGPU", "ACCEL"
    memory_free: int
    memory_total: int


def devices() -> list[Device]:
    _ensure_backends()
    lib = _ggml()
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        found.append(
            Device(
                lib.ggml_backend_dev_name(dev).decode(),
                lib.ggml_backend_dev_description(dev).decode(),
                _DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "?"),
                free.value,
                total.value,
            )
        )
    return found


def cpu_extra_buffer_types() -> dict[str, int]:
    """The CPU device's extra buffer types by name ("AMX", "CPU_REPACK", ...) -> handle."""
    _ensure_backends()
    lib = _ggml()
    cpu = lib.ggml_backend_dev_by_type(0)
    if not cpu:
        return {}
    address = lib.ggml_backend_reg_get_proc_address(
        lib.ggml_backend_dev_backend_reg(cpu), b"ggml_backend_dev_get_extra_bufts"
    )
    if not address:
        return {}
    get_extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)
    array = get_extra(cpu)
    found: dict[str, int] = {}
    i = 0
    while array and array[i]:
        found[lib.ggml_backend_buft_name(array[i]).decode()] = array[i]
        i += 1
    return found


# --- the AMX fallback -----------------------------------------------------------------------


def repack_tensors(info: GGUFInfo, avx2: bool, avx512: bool) -> list[str]:
    """Names of the weights that CPU_REPACK takes on an x86 CPU with these features
    (llama.cpp 0c1e570's rules): matrix-multiplication weights of 2 or 3 dimensions
    whose ne[1] is a multiple of 8, of type Q4_0 / Q4_K / IQ4_NL / MXFP4 (AVX2) or
    Q2_K (AVX-512).  Token embeddings are read by row lookup, never repacked."""
    types = set()
    if avx2:
        types |= {Q.Q4_0, Q.Q4_K, Q.IQ4_NL, Q.MXFP4}
    if avx512:
        types.add(Q.Q2_K)
    return [
        t.name
        for t in info.tensors
        if t.ggml_type in types
        and len(t.shape) in (2, 3)
        and t.shape[1] % 8 == 0
        and "token_embd" not in t.name
        and not t.name.endswith("_embd.weight")
    ]


def _override_patterns(names: list[str]) -> list[str]:
    """Anchored regexes naming exactly ``names``, one per tensor suffix with its layer
    numbers as an alternation (short patterns: libstdc++'s std::regex recurses per branch)."""
    by_suffix: dict[str, list[str]] = {}
    plain: list[str] = []
    for name in names:
        m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
        if m:
            by_suffix.setdefault(m.group(2), []).append(m.group(1))
        else:
            plain.append(name)
    patterns = [
        f"^blk\\.({'|'.join(layers)})\\.{re.escape(suffix)}$"
        for suffix, layers in by_suffix.items()
    ]
    return patterns + [f"^{re.escape(name)}$" for name in plain]


class _BuftOverride(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@dataclass
class NoAmxPlacement:
    """Load parameters that keep weights out of the AMX buffer type.

    ``repacked`` counts the tensors put into CPU_REPACK by override (0 when the model is
    offloaded to a GPU, or the build has no CPU_REPACK: then extra buffer types are
    simply off).  ``keepalive`` holds the ctypes memory llama.cpp reads while loading.
    """

    repacked: int
    keepalive: tuple = ()

    def describe(self) -> str:
        if self.repacked:
            return f"without AMX; {self.repacked} weights in CPU_REPACK"
        return "without AMX or CPU_REPACK (extra buffer types off)"


def apply_no_amx(mparams, info: GGUFInfo, offloaded: bool) -> NoAmxPlacement:
    """Set ``mparams`` (a ``llama_model_params``) so no weight lands in the AMX buffer
    type; on the CPU, the weights CPU_REPACK supports still go there.  ``offloaded``:
    the model's layers go to a GPU, where a CPU override would pull them back."""
    mparams.use_extra_bufts = False
    repack = cpu_extra_buffer_types().get("CPU_REPACK")
    if offloaded or not repack:
        return NoAmxPlacement(0)
    names = repack_tensors(info, has_feature("AVX2"), has_feature("AVX512"))
    patterns = _override_patterns(names)[: llama_cpp.llama_max_tensor_buft_overrides() - 1]
    encoded = [p.encode() for p in patterns]
    table = (_BuftOverride * (len(encoded) + 1))(
        *[_BuftOverride(p, repack) for p in encoded], _BuftOverride(None, None)
    )
    mparams.tensor_buft_overrides = ctypes.cast(table, ctypes.c_void_p)
    return NoAmxPlacement(len(names), (table, encoded))


def memory_budget(offload: bool = True) -> tuple[int, str]:
    """(bytes, "VRAM") of the first GPU llama.cpp sees when layers are offloaded to it
    (Metal reports the unified memory it may use), else (total RAM, "RAM")."""
    if offload:
        gpus = [d for d in devices() if d.kind in ("GPU", "iGPU") and d.memory_total]
        if gpus:
            return gpus[0].memory_total, "VRAM"
    return memory_bytes(), "RAM"
