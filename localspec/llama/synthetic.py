"""Tiny random-weight llama GGUF files written with the ``gguf`` package.

Same seed -> same weights (a draft that agrees with the target), other seed -> a draft
that disagrees.  A file takes a few milliseconds to write and to load.  Used by the
test suite and by the AMX probe (:mod:`localspec.llama.amx_probe`), which quantizes one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

N_EMBD, N_HEAD, N_LAYER, N_FF, N_CTX_TRAIN = 64, 4, 2, 128, 2048
WORDS = [
    "hello",
    "world",
    "the",
    "a",
    "code",
    "def",
    "return",
    "print",
    "if",
    "else",
    "for",
    "in",
    "is",
    "not",
    "and",
    "or",
    "true",
    "false",
    "none",
    "x",
    "y",
    "z",
    "1",
    "2",
    "3",
]


def vocabulary(extra_words: int = 0) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style vocab: <unk>, <s>, </s>, 256 byte tokens, letters, words."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [chr(c) for c in range(ord("0"), ord("9") + 1)]
    pieces += ["\u2581" + w for w in WORDS] + [f"\u2581w{i}" for i in range(extra_words)]
    tokens += pieces
    types += [TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


def write_model(
    path: Path,
    seed: int,
    *,
    logit_scale: float = 1.0,
    extra_words: int = 0,
    vocab_override: list[str] | None = None,
    bos_id: int = 1,
    size_label: str = "1M",
    basename: str = "synthetic",
    architecture: str = "llama",
    tokenizer_model: str = "llama",
    n_embd: int = N_EMBD,
    n_ff: int = N_FF,
    chat_template: str | None = None,
    added_tokens: tuple[str, ...] = (),
) -> Path:
    """Write a 2-layer llama with random float32 weights; returns ``path``.  ``size_label``
    is the parameter count the header claims (compatibility compares it); ``architecture``
    and ``tokenizer_model`` only change the header (such files are for metadata checks).
    ``n_embd`` / ``n_ff``: hidden and feed-forward sizes (multiples of 256 let llama.cpp
    quantize the weights to K-quants).  ``chat_template``: the Jinja template to store
    (default: a one-line ``role: content`` template).  ``added_tokens``: strings appended to
    the vocabulary as user-defined tokens (one token each, as ``<think>`` / ``</think>`` in
    Qwen3's vocabulary); such a vocabulary adds no space prefix to text."""
    tokens, scores, types = vocabulary(extra_words)
    if vocab_override is not None:
        tokens = vocab_override
    if added_tokens:
        tokens = list(tokens) + list(added_tokens)
        scores = list(scores) + [0.0] * len(added_tokens)
        types = list(types) + [int(TokenType.USER_DEFINED)] * len(added_tokens)
    writer = GGUFWriter(str(path), architecture)
    writer.add_name(f"synthetic-{seed}")
    writer.add_basename(basename)
    writer.add_size_label(size_label)
    _add_shape(writer, n_embd, n_ff)
    _add_tokenizer(writer, tokenizer_model, (tokens, scores, types), bos_id)
    if added_tokens:  # text tokenizes as a BPE vocabulary's does, without a leading "▁"
        writer.add_add_space_prefix(False)
    writer.add_chat_template(
        chat_template
        or "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    _add_weights(writer, np.random.default_rng(seed), len(tokens), n_embd, n_ff, logit_scale)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_shape(writer: GGUFWriter, n_embd: int, n_ff: int) -> None:
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // N_HEAD)


def _add_tokenizer(
    writer: GGUFWriter, model: str, vocab: tuple[list[str], list[float], list[int]], bos_id: int
):
    tokens, scores, types = vocab
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(bos_id)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def _add_weights(
    writer: GGUFWriter, rng, n_vocab: int, n_embd: int, n_ff: int, logit_scale: float
) -> None:
    """Random float32 weights, drawn in one fixed order (same seed, same weights)."""

    def w(*shape, std=0.15):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    writer.add_tensor("token_embd.weight", w(n_vocab, n_embd, std=1.0))
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(n_embd, n_ff))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    output = w(n_vocab, n_embd, std=logit_scale)
    output[2] = 0.0  # EOS logit stays 0 while the best logit is ~+15: greedy never stops early
    writer.add_tensor("output.weight", output)
