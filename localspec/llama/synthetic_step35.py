"""A tiny random-weight ``step35`` GGUF (Step-3.5's layout) with several MTP heads: the
architecture of the pinned llama.cpp whose NextN blocks chain, one head per draft token
(``nextn_predict_layers`` > 1; llama.cpp's ``draft-mtp`` moves ``nextn_layer_offset`` from
head to head).  Qwen3.5 ships one MTP block; this is the test model of the chained kind.

The tensors are the ones src/models/step35.cpp asks for: attention layers (a sliding window on
some of them, ``attention.sliding_window_pattern`` a bool per layer; query and key norms; the
full layers rotate half of each head, as llama.cpp reads Step-3.5's RoPE), a dense
feed-forward in every layer (its MoE tensors are optional), then the MTP blocks after the
trunk, each a whole decoder layer plus ``nextn.eh_proj`` / ``enorm`` / ``hnorm`` /
``shared_head_norm``, reading the trunk's output matrix.  The window is wider than the tests'
contexts, so no cell falls out of it.  The tokenizer and chat template are those of
:mod:`localspec.llama.synthetic`.  Same seed, same weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from localspec.llama.synthetic import N_CTX_TRAIN, _add_tokenizer, vocabulary

N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD = 64, 128, 4, 2, 16
TRUNK_SWA = (True, False)  # the trunk's layers: sliding (True) or full
N_NEXTN = 3  # MTP heads after the trunk
N_SWA = 4096  # the sliding window, in tokens: wider than the tests' contexts
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def write_step35_model(path: Path, seed: int, heads: int = N_NEXTN) -> Path:
    """Write a tiny ``step35`` with ``heads`` MTP blocks; returns ``path``."""
    rng = np.random.default_rng(seed)

    def w(*dims, std=0.15) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * std).astype(np.float32)

    tokens, scores, types = vocabulary()
    n_layer = len(TRUNK_SWA) + heads
    writer = GGUFWriter(str(path), "step35")
    writer.add_name(f"synthetic-step35-{seed}")
    writer.add_size_label("1M")
    writer.add_context_length(N_CTX_TRAIN)
    _add_tokenizer(writer, "llama", (tokens, scores, types), 1)
    writer.add_chat_template(TEMPLATE)
    _keys(writer, n_layer, heads)
    writer.add_tensor("token_embd.weight", w(len(tokens), N_EMBD, std=1.0))
    for i in range(n_layer):
        _decoder_layer(writer, w, i)
        if i >= len(TRUNK_SWA):
            _nextn(writer, w, i)
    writer.add_tensor("output_norm.weight", _ones(N_EMBD))
    output = w(len(tokens), N_EMBD, std=1.0)
    output[2] = 0.0  # the EOS logit stays 0 while the best is far above: greedy never stops
    writer.add_tensor("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _keys(writer: GGUFWriter, n_layer: int, heads: int) -> None:
    writer.add_block_count(n_layer)
    writer.add_uint32(f"{writer.arch}.nextn_predict_layers", heads)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_expert_feed_forward_length(0)  # read by the loader; no layer has experts
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(HEAD)
    writer.add_value_length(HEAD)
    writer.add_rope_dimension_count(HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_sliding_window(N_SWA)
    # the MTP blocks are full-attention layers, as Step-3.5's are
    writer.add_sliding_window_pattern([*TRUNK_SWA, *([False] * heads)])


def _decoder_layer(writer: GGUFWriter, w, i: int) -> None:
    writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_q_norm.weight", _ones(HEAD))
    writer.add_tensor(f"blk.{i}.attn_k_norm.weight", _ones(HEAD))
    writer.add_tensor(f"blk.{i}.attn_q.weight", w(N_HEAD * HEAD, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_k.weight", w(N_HEAD_KV * HEAD, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_v.weight", w(N_HEAD_KV * HEAD, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_output.weight", w(N_EMBD, N_HEAD * HEAD))
    writer.add_tensor(f"blk.{i}.ffn_norm.weight", _ones(N_EMBD))
    writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(N_FF, N_EMBD))
    writer.add_tensor(f"blk.{i}.ffn_up.weight", w(N_FF, N_EMBD))
    writer.add_tensor(f"blk.{i}.ffn_down.weight", w(N_EMBD, N_FF))


def _nextn(writer: GGUFWriter, w, i: int) -> None:
    writer.add_tensor(f"blk.{i}.nextn.eh_proj.weight", w(N_EMBD, 2 * N_EMBD))
    writer.add_tensor(f"blk.{i}.nextn.enorm.weight", _ones(N_EMBD))
    writer.add_tensor(f"blk.{i}.nextn.hnorm.weight", _ones(N_EMBD))
    writer.add_tensor(f"blk.{i}.nextn.shared_head_norm.weight", _ones(N_EMBD))


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)
