"""The engine: one GGUF model with one llama.cpp context and one sequence (seq_id 0).

Every llama.cpp call of an engine runs on its owner, a :class:`~localspec.llama.owner.LlamaThread`
(a pair shares one), whichever thread calls the method.  It keeps the list of tokens held in its KV cache, so callers can reuse
the longest common prefix and trim the rest; it never re-prefills on its own.

Built on the low-level ctypes bindings of llama-cpp-python (pinned exactly in
``pyproject.toml``): ``llama_batch_init`` / ``llama_decode`` /
``llama_get_logits_ith`` / ``llama_memory_seq_rm``.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2
import llama_cpp
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec import machine
from localspec.errors import (
    ContextOverflowError,
    EngineError,
    InvalidOptionError,
    ModelFileError,
    UnsupportedModelError,
)
from localspec.llama import amx_probe, backend
from localspec.llama.owner import LlamaThread, owned
from localspec.models.gguf_info import check_gguf_file

_backend_ready = False


CPU_BUFFERS = ("auto", "default", "no-amx", "no-extra")


@dataclass(frozen=True)
class EngineConfig:
    """How to load one model.

    n_ctx: context window in tokens.  n_gpu_layers: layers offloaded to Metal/CUDA
    (-1 = all; ignored by CPU-only builds).  n_threads: CPU threads (None = all CPUs).
    n_batch: largest batch handed to one ``llama_decode`` call, in tokens.
    flash_attn: None lets llama.cpp choose.  cpu_buffers: where CPU weights go: "auto"
    (llama.cpp's choice, except without AMX where :func:`localspec.llama.amx_probe.amx_decision`
    says AMX crashes here), "default" (llama.cpp's choice, always), "no-amx" (the fallback:
    no AMX buffer, CPU_REPACK kept), "no-extra" (no extra buffer types at all, as
    llama.cpp's ``--no-repack``).
    """

    n_ctx: int = 4096
    n_gpu_layers: int = -1
    n_threads: int | None = None
    n_batch: int = 512
    flash_attn: bool | None = None
    cpu_buffers: str = "auto"

    def __post_init__(self) -> None:
        if self.cpu_buffers not in CPU_BUFFERS:
            raise InvalidOptionError(f"cpu_buffers must be one of {', '.join(CPU_BUFFERS)}, got {self.cpu_buffers!r}")


def default_threads() -> int:
    return machine.usable_cpus()


_placement_said = False


def _say_placement_once(text: str) -> None:
    global _placement_said
    if not _placement_said:
        _placement_said = True
        print(f"localspec: {text}", file=sys.stderr)


def set_llama_log(verbose: bool) -> None:
    """Show llama.cpp's own log lines (verbose) or nothing at all."""
    logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.CRITICAL)


def _progress_reporter(load_progress: Callable[[float], None]) -> Callable:
    """Wrap a callback for llama.cpp: it must return True (go on) and never raise
    through ctypes (an exception there would be printed and read as "abort")."""

    def report(fraction: float, _user_data) -> bool:
        try:
            load_progress(min(1.0, max(0.0, float(fraction))))
        except Exception:  # a broken progress display must not stop the load
            pass
        return True

    return report


