"""Random-weight GGUF files of the architectures that keep a recurrent state: LFM2 (short
convolutions beside attention, a hybrid llama.cpp rolls back with recurrent-state snapshots,
``n_rs_seq``), Mamba2 (recurrent only, rolled back from a saved state) and Qwen3.5 (Gated
DeltaNet beside attention, with an MTP block); tiny for the tests, or a real model's dimensions
for ``localspec bench rollback``.  The tensors are the ones llama.cpp's loader asks for
(src/models/lfm2.cpp, mamba2.cpp and qwen35.cpp of the pinned llama.cpp,
shapes as ``create_tensor`` gives them, outermost last); the tokenizer and chat template are
those of :mod:`localspec.llama.synthetic`.  Same seed, same weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from localspec.llama.synthetic import N_CTX_TRAIN, _add_tokenizer, vocabulary

HYBRID_LAYERS = ("conv", "attention", "conv")  # LFM2: a layer without KV heads is a convolution
L_CACHE = 3  # LFM2's short convolution: the kernel's length
N_EMBD, N_HEAD, N_FF = 64, 4, 128
MAMBA_LAYERS, D_STATE, D_CONV, N_GROUP, HEAD_DIM = 2, 16, 4, 1, 16
NEMOTRON_H_LAYERS = ("mamba", "attention", "mlp", "mamba")
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(frozen=True)
class HybridShape:
    """An LFM2's dimensions: ``layers`` ("conv" or "attention" each), hidden and feed-forward
    sizes, attention heads (``n_head_kv`` for grouped-query attention), words added to the
    vocabulary, and the weights' float type."""

    layers: tuple[str, ...] = HYBRID_LAYERS
    n_embd: int = N_EMBD
    n_ff: int = N_FF
    n_head: int = N_HEAD
    n_head_kv: int = N_HEAD
    extra_words: int = 0
    dtype: type = np.float32


