"""How much memory a target + draft pair takes at a context size, from GGUF metadata alone
(before download, from the Hub's file sizes and headers, or before load).

Per model, in bytes:
- weights: the GGUF's tensor bytes (file size);
- KV cache: ``n_layer * n_ctx * n_head_kv * (key_length + value_length) * bytes per
  element`` (f16: 2; llama.cpp's default cache type), the keys read from
  ``<arch>.block_count``, ``<arch>.attention.head_count_kv``, ``<arch>.attention.key_length``
  / ``value_length`` (default: ``embedding_length / head_count``);
- recurrent state, for the layers of a hybrid or recurrent model that keep one instead of KV
  cells (Mamba / Mamba2, LFM2, Qwen3.5 / Qwen3-Next): per layer llama.cpp's ``n_embd_r`` (the
  convolution's last tokens) + ``n_embd_s`` (the state), f32, for one sequence, times 1 + the
  snapshots kept where the architecture has them (:mod:`localspec.llama.engine.rollback`);
  other hybrids' states are not counted;
- compute buffer: the logits of one micro-batch (``n_vocab * n_ubatch * 4``), which
  dominate llama.cpp's compute buffer for small models, plus the activations of one
  micro-batch (``n_ubatch * embedding_length * 4 * 8``).

Compared with RAM and, when a GPU backend is present, VRAM, the pair "fits" with at least
20 % of it left for the system, is "tight" when it fits only without that margin, and
"won't fit" beyond.  See ``benchmarks/memory_check.py`` for the estimate against the
measured resident set size of the default pair.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from localspec.errors import LocalspecError
from localspec.models.architectures import (
    ASSISTANTS,
    GATED_DELTA_NET_ARCHS,
    MAMBA_ARCHS,
    MAMBA_HYBRID_ARCHS,
    NEMOTRON_H_ARCHS,
    PARALLEL_HYBRID_ARCHS,
    RS_SNAPSHOTS,
    SHORT_CONV_ARCHS,
    SNAPSHOT_ARCHS,
)
from localspec.models.gguf_info import GGUFInfo, cached_header

CACHE_TYPE_BYTES = {"f16": 2.0, "bf16": 2.0, "f32": 4.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
N_UBATCH = 512  # llama.cpp's default micro-batch
FREE_MARGIN = 0.2  # share of memory left to the system for a "fits"


@dataclass(frozen=True)
class ModelMemory:
    """Bytes one model needs: ``weights``, ``kv_cache`` at ``n_ctx`` tokens, ``compute``, and
    ``recurrent`` (a hybrid or recurrent model's state, its snapshots included)."""

    name: str
    weights: int
    kv_cache: int
    compute: int
    recurrent: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute + self.recurrent


@dataclass(frozen=True)
class PairMemory:
    """The pair's estimate against ``available`` bytes (RAM, or VRAM where layers go to a GPU)."""

    models: tuple[ModelMemory, ...]
    n_ctx: int
    available: int | None
    where: str  # "RAM" or "VRAM"
    partial: bool = False  # a model whose header could not be read: its weights only, so "at least"
    notes: tuple[str, ...] = ()  # where headers came from, or why one could not be read

    @property
    def total(self) -> int:
        return sum(m.total for m in self.models)

    @property
    def verdict(self) -> str:
        """ "fits", "tight", "won't fit", or "unknown" when ``available`` is not known."""
        if not self.available:
            return "unknown"
        if self.total <= (1 - FREE_MARGIN) * self.available:
            return "fits"
        return "tight" if self.total <= self.available else "won't fit"

    def describe(self) -> str:
        """Several lines: each model's parts in GiB, the total against what is available."""
        lines = [
            f"{m.name}: weights {gib(m.weights)}, KV cache {gib(m.kv_cache)} at {self.n_ctx} "
            "tokens, "
            f"compute {gib(m.compute)}"
            + (f", recurrent state {gib(m.recurrent)}" if m.recurrent else "")
            for m in self.models
        ]
        avail = f" of {gib(self.available)} {self.where}" if self.available else ""
        least = "at least " if self.partial else ""
        lines.append(f"Pair: {least}{gib(self.total)}{avail}: {self.verdict}")
        lines.extend(self.notes)
        return "\n".join(lines)


def gib(n: float | None) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


def model_memory(
    info: GGUFInfo, n_ctx: int, cache_type: str = "f16", weights: int | None = None
) -> ModelMemory:
    """Estimate for one model from its header; ``weights`` defaults to the file's size.

    Raises ValueError on an unknown ``cache_type`` or a header without a block count."""
    if not isinstance(cache_type, str) or cache_type not in CACHE_TYPE_BYTES:
        raise ValueError(
            f"unknown KV cache type {cache_type!r}; one of {', '.join(CACHE_TYPE_BYTES)}"
        )
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 1:
        raise ValueError(f"n_ctx must be a positive number of tokens, got {n_ctx!r}")
    arch, name = info.architecture, Path(info.path).name
    n_layer = _count(info, f"{arch}.block_count", name)
    n_embd = _count(info, f"{arch}.embedding_length", name, required=False)
    if arch in MAMBA_ARCHS:  # no attention at all
        kv_heads, per_cell = [0] * n_layer, 0
    else:
        kv_heads, per_cell = _attention(info, n_layer, n_embd, name)
    recurrent_layers = _recurrent_layers(info, n_layer, kv_heads)
    if arch not in PARALLEL_HYBRID_ARCHS:  # elsewhere a layer keeps KV cells or a state
        kv_heads = [0 if i in recurrent_layers else h for i, h in enumerate(kv_heads)]
    kv_heads = _without_shared_kv(info, kv_heads)
    kv = n_ctx * sum(kv_heads) * per_cell * CACHE_TYPE_BYTES[cache_type]
    recurrent = len(recurrent_layers) * _state_floats(info, n_embd) * 4 * _planes(arch)
    n_ubatch = min(N_UBATCH, n_ctx)
    compute = info.n_vocab * n_ubatch * 4 + n_ubatch * n_embd * 4 * 8
    if weights is None:
        weights = Path(info.path).stat().st_size
    return ModelMemory(Path(info.path).name, int(weights), int(kv), int(compute), int(recurrent))


def _attention(info: GGUFInfo, n_layer: int, n_embd: int | None, name: str) -> tuple:
    """(KV heads per layer, key + value length of one head) from the header."""
    arch = info.architecture
    heads = _per_layer(info, f"{arch}.attention.head_count", n_layer, name, default=None)
    kv_heads = _per_layer(info, f"{arch}.attention.head_count_kv", n_layer, name, default=heads)
    n_head = max(heads) if heads else 0
    fallback = n_embd // n_head if n_embd and n_head else None
    head_k = (
        _count(info, f"{arch}.attention.key_length", name, required=fallback is None) or fallback
    )
    head_v = (
        _count(info, f"{arch}.attention.value_length", name, required=fallback is None) or fallback
    )
    if kv_heads is None:
        raise ValueError(f"{name}: no {arch}.attention.head_count(_kv) in the GGUF header")
    return kv_heads, head_k + head_v


def _without_shared_kv(info: GGUFInfo, kv_heads: list) -> list:
    """``kv_heads`` less the layers that read another layer's KV: the last
    ``attention.shared_kv_layers`` of a Gemma 4, every layer of its assistant (which reads the
    target's)."""
    if info.architecture in ASSISTANTS:
        return [0] * len(kv_heads)
    shared = int(info.get(f"{info.architecture}.attention.shared_kv_layers", 0) or 0)
    keep = max(len(kv_heads) - shared, 0)
    return kv_heads[:keep] + [0] * (len(kv_heads) - keep)


def _recurrent_layers(info: GGUFInfo, n_layer: int, kv_heads: list) -> set[int]:
    """The layers keeping a recurrent state instead of KV cells, where the architecture's rule
    is known (empty otherwise)."""
    arch = info.architecture
    if arch in MAMBA_ARCHS:
        return set(range(n_layer))
    if arch in SHORT_CONV_ARCHS:
        return {i for i, h in enumerate(kv_heads) if h == 0}
    main = n_layer - int(info.get(f"{arch}.nextn_predict_layers", 0) or 0)
    if arch in PARALLEL_HYBRID_ARCHS:
        return set(range(main))
    if arch in MAMBA_HYBRID_ARCHS:
        return {i for i in range(main) if kv_heads[i] == 0}
    if arch in NEMOTRON_H_ARCHS:
        ff = info.get(f"{arch}.feed_forward_length")
        ff = ff if isinstance(ff, list) else [ff or 0] * n_layer
        return {i for i in range(main) if kv_heads[i] == 0 and ff[i] == 0}
    if arch in GATED_DELTA_NET_ARCHS:
        marked = info.get(f"{arch}.attention.recurrent_layers")
        if isinstance(marked, list):
            return {i for i, r in enumerate(marked[:main]) if r}
        interval = int(info.get(f"{arch}.full_attention_interval", 4) or 4)
        return {i for i in range(main) if (i + 1) % interval != 0}
    return set()


def _state_floats(info: GGUFInfo, n_embd: int | None) -> int:
    """llama.cpp's ``n_embd_r() + n_embd_s()`` for one recurrent layer (src/llama-hparams.cpp)."""
    arch = info.architecture
    if arch in SHORT_CONV_ARCHS:
        return (n_embd or 0) * (int(info.get(f"{arch}.shortconv.l_cache", 0) or 1) - 1)
    d_conv = int(info.get(f"{arch}.ssm.conv_kernel", 0) or 0)
    d_inner = int(info.get(f"{arch}.ssm.inner_size", 0) or 0)
    d_state = int(info.get(f"{arch}.ssm.state_size", 0) or 0)
    n_group = int(info.get(f"{arch}.ssm.group_count", 0) or 0)
    return max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state) + d_state * d_inner