class Engine:
    """One loaded model: tokenize, token bytes, decode with chosen logits rows, trim the cache.

    Raises :class:`ModelFileError` for a missing, non-GGUF or truncated file and
    :class:`UnsupportedModelError` for a model whose KV cache cannot be trimmed
    (recurrent or hybrid architectures such as Mamba, LFM2, Falcon-H1).
    Every method may be called from any thread: the llama.cpp work runs on ``owner`` (a
    :class:`~localspec.llama.owner.LlamaThread`; a new one when None, stopped by
    :meth:`close`, else the caller's to stop), one call at a time.  Callers still must not
    interleave two users' decodes on one context (a KV cache holds one sequence).
    ``load_progress(fraction)`` (0.0 to 1.0) is called while llama.cpp reads the weights.
    """

    def __init__(
        self,
        path: str | Path,
        config: EngineConfig = EngineConfig(),
        verbose: bool = False,
        load_progress: Callable[[float], None] | None = None,
        owner: LlamaThread | None = None,
    ):
        self.path = Path(path)
        self.config = config
        self.verbose = verbose
        self.info = check_gguf_file(self.path)
        self._own_thread = owner is None
        self.owner = owner or LlamaThread()
        self._model = None
        self._ctx = None
        self._batch = None
        try:
            self._open(load_progress)
        except BaseException:
            self.close()
            raise

    @owned
    def _open(self, load_progress: Callable[[float], None] | None) -> None:
        global _backend_ready
        set_llama_log(self.verbose)
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True
        self._load(load_progress)

    def _load(self, load_progress: Callable[[float], None] | None) -> None:
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if self.config.n_gpu_layers < 0 else self.config.n_gpu_layers
        if load_progress is not None:
            callback = llama_cpp.llama_progress_callback(_progress_reporter(load_progress))
            mparams.progress_callback = callback  # `callback` stays referenced until the load returns
        placement = self._cpu_placement(mparams)
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        del placement  # llama.cpp has read the override table
        if not self._model:
            raise ModelFileError(f"llama.cpp could not load {self.path} (see its log with --verbose)")
        if llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(self._model):
            raise UnsupportedModelError(
                f"{self.path.name}: architecture {self.info.architecture!r} keeps a recurrent state "
                "that cannot be rolled back token by token, so it cannot be used for speculative decoding"
            )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))

        n_threads = self.config.n_threads or default_threads()
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.config.n_ctx
        cparams.n_batch = self.config.n_batch
        cparams.n_ubatch = self.config.n_batch
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        if self.config.flash_attn is not None:
            cparams.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
                if self.config.flash_attn
                else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise EngineError(
                f"llama.cpp could not create a context of {self.config.n_ctx} tokens for {self.path.name}"
            )
        # llama.cpp pads the context to a multiple of 256; honour the size asked for.
        self.n_ctx = min(int(llama_cpp.llama_n_ctx(self._ctx)), self.config.n_ctx)
        self.n_batch = min(int(llama_cpp.llama_n_batch(self._ctx)), int(llama_cpp.llama_n_ubatch(self._ctx)))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._piece_buf = ctypes.create_string_buffer(256)
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}
        self.cache_tokens: list[int] = []  # what the KV cache holds, position i = token i
        self.decode_s = 0.0  # seconds spent inside llama_decode since load

    def _cpu_placement(self, mparams) -> backend.NoAmxPlacement | None:
        """Apply the AMX fallback to ``mparams`` when it is wanted; sets ``self.cpu_buffers``
        to a description of where the CPU weights go."""
        wanted = self.config.cpu_buffers
        if wanted == "no-extra":
            mparams.use_extra_bufts = False
            self.cpu_buffers = "extra buffer types off"
            return None
        decision = amx_probe.amx_decision() if wanted == "auto" else None
        if wanted == "no-amx" or (decision is not None and decision.avoid_amx):
            offloaded = backend.supports_gpu_offload() and self.config.n_gpu_layers != 0
            placement = backend.apply_no_amx(mparams, self.info, offloaded)
            self.cpu_buffers = placement.describe()
            if self.verbose:
                reason = decision.status if decision is not None else "off: cpu_buffers='no-amx'"
                _say_placement_once(f"AMX {reason}; weights load {self.cpu_buffers}")
            return placement
        self.cpu_buffers = "llama.cpp default"
        return None

    # --- vocabulary -----------------------------------------------------------------

    @owned
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Text to token ids.  ``add_special`` adds BOS when the model asks for it;
        ``parse_special`` turns "<|im_start|>"-style text into its special token."""
        self._check_open()
        data = text.encode("utf-8", errors="replace")  # lone surrogates (bad terminal input) become "?"
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (special tokens give b"")."""
        piece = self._piece_cache.get(token)
        if piece is None:
            piece = self._piece(token)
        return piece

    @owned
    def _piece(self, token: int) -> bytes:
        self._check_open()
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buf, len(self._piece_buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[:n]
        else:
            piece = self._piece_buf.raw[:n]
        self._piece_cache[token] = piece
        return piece

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|>, ...); remembered per
        id, since the loop asks for every drafted token.  EngineError once closed."""
        eog = self._eog_cache.get(token)
        if eog is None:
            eog = self._eog_cache[token] = self._vocab_is_eog(token)
        return eog

    @owned
    def _vocab_is_eog(self, token: int) -> bool:
        self._check_open()
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @owned
    def eog_tokens(self) -> list[int]:
        """Every end-of-generation token id of the vocabulary, ascending (a scan of
        ``n_vocab`` ids: 0.08-0.1 s for Qwen2.5's 151,936 on a 2-core AMD EPYC).
        EngineError once closed."""
        self._check_open()
        return [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]

    @owned
    def fim_tokens(self) -> dict[str, int]:
        """The vocabulary's fill-in-the-middle tokens that exist, by llama.cpp's names
        (``pre``, ``suf``, ``mid``, ``pad``, ``rep``, ``sep``; Qwen2.5-Coder: ``<|fim_prefix|>``,
        ``<|fim_suffix|>``, ``<|fim_middle|>``, ``<|fim_pad|>``, ``<|repo_name|>``,
        ``<|file_sep|>``); empty for a model without them.  EngineError once closed."""
        self._check_open()
        found = {}
        for name in ("pre", "suf", "mid", "pad", "rep", "sep"):
            token = int(getattr(llama_cpp, f"llama_vocab_fim_{name}")(self._vocab))
            if token >= 0:
                found[name] = token
        return found

    @owned
    def token_text(self, token: int) -> str:
        """The vocabulary's text of ``token`` (special tokens by name); EngineError once closed."""
        self._check_open()
        return llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")

    @owned
    def chat_tokens(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """Render the messages with the chat template and tokenize the result.

        Only the template's own text may produce special tokens: message contents are
        tokenized as plain text, so a user typing "<|im_start|>system" cannot forge a
        role.  (When the template rewrites contents so they cannot be located, the whole
        rendering is tokenized with special tokens parsed, as llama-cpp-python does.)
        """
        markers = [f"\ue000{i}\ue001" for i in range(len(messages))]
        masked = [{**m, "content": mark} for m, mark in zip(messages, markers)]
        rendered = self.render_chat(masked, tools)
        if not all(rendered.count(mark) == 1 for mark in markers):
            return self.tokenize(self.render_chat(messages, tools), add_special=False, parse_special=True)
        tokens: list[int] = []
        rest = rendered
        for message, mark in zip(messages, markers):
            head, rest = rest.split(mark, 1)
            tokens += self.tokenize(head, add_special=False, parse_special=True) if head else []
            tokens += (
                self.tokenize(message["content"], add_special=False, parse_special=False) if message["content"] else []
            )
        return tokens + (self.tokenize(rest, add_special=False, parse_special=True) if rest else [])

    @owned
    def render_chat(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """Render OpenAI-style messages with the GGUF's own ``tokenizer.chat_template``
        (llama-cpp-python's Jinja2 formatter), ending with the assistant's prompt.
        Raises InvalidOptionError when the template rejects the messages."""
        template = self.info.chat_template
        if not template:
            raise UnsupportedModelError(
                f"{self.path.name} has no tokenizer.chat_template; use generate() with raw text"
            )
        bos = llama_cpp.llama_vocab_bos(self._vocab)
        eos = llama_cpp.llama_vocab_eos(self._vocab)
        formatter = Jinja2ChatFormatter(
            template,
            eos_token=self.token_text(eos) if eos >= 0 else "",
            bos_token=self.token_text(bos) if bos >= 0 else "",
        )
        try:
            return formatter(messages=messages, tools=tools).prompt
        except (jinja2.TemplateError, ValueError, TypeError) as exc:
            raise InvalidOptionError(f"{self.path.name}'s chat template rejected these messages: {exc}") from None

    # --- decoding ---------------------------------------------------------------------

    @owned
    def decode(self, tokens: Sequence[int], logits_rows: Sequence[int] = (), copy: bool = True) -> np.ndarray:
        """Append ``tokens`` to the KV cache and return the logits of the chosen rows.

        Args:
            tokens: ids placed at positions ``len(cache_tokens) ...``.
            logits_rows: indices into ``tokens`` whose next-token logits are wanted,
                ascending.
            copy: False returns, where the tokens fit one batch, a read-only view of
                llama.cpp's own output buffer instead of a copy (a verify batch of 9
                rows of a 152k vocabulary is 5 MB): valid only until the next decode.

        Returns:
            float32 array ``(len(logits_rows), n_vocab)``, row j for ``logits_rows[j]``.

        Raises:
            ContextOverflowError: the tokens do not fit into ``n_ctx``.
            EngineError: llama_decode failed (the cache is left as it was before the call
                for the failing chunk).
        """
        self._check_open()
        n_past = len(self.cache_tokens)
        if n_past + len(tokens) > self.n_ctx:
            raise ContextOverflowError(
                f"{n_past + len(tokens)} tokens do not fit into the context of {self.n_ctx} tokens"
            )
        wanted = list(logits_rows)
        step = self.n_batch
        if not copy and len(tokens) <= step:
            return self._decode_view(tokens, n_past, wanted)
        out = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        try:
            for start in range(0, len(tokens), step):
                chunk = tokens[start : start + step]
                in_chunk = [(j, r - start) for j, r in enumerate(wanted) if start <= r < start + len(chunk)]
                self._decode_chunk(chunk, n_past + start, [r for _, r in in_chunk])
                for j, r in in_chunk:
                    out[j] = self._logits_row(r)
                self.cache_tokens.extend(int(t) for t in chunk)
        except BaseException:
            # An error or Ctrl-C may land after llama_decode stored a chunk but before
            # cache_tokens knows of it: drop whatever the list does not account for.
            llama_cpp.llama_memory_seq_rm(self._memory, 0, len(self.cache_tokens), -1)
            raise
        return out

    def _decode_view(self, tokens: Sequence[int], n_past: int, wanted: list[int]) -> np.ndarray:
        try:
            self._decode_chunk(tokens, n_past, wanted)
        except BaseException:
            llama_cpp.llama_memory_seq_rm(self._memory, 0, n_past, -1)
            raise
        self.cache_tokens.extend(int(t) for t in tokens)
        if not wanted:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = llama_cpp.llama_get_logits(self._ctx)  # the output rows, in batch order
        if not ptr:
            raise EngineError("llama.cpp returned no logits for the batch")
        view = np.ctypeslib.as_array(ptr, shape=(len(wanted), self.n_vocab))
        view.flags.writeable = False
        return view

    def _decode_chunk(self, tokens: Sequence[int], pos0: int, rows: Sequence[int]) -> None:
        batch = self._batch
        batch.n_tokens = len(tokens)
        flagged = set(rows)
        for i, tok in enumerate(tokens):
            batch.token[i] = tok
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i in flagged
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, batch)
        self.decode_s += time.perf_counter() - t0
        if rc != 0:
            raise EngineError(f"llama_decode failed with code {rc} at position {pos0} ({len(tokens)} tokens)")

    def _logits_row(self, i: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, i)
        if not ptr:
            raise EngineError(f"llama.cpp returned no logits for batch row {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    @owned
    def trim(self, n_keep: int) -> None:
        """Remove every cached position >= ``n_keep`` (``llama_memory_seq_rm``)."""
        if n_keep >= len(self.cache_tokens):
            return
        if not llama_cpp.llama_memory_seq_rm(self._memory, 0, n_keep, -1):
            raise UnsupportedModelError(
                f"{self.path.name}: llama.cpp refused to trim the KV cache at position {n_keep}"
            )
        del self.cache_tokens[n_keep:]

    @owned
    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Trim the cache to its longest common prefix with ``tokens``; return its length."""
        limit = min(len(tokens), len(self.cache_tokens))
        if self.cache_tokens[:limit] == list(tokens[:limit]):  # the usual case, at C speed
            n = limit
        else:
            differ = np.flatnonzero(np.asarray(self.cache_tokens[:limit]) != np.asarray(tokens[:limit]))
            n = int(differ[0])
        self.trim(n)
        return n

    def _check_open(self) -> None:
        if not self._ctx:
            raise EngineError(f"{self.path.name}: the model is closed")

    def close(self) -> None:
        """Free the context and the model (on the owner thread); stop the owner thread if
        this engine made it.  Safe to call twice."""
        if self.owner.alive:
            self.owner.run(self._free)
        if self._own_thread:
            self.owner.stop()

    def _free(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        # A finalizer must not wait for another thread: queue the free, or leave it to exit.
        owner = getattr(self, "owner", None)
        if owner is not None and owner.alive and not sys.is_finalizing():
            owner.post(self._free)
            if self._own_thread:
                owner.post(owner.stop)