TINY = HybridShape()
# LFM2-350M's dimensions (its config.json: 16 layers, attention at 2, 5, 8, 10, 12, 14; hidden
# 1024, feed-forward 4608 as llama.cpp reads it, 16 heads, 8 KV heads, a 65,536-token vocabulary)
LFM2_350M = HybridShape(
    layers=tuple("attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)),
    n_embd=1024,
    n_ff=4608,
    n_head=16,
    n_head_kv=8,
    extra_words=65536 - 322,
    dtype=np.float16,
)


def write_hybrid_model(
    path: Path,
    seed: int,
    architecture: str = "lfm2",
    shape: HybridShape | Qwen35Shape | None = None,
) -> Path:
    """Write a ``lfm2`` (hybrid, of ``shape``: a :class:`HybridShape`), a tiny ``mamba2``
    (recurrent) or a ``qwen35`` (hybrid, with one MTP block, of ``shape``: a
    :class:`Qwen35Shape`) model, tiny unless ``shape`` says otherwise; returns ``path``."""
    writers = {"lfm2": _lfm2, "mamba2": _mamba2, "qwen35": _qwen35, "nemotron_h": _nemotron_h}
    if architecture not in writers:
        raise ValueError(f"no synthetic {architecture!r}; one of {', '.join(writers)}")
    if shape is None:
        shape = QWEN35_TINY if architecture == "qwen35" else TINY
    tokens, scores, types = vocabulary(shape.extra_words)
    writer = GGUFWriter(str(path), architecture)
    writer.add_name(f"synthetic-{architecture}-{seed}")
    writer.add_size_label("1M")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(shape.n_embd if architecture in ("lfm2", "qwen35") else N_EMBD)
    _add_tokenizer(writer, "llama", (tokens, scores, types), 1)
    writer.add_chat_template(TEMPLATE)
    rng = np.random.default_rng(seed)
    w = lambda *dims, std=0.15: _w(rng, dims, std, shape.dtype)  # noqa: E731
    writers[architecture](writer, w, len(tokens), shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _w(rng, dims, std, dtype) -> np.ndarray:
    return (rng.standard_normal(dims, dtype=np.float32) * std).astype(dtype)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _output(writer: GGUFWriter, w, n_vocab: int, norm_name: str, n_embd: int = N_EMBD) -> None:
    writer.add_tensor(norm_name, _ones(n_embd))
    output = w(n_vocab, n_embd, std=1.0)
    output[2] = 0.0  # the EOS logit stays 0 while the best is far above: greedy never stops early
    writer.add_tensor("output.weight", output)


def _lfm2(writer: GGUFWriter, w, n_vocab: int, shape: HybridShape) -> None:
    d, head = shape.n_embd, shape.n_embd // shape.n_head
    writer.add_block_count(len(shape.layers))
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv([shape.n_head_kv if k == "attention" else 0 for k in shape.layers])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head)
    writer.add_uint32(f"{writer.arch}.shortconv.l_cache", L_CACHE)
    writer.add_tensor("token_embd.weight", w(n_vocab, d, std=1.0))
    for i, kind in enumerate(shape.layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(d))
        if kind == "attention":
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", _ones(head))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", _ones(head))
            writer.add_tensor(f"blk.{i}.attn_q.weight", w(d, d))
            writer.add_tensor(f"blk.{i}.attn_k.weight", w(shape.n_head_kv * head, d))
            writer.add_tensor(f"blk.{i}.attn_v.weight", w(shape.n_head_kv * head, d))
            writer.add_tensor(f"blk.{i}.attn_output.weight", w(d, d))
        else:
            # float32 whatever the shape's type: llama.cpp's ssm_conv reads its kernel as f32
            conv = w(d, L_CACHE, std=0.5).astype(np.float32)
            writer.add_tensor(f"blk.{i}.shortconv.conv.weight", conv)
            writer.add_tensor(f"blk.{i}.shortconv.in_proj.weight", w(3 * d, d))
            writer.add_tensor(f"blk.{i}.shortconv.out_proj.weight", w(d, d))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", _ones(d))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(shape.n_ff, d))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(shape.n_ff, d))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(d, shape.n_ff))
    _output(writer, w, n_vocab, "token_embd_norm.weight", d)


def _mamba2(writer: GGUFWriter, w, n_vocab: int, shape: HybridShape) -> None:
    writer.add_block_count(MAMBA_LAYERS)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_layer_norm_rms_eps(1e-5)
    _ssm_keys(writer)
    writer.add_tensor("token_embd.weight", w(n_vocab, N_EMBD, std=1.0))
    for i in range(MAMBA_LAYERS):
        _mamba2_layer(writer, w, i)
    _output(writer, w, n_vocab, "output_norm.weight")