def _planes(arch: str) -> int:
    """Copies of a sequence's state: itself and, where llama.cpp keeps them, the snapshots."""
    return 1 + (RS_SNAPSHOTS if arch in SNAPSHOT_ARCHS else 0)


def ram_budget() -> tuple[int, str]:
    """(total RAM in bytes, "RAM"): the budget when nothing is offloaded to a GPU.  A GPU's
    budget comes from the llama.cpp build (:func:`localspec.llama.backend.memory_budget`)."""
    from localspec.machine import memory_bytes

    return memory_bytes(), "RAM"


def _count(info: GGUFInfo, key: str, name: str, required: bool = True) -> int:
    """A positive integer header value; 0 when absent and not ``required``."""
    value = info.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: {key} is {value!r} in the GGUF header, not a positive integer")
    return value


def _per_layer(info: GGUFInfo, key: str, n_layer: int, name: str, default):
    """A head count per layer: one integer for all layers, or an array (variable-GQA
    models such as OpenELM); ``default`` when absent."""
    value = info.get(key)
    if value is None:
        return default
    if isinstance(value, list):
        if len(value) != n_layer or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
        ):
            raise ValueError(f"{name}: {key} is not {n_layer} head counts")
        return value
    return [_count(info, key, name)] * n_layer


def pair_memory(
    target: str | Path,
    draft: str | Path | None,
    n_ctx: int,
    cache_type: str = "f16",
    budget: tuple[int, str] | None = None,
) -> PairMemory:
    """Estimate for target (+ draft) GGUF files on disk at ``n_ctx`` tokens each, against
    ``budget`` (bytes, where), by default :func:`ram_budget`.  Raises
    :class:`~localspec.errors.ModelFileError` for a missing or corrupt GGUF, ValueError for a header
    without the sizes needed."""
    models = [model_memory(cached_header(target), n_ctx, cache_type)]
    if draft is not None:
        models.append(model_memory(cached_header(draft), n_ctx, cache_type))
    available, where = budget or ram_budget()
    return PairMemory(tuple(models), n_ctx, available, where)


