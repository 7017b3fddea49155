"""Tiny random-weight GGUF files of the architectures that keep a recurrent state: LFM2 (short
convolutions beside attention, a hybrid llama.cpp rolls back with recurrent-state snapshots,
``n_rs_seq``) and Mamba2 (recurrent only, rolled back from a saved state).  The tensors are the
ones llama.cpp's loader asks for (src/models/lfm2.cpp and mamba2.cpp of the pinned llama.cpp,
shapes as ``create_tensor`` gives them, outermost last); the tokenizer and chat template are
those of :mod:`localspec.llama.synthetic`.  Same seed, same weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from localspec.llama.synthetic import N_CTX_TRAIN, _add_tokenizer, vocabulary

HYBRID_LAYERS = ("conv", "attention", "conv")  # LFM2: a layer without KV heads is a convolution
L_CACHE = 3  # LFM2's short convolution: the kernel's length
N_EMBD, N_HEAD, N_FF = 64, 4, 128
MAMBA_LAYERS, D_STATE, D_CONV, N_GROUP, HEAD_DIM = 2, 16, 4, 1, 16
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def write_hybrid_model(path: Path, seed: int, architecture: str = "lfm2") -> Path:
    """Write a tiny ``lfm2`` (hybrid) or ``mamba2`` (recurrent) model; returns ``path``."""
    writers = {"lfm2": _lfm2, "mamba2": _mamba2}
    if architecture not in writers:
        raise ValueError(f"no synthetic {architecture!r}; one of {', '.join(writers)}")
    tokens, scores, types = vocabulary()
    writer = GGUFWriter(str(path), architecture)
    writer.add_name(f"synthetic-{architecture}-{seed}")
    writer.add_size_label("1M")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    _add_tokenizer(writer, "llama", (tokens, scores, types), 1)
    writer.add_chat_template(TEMPLATE)
    rng = np.random.default_rng(seed)
    writers[architecture](writer, lambda *shape, std=0.15: _w(rng, shape, std), len(tokens))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _w(rng, shape, std) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _output(writer: GGUFWriter, w, n_vocab: int, norm_name: str) -> None:
    writer.add_tensor(norm_name, _ones(N_EMBD))
    output = w(n_vocab, N_EMBD, std=1.0)
    output[2] = 0.0  # the EOS logit stays 0 while the best is far above: greedy never stops early
    writer.add_tensor("output.weight", output)


def _lfm2(writer: GGUFWriter, w, n_vocab: int) -> None:
    n_layer = len(HYBRID_LAYERS)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv([N_HEAD if kind == "attention" else 0 for kind in HYBRID_LAYERS])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_uint32(f"{writer.arch}.shortconv.l_cache", L_CACHE)
    writer.add_tensor("token_embd.weight", w(n_vocab, N_EMBD, std=1.0))
    for i, kind in enumerate(HYBRID_LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
        if kind == "attention":
            head = N_EMBD // N_HEAD
            writer.add_tensor(f"blk.{i}.attn_q_norm.weight", _ones(head))
            writer.add_tensor(f"blk.{i}.attn_k_norm.weight", _ones(head))
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                writer.add_tensor(f"blk.{i}.{name}.weight", w(N_EMBD, N_EMBD))
        else:
            writer.add_tensor(f"blk.{i}.shortconv.conv.weight", w(N_EMBD, L_CACHE, std=0.5))
            writer.add_tensor(f"blk.{i}.shortconv.in_proj.weight", w(3 * N_EMBD, N_EMBD))
            writer.add_tensor(f"blk.{i}.shortconv.out_proj.weight", w(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", _ones(N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(N_EMBD, N_FF))
    _output(writer, w, n_vocab, "token_embd_norm.weight")


def _mamba2(writer: GGUFWriter, w, n_vocab: int) -> None:
    d_inner = 2 * N_EMBD
    n_head = d_inner // HEAD_DIM
    writer.add_block_count(MAMBA_LAYERS)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_ssm_conv_kernel(D_CONV)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(D_STATE)
    writer.add_ssm_time_step_rank(n_head)
    writer.add_ssm_group_count(N_GROUP)
    writer.add_tensor("token_embd.weight", w(n_vocab, N_EMBD, std=1.0))
    d_in_proj = 2 * d_inner + 2 * N_GROUP * D_STATE + n_head
    conv_dim = d_inner + 2 * N_GROUP * D_STATE
    for i in range(MAMBA_LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
        writer.add_tensor(f"blk.{i}.ssm_in.weight", w(d_in_proj, N_EMBD))
        writer.add_tensor(f"blk.{i}.ssm_conv1d.weight", w(conv_dim, D_CONV, std=0.5))
        writer.add_tensor(f"blk.{i}.ssm_conv1d.bias", np.zeros(conv_dim, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ssm_dt.bias", np.zeros(n_head, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ssm_a", -np.exp(w(n_head, 1, std=0.5)))
        writer.add_tensor(f"blk.{i}.ssm_d", _ones(n_head).reshape(n_head, 1))
        writer.add_tensor(f"blk.{i}.ssm_norm.weight", _ones(d_inner).reshape(N_GROUP, -1))
        writer.add_tensor(f"blk.{i}.ssm_out.weight", w(N_EMBD, d_inner))
    _output(writer, w, n_vocab, "output_norm.weight")