def _nemotron_h(writer: GGUFWriter, w, n_vocab: int, shape: HybridShape) -> None:
    """Nemotron-H's layout (src/models/nemotron-h.cpp): each layer a Mamba2 mixer (no KV
    heads, no feed-forward), attention (KV heads, no feed-forward) or an MLP (a squared-ReLU
    up / down), told apart by the per-layer ``head_count_kv`` and ``feed_forward_length``."""
    _ssm_keys(writer)
    kinds = NEMOTRON_H_LAYERS
    writer.add_block_count(len(kinds))
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv([N_HEAD // 2 if k == "attention" else 0 for k in kinds])
    writer.add_feed_forward_length([N_FF if k == "mlp" else 0 for k in kinds])
    writer.add_layer_norm_eps(1e-5)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tensor("token_embd.weight", w(n_vocab, N_EMBD, std=1.0))
    head = N_EMBD // N_HEAD
    for i, kind in enumerate(kinds):
        if kind == "mamba":
            _mamba2_layer(writer, w, i)
            continue
        writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
        if kind == "attention":
            writer.add_tensor(f"blk.{i}.attn_q.weight", w(N_EMBD, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_k.weight", w(N_HEAD // 2 * head, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_v.weight", w(N_HEAD // 2 * head, N_EMBD))
            writer.add_tensor(f"blk.{i}.attn_output.weight", w(N_EMBD, N_EMBD))
        else:
            writer.add_tensor(f"blk.{i}.ffn_up.weight", w(N_FF, N_EMBD))
            writer.add_tensor(f"blk.{i}.ffn_down.weight", w(N_EMBD, N_FF))
    _output(writer, w, n_vocab, "output_norm.weight")


def _ssm_keys(writer: GGUFWriter) -> None:
    """A Mamba2 mixer's keys (its inner size twice the width, heads of HEAD_DIM)."""
    d_inner = 2 * N_EMBD
    writer.add_ssm_conv_kernel(D_CONV)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(D_STATE)
    writer.add_ssm_time_step_rank(d_inner // HEAD_DIM)
    writer.add_ssm_group_count(N_GROUP)


def _mamba2_layer(writer: GGUFWriter, w, i: int) -> None:
    d_inner = 2 * N_EMBD
    n_head = d_inner // HEAD_DIM
    d_in_proj = 2 * d_inner + 2 * N_GROUP * D_STATE + n_head
    conv_dim = d_inner + 2 * N_GROUP * D_STATE
    writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
    writer.add_tensor(f"blk.{i}.ssm_in.weight", w(d_in_proj, N_EMBD))
    writer.add_tensor(f"blk.{i}.ssm_conv1d.weight", w(conv_dim, D_CONV, std=0.5))
    writer.add_tensor(f"blk.{i}.ssm_conv1d.bias", np.zeros(conv_dim, dtype=np.float32))
    writer.add_tensor(f"blk.{i}.ssm_dt.bias", np.zeros(n_head, dtype=np.float32))
    writer.add_tensor(f"blk.{i}.ssm_a", -np.exp(w(n_head, 1, std=0.5)))
    writer.add_tensor(f"blk.{i}.ssm_d", _ones(n_head).reshape(n_head, 1))
    writer.add_tensor(f"blk.{i}.ssm_norm.weight", _ones(d_inner).reshape(N_GROUP, -1))
    writer.add_tensor(f"blk.{i}.ssm_out.weight", w(N_EMBD, d_inner))


@dataclass(frozen=True)
class Qwen35Shape:
    """A Qwen3.5's dimensions: ``n_layer`` layers (every 4th attention, the rest Gated
    DeltaNet) and one MTP block after them; attention heads of ``head_dim`` (a gated query),
    its rotary dimensions and their M-RoPE sections; the DeltaNet's head size (``gdn_state``,
    keys and values alike) and key / value heads; words added to the vocabulary, and the
    weights' float type."""

    n_layer: int = 4
    n_embd: int = N_EMBD
    n_ff: int = N_FF
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = N_EMBD // 4
    rope_dims: int = N_EMBD // 4
    rope_sections: tuple[int, ...] = (4, 2, 2, 0)
    gdn_state: int = 16
    gdn_k_heads: int = 2
    gdn_v_heads: int = 4
    extra_words: int = 0
    dtype: type = np.float32


QWEN35_TINY = Qwen35Shape()
# Qwen3.5-0.8B's dimensions (its config.json: 24 layers, hidden 1024, feed-forward 3584, 8
# heads of 256 with 2 KV heads, a quarter of each rotated (M-RoPE sections 11 / 11 / 10),
# DeltaNet heads 16 keys / 16 values of 128, a 248,320-token vocabulary, one MTP layer)
QWEN35_0_8B = Qwen35Shape(
    n_layer=24,
    n_embd=1024,
    n_ff=3584,
    n_head=8,
    n_head_kv=2,
    head_dim=256,
    rope_dims=64,
    rope_sections=(11, 11, 10, 0),
    gdn_state=128,
    gdn_k_heads=16,
    gdn_v_heads=16,
    extra_words=248320 - 321,  # the synthetic tokenizer has 321 tokens of its own
    dtype=np.float16,
)


def _qwen35(writer: GGUFWriter, w, n_vocab: int, shape: Qwen35Shape) -> None:
    """Qwen3.5's layout (src/models/qwen35.cpp): Gated DeltaNet layers, every 4th one
    attention with a gated query, then one MTP (NextN) block: an attention block fed with the
    target's hidden state and the next token's embedding (``nextn_predict_layers`` 1)."""
    d, head, n = shape.n_embd, shape.head_dim, shape.n_layer
    writer.add_block_count(n + 1)
    writer.add_uint32(f"{writer.arch}.nextn_predict_layers", 1)
    writer.add_uint32(f"{writer.arch}.full_attention_interval", 4)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(shape.rope_dims)
    writer.add_rope_dimension_sections(list(shape.rope_sections))
    writer.add_ssm_conv_kernel(4)
    writer.add_ssm_state_size(shape.gdn_state)
    writer.add_ssm_group_count(shape.gdn_k_heads)
    writer.add_ssm_time_step_rank(shape.gdn_v_heads)
    writer.add_ssm_inner_size(shape.gdn_state * shape.gdn_v_heads)
    writer.add_tensor("token_embd.weight", w(n_vocab, d, std=1.0))
    for i in range(n + 1):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(d))
        writer.add_tensor(f"blk.{i}.post_attention_norm.weight", _ones(d))
        if i < n and (i + 1) % 4 != 0:
            _gated_delta_net(writer, w, i, shape)
        else:
            writer.add_tensor(f"blk.{i}.attn_q.weight", w(2 * shape.n_head * head, d))
            writer.add_tensor(f"blk.{i}.attn_k.weight", w(shape.n_head_kv * head, d))
            writer.add_tensor(f"blk.{i}.attn_v.weight", w(shape.n_head_kv * head, d))
            writer.add_tensor(f"blk.{i}.attn_output.weight", w(d, shape.n_head * head))
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", _ones(head))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", _ones(head))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(shape.n_ff, d))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(shape.n_ff, d))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(d, shape.n_ff))
    writer.add_tensor(f"blk.{n}.nextn.eh_proj.weight", w(d, 2 * d))
    writer.add_tensor(f"blk.{n}.nextn.enorm.weight", _ones(d))
    writer.add_tensor(f"blk.{n}.nextn.hnorm.weight", _ones(d))
    writer.add_tensor(f"blk.{n}.nextn.shared_head_norm.weight", _ones(d))
    _output(writer, w, n_vocab, "output_norm.weight", d)


def _gated_delta_net(writer: GGUFWriter, w, i: int, shape: Qwen35Shape) -> None:
    d, state, v_heads = shape.n_embd, shape.gdn_state, shape.gdn_v_heads
    key_dim, value_dim = state * shape.gdn_k_heads, state * v_heads
    conv_dim = 2 * key_dim + value_dim
    writer.add_tensor(f"blk.{i}.attn_qkv.weight", w(conv_dim, d))
    writer.add_tensor(f"blk.{i}.attn_gate.weight", w(value_dim, d))
    # float32 whatever the shape's type: llama.cpp's ssm_conv reads its kernel as f32
    writer.add_tensor(f"blk.{i}.ssm_conv1d.weight", w(conv_dim, 4, std=0.5).astype(np.float32))
    writer.add_tensor(f"blk.{i}.ssm_dt.bias", np.zeros(v_heads, dtype=np.float32))
    writer.add_tensor(f"blk.{i}.ssm_a", -np.exp(w(v_heads, std=0.5).astype(np.float32)))
    writer.add_tensor(f"blk.{i}.ssm_beta.weight", w(v_heads, d))
    writer.add_tensor(f"blk.{i}.ssm_alpha.weight", w(v_heads, d))
    writer.add_tensor(f"blk.{i}.ssm_norm.weight", _ones(state))
    writer.add_tensor(f"blk.{i}.ssm_out.weight", w(d, value_dim))