def pair_memory_of_refs(
    target, draft, n_ctx: int, cache_type: str = "f16", budget: tuple[int, str] | None = None
) -> PairMemory:
    """:func:`pair_memory` for :class:`~localspec.models.discovery.ModelRef` s.  A model on disk is
    read from its header; one not downloaded yet from its header on the Hub, read with
    range requests (:func:`localspec.models.remote_header.remote_gguf_header`, about 6 MB for a
    152k-token vocabulary; network, so call it off the GUI thread).  When that fails (offline,
    gated, unreachable) the model counts its catalogue file size only, the estimate is ``partial``
    and ``notes`` says why."""
    models, notes, partial = [], [], False
    for ref in (target, draft):
        if ref is None:
            continue
        if ref.path is not None:
            models.append(model_memory(cached_header(ref.path), n_ctx, cache_type))
            continue
        problem = "not downloaded, not in the catalogue" if ref.entry is None else None
        if problem is None:
            try:
                models.append(_remote_model_memory(ref, n_ctx, cache_type))
                notes.append(f"{ref.name}: header read from the Hub before download")
                continue
            except (LocalspecError, ValueError) as exc:
                problem = str(exc)
        models.append(ModelMemory(ref.name, int(ref.size or 0), 0, 0))
        notes.append(f"{ref.name}: file size only ({problem})")
        partial = True
    available, where = budget or ram_budget()
    return PairMemory(tuple(models), n_ctx, available, where, partial, tuple(notes))


