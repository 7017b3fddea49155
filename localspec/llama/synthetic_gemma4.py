"""Tiny random-weight GGUF files of Gemma 4 and of the drafter it ships: a ``gemma4`` target
and a ``gemma4-assistant`` (:func:`write_gemma4_pair`).

The target (src/models/gemma4.cpp of the pinned llama.cpp) alternates sliding-window and full
attention layers (``attention.sliding_window_pattern``, a bool per layer, the last one full)
with their own head sizes (``key_length`` / ``key_length_swa``) and rotary sizes, query and
key norms, V normed without weights, a norm after attention and after the feed-forward, a
scalar per layer (``layer_output_scale``), ``rope_freqs`` for the full layers' partial
("proportional") rotation and a final logit soft-cap.  It has an output matrix of its own
(``output.weight``, optional to the loader, which otherwise ties it to the embedding: tied,
this random target greedily repeats one token).  Its last ``attention.shared_kv_layers``
layers keep no KV of their own: they read the KV of the last sliding / full layer before them
(the ``reuse`` of src/llama-model.cpp, which wants at least two layers with KV, a sliding one
then a full one).

The assistant (src/models/gemma4-assistant.cpp) has no KV at all: run in an MTP context whose
``ctx_other`` is the target's, its sliding layers read the KV of the target's layer
``n_layer - 2`` and its full layers that of ``n_layer - 1`` (the ``share`` of
src/llama-model.cpp), so its head counts and sizes are the target's.  Its input is the
target's token embedding (the target's own table, scaled) concatenated with a target hidden
state (``embedding_length_out`` wide), projected to its smaller width
(``nextn.pre_projection``); it returns logits over its own tied embedding and a new hidden
state of the target's width (``nextn.post_projection``).  Every layer is a NextN layer
(``nextn_predict_layers`` = ``block_count``), as llama.cpp's converter writes it.

Both files carry the tokenizer of :mod:`localspec.llama.synthetic` (a SentencePiece
``llama`` model: llama.cpp's vocabulary loader does not tie the tokenizer to the
architecture), so the two vocabularies are the same.  Same seed, same weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from localspec.llama.synthetic import N_CTX_TRAIN, _add_tokenizer, vocabulary

N_EMBD, N_FF, N_HEAD, N_HEAD_KV = 64, 128, 4, 2  # the target
HEAD_SWA, HEAD_FULL = 16, 32  # head sizes of the sliding / full layers (both files)
N_SWA = 16  # the sliding window, in tokens
TARGET_SWA = (True, True, False, True, True, False)  # sliding (True) or full, per layer
SHARED_KV = 3  # the target's last layers that read an earlier layer's KV
ASSISTANT_EMBD, ASSISTANT_FF = 32, 64
ASSISTANT_SWA = (True, True, False)
PARTIAL_ROTARY = 0.25  # the full layers rotate a quarter of each head (Gemma 4's config)
SOFTCAP = 30.0
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def write_gemma4_pair(target_path: Path, assistant_path: Path, seed: int) -> tuple[Path, Path]:
    """Write a tiny ``gemma4`` target and its ``gemma4-assistant``; returns both paths."""
    w = _drawer(np.random.default_rng(seed))
    _write(Path(target_path), "gemma4", seed, lambda wr, n: _target(wr, w, n))
    _write(Path(assistant_path), "gemma4-assistant", seed, lambda wr, n: _assistant(wr, w, n))
    return Path(target_path), Path(assistant_path)


def _write(path: Path, arch: str, seed: int, body) -> None:
    tokens, scores, types = vocabulary()
    writer = GGUFWriter(str(path), arch)
    writer.add_name(f"synthetic-{arch}-{seed}")
    writer.add_size_label("1M")
    writer.add_context_length(N_CTX_TRAIN)
    _add_tokenizer(writer, "llama", (tokens, scores, types), 1)
    writer.add_chat_template(TEMPLATE)
    body(writer, len(tokens))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _drawer(rng):
    def w(*dims, std=0.15) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * std).astype(np.float32)

    return w


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _attention_keys(writer: GGUFWriter, swa: tuple[bool, ...], n_head: int) -> None:
    """The keys both loaders read: layers, heads, head and rotary sizes, window, norms."""
    writer.add_block_count(len(swa))
    writer.add_head_count(n_head)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_sliding_window_pattern(list(swa))
    writer.add_sliding_window(N_SWA)
    writer.add_key_length(HEAD_FULL)
    writer.add_value_length(HEAD_FULL)
    writer.add_key_length_swa(HEAD_SWA)
    writer.add_value_length_swa(HEAD_SWA)
    writer.add_rope_dimension_count(HEAD_FULL)
    writer.add_rope_dimension_count_swa(HEAD_SWA)
    writer.add_rope_freq_base(1e6)
    writer.add_rope_freq_base_swa(1e4)
    writer.add_layer_norm_rms_eps(1e-6)


def _rope_freqs() -> np.ndarray:
    """Frequency factors of the full layers: rotate ``PARTIAL_ROTARY`` of each head, leave
    the rest unrotated (factor 1e30), as llama.cpp's converter writes them."""
    n_rot = int(HEAD_FULL * PARTIAL_ROTARY / 2)
    return np.array([1.0] * n_rot + [1e30] * (HEAD_FULL // 2 - n_rot), dtype=np.float32)


def _embedding(w, n_vocab: int, d: int) -> np.ndarray:
    table = w(n_vocab, d, std=1.0)
    table[2] = 0.0  # the EOS logit stays 0 while the best is far above: greedy never stops early
    return table


def _target(writer: GGUFWriter, w, n_vocab: int) -> None:
    _attention_keys(writer, TARGET_SWA, N_HEAD)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_shared_kv_layers(SHARED_KV)
    writer.add_embedding_length_per_layer_input(0)  # no per-layer embeddings (as 31B)
    writer.add_final_logit_softcapping(SOFTCAP)
    writer.add_tensor("token_embd.weight", _embedding(w, n_vocab, N_EMBD))
    writer.add_tensor("rope_freqs.weight", _rope_freqs())
    n_kv = len(TARGET_SWA) - SHARED_KV
    for i, swa in enumerate(TARGET_SWA):
        head = HEAD_SWA if swa else HEAD_FULL
        _attention(writer, w, i, N_EMBD, head, with_kv=i < n_kv)
        _ffn(writer, w, i, N_EMBD, N_FF)
    writer.add_tensor("output_norm.weight", _ones(N_EMBD))
    writer.add_tensor("output.weight", _embedding(w, n_vocab, N_EMBD))


def _assistant(writer: GGUFWriter, w, n_vocab: int) -> None:
    _attention_keys(writer, ASSISTANT_SWA, N_HEAD)
    writer.add_embedding_length(ASSISTANT_EMBD)
    writer.add_embedding_length_out(N_EMBD)  # the target's hidden size
    writer.add_nextn_predict_layers(len(ASSISTANT_SWA))
    writer.add_feed_forward_length(ASSISTANT_FF)
    d = ASSISTANT_EMBD
    writer.add_tensor("token_embd.weight", _embedding(w, n_vocab, d))
    writer.add_tensor("rope_freqs.weight", _rope_freqs())
    writer.add_tensor("nextn.pre_projection.weight", w(d, 2 * N_EMBD))
    writer.add_tensor("nextn.post_projection.weight", w(N_EMBD, d))
    for i, swa in enumerate(ASSISTANT_SWA):
        _attention(writer, w, i, d, HEAD_SWA if swa else HEAD_FULL, with_kv=False)
        _ffn(writer, w, i, d, ASSISTANT_FF)
    writer.add_tensor("output_norm.weight", _ones(d))


def _attention(writer: GGUFWriter, w, i: int, d: int, head: int, with_kv: bool) -> None:
    """A layer's attention (numpy shapes: ggml's reversed); K / V only where it keeps KV."""
    writer.add_tensor(f"blk.{i}.attn_norm.weight", _ones(d))
    writer.add_tensor(f"blk.{i}.attn_q.weight", w(N_HEAD * head, d))
    writer.add_tensor(f"blk.{i}.attn_q_norm.weight", _ones(head))
    if with_kv:
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(N_HEAD_KV * head, d))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(N_HEAD_KV * head, d))
        writer.add_tensor(f"blk.{i}.attn_k_norm.weight", _ones(head))
    writer.add_tensor(f"blk.{i}.attn_output.weight", w(d, N_HEAD * head))
    writer.add_tensor(f"blk.{i}.post_attention_norm.weight", _ones(d))
    writer.add_tensor(f"blk.{i}.layer_output_scale.weight", np.full(1, 0.8, dtype=np.float32))


def _ffn(writer: GGUFWriter, w, i: int, d: int, n_ff: int) -> None:
    writer.add_tensor(f"blk.{i}.ffn_norm.weight", _ones(d))
    writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(n_ff, d))
    writer.add_tensor(f"blk.{i}.ffn_up.weight", w(n_ff, d))
    writer.add_tensor(f"blk.{i}.ffn_down.weight", w(d, n_ff))
    writer.add_tensor(f"blk.{i}.post_ffw_norm.weight", _ones(d))