def _remote_model_memory(ref, n_ctx: int, cache_type: str) -> ModelMemory:
    from localspec.models.remote_header import remote_gguf_header

    info, size = remote_gguf_header(ref.entry)
    return replace(model_memory(info, n_ctx, cache_type, weights=size), name=ref.name)


AUTO_CTX_FLOOR = (
    4096  # what "auto" gives at the least, memory or not (llama.cpp's and LM Studio's habit)
)
AUTO_CTX_STEP = 256  # "auto" sizes are a multiple of this


@dataclass(frozen=True)
class AutoContext:
    """What ``n_ctx="auto"`` chose: ``n_ctx`` tokens, the ``trained`` context of the pair
    (the smaller of the two models'), the KV cache bytes at ``n_ctx`` and why (``reason``:
    "trained context" or "memory")."""

    n_ctx: int
    trained: int
    kv_bytes: int
    budget: int
    where: str
    reason: str

    def describe(self) -> str:
        why = (
            "the model's trained context"
            if self.reason == "trained context"
            else "what memory leaves"
        )
        return (
            f"context: {self.n_ctx} tokens ({why}; trained {self.trained}, KV caches "
            f"{gib(self.kv_bytes)} "
            f"of {gib(self.budget)} {self.where})"
        )


def trained_context(info: GGUFInfo) -> int | None:
    """``<arch>.context_length`` of the header, None when absent or not a positive integer."""
    value = info.get(f"{info.architecture}.context_length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def auto_context(
    target: str | Path,
    draft: str | Path | None,
    budget: tuple[int, str] | None = None,
    cache_type: str = "f16",
) -> AutoContext:
    """The context ``n_ctx="auto"`` loads: the pair's trained context, capped so that both
    models' weights, compute buffers and KV caches leave :data:`FREE_MARGIN` of ``budget``
    (bytes, where; RAM by default) free; never below :data:`AUTO_CTX_FLOOR` unless the
    model was trained on less.  Raises
    :class:`~localspec.errors.ModelFileError` for a missing or corrupt GGUF."""
    infos = [cached_header(target)] + ([cached_header(draft)] if draft is not None else [])
    trained = min((t for t in map(trained_context, infos) if t), default=AUTO_CTX_FLOOR)
    available, where = budget or ram_budget()
    at_one = [model_memory(info, 1, cache_type) for info in infos]
    fixed = sum(m.weights + m.compute for m in at_one)
    per_token = sum(m.kv_cache for m in at_one)
    fits = int(((1 - FREE_MARGIN) * available - fixed) // per_token) if per_token else trained
    n_ctx = min(trained, max(AUTO_CTX_FLOOR, fits // AUTO_CTX_STEP * AUTO_CTX_STEP))
    reason = "trained context" if n_ctx == trained else "memory"
    return AutoContext(n_ctx, trained, n_ctx * per_token, available, where, reason)
