"""The engine: one GGUF model with one llama.cpp context holding one or more sequences.

Every llama.cpp call of an engine runs on its owner, a :class:`~localspec.llama.owner.LlamaThread`
(a pair shares one), whichever thread calls the method.  It keeps the list of tokens held in its KV
cache, so callers can reuse the longest common prefix and trim the rest; it never re-prefills on its
own.

Built on the low-level ctypes bindings of llama-cpp-python (pinned exactly in
``pyproject.toml``): ``llama_batch_init`` / ``llama_decode`` /
``llama_get_logits_ith`` / ``llama_memory_seq_rm``.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jinja2
import llama_cpp
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec.errors import (
    ContextOverflowError,
    EngineError,
    InvalidOptionError,
    ModelFileError,
    UnsupportedModelError,
)
from localspec.llama import amx_probe, backend
from localspec.llama.engine_config import (  # noqa: F401 (others import EngineConfig from here)
    CPU_BUFFERS,
    EngineConfig,
    _progress_reporter,
    default_threads,
    set_llama_log,
)
from localspec.llama.owner import LlamaThread, owned
from localspec.llama.sequence import CellLedger, common_prefix, output_rows, pack_batch
from localspec.models.gguf_info import check_gguf_file

_backend_ready = False
_placement_said = False


def _say_placement_once(text: str) -> None:
    global _placement_said
    if not _placement_said:
        _placement_said = True
        print(f"localspec: {text}", file=sys.stderr)


class Engine:
    """One loaded model: tokenize, token bytes, decode with chosen logits rows, trim the cache.

    Raises :class:`ModelFileError` for a missing, non-GGUF or truncated file and
    :class:`UnsupportedModelError` for a model whose KV cache cannot be trimmed
    (recurrent or hybrid architectures such as Mamba, LFM2, Falcon-H1).
    With ``config.n_seq_max`` > 1 the context holds that many sequences (seq ids 0 to
    n_seq_max - 1) in one unified KV cache of ``n_ctx`` cells shared by all of them; the
    methods that touch the cache take a ``seq`` id (0 by default), and
    :meth:`decode_batch` decodes several sequences in one ``llama_decode``.
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
        self.chat_template_override: str | None = (
            None  # replaces the GGUF's tokenizer.chat_template
        )
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
        mparams.n_gpu_layers = (
            0x7FFFFFFF if self.config.n_gpu_layers < 0 else self.config.n_gpu_layers
        )
        if load_progress is not None:
            callback = llama_cpp.llama_progress_callback(_progress_reporter(load_progress))
            mparams.progress_callback = (
                callback  # `callback` stays referenced until the load returns
            )
        placement = self._cpu_placement(mparams)
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        del placement  # llama.cpp has read the override table
        if not self._model:
            raise ModelFileError(
                f"llama.cpp could not load {self.path} (see its log with --verbose)"
            )
        if llama_cpp.llama_model_is_recurrent(self._model) or llama_cpp.llama_model_is_hybrid(
            self._model
        ):
            raise UnsupportedModelError(
                f"{self.path.name}: architecture {self.info.architecture!r} keeps a recurrent "
                "state "
                "that cannot be rolled back token by token, so it cannot be used for speculative "
                "decoding"
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
        cparams.n_seq_max = self.config.n_seq_max
        cparams.kv_unified = (
            self.config.n_seq_max > 1
        )  # one pool of cells: a long conversation may use all of it
        if self.config.flash_attn is not None:
            cparams.flash_attn_type = (
                llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
                if self.config.flash_attn
                else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise EngineError(
                f"llama.cpp could not create a context of {self.config.n_ctx} tokens for "
                f"{self.path.name}"
            )
        # llama.cpp pads the context to a multiple of 256; honour the size asked for.
        self.n_ctx = min(int(llama_cpp.llama_n_ctx(self._ctx)), self.config.n_ctx)
        self.n_batch = min(
            int(llama_cpp.llama_n_batch(self._ctx)), int(llama_cpp.llama_n_ubatch(self._ctx))
        )
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._caches: list[list[int]] = [
            [] for _ in range(self.config.n_seq_max)
        ]  # per seq: position i = token i
        self._cells = CellLedger(self.config.n_seq_max)
        self.idle_sequences: Callable[[], list[int]] = (
            lambda: []
        )  # seqs whose cells may be freed, oldest first
        self.batcher = (
            None  # what shares this engine's decodes: an EngineSequence's Batcher; none here
        )
        self._piece_buf = ctypes.create_string_buffer(256)
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}
        self.decode_s = 0.0  # seconds spent inside llama_decode since load
        self.last_batch_tokens = 0  # tokens of the latest llama_decode call (all sequences)

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
    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        """Text to token ids.  ``add_special`` adds BOS when the model asks for it;
        ``parse_special`` turns "<|im_start|>"-style text into its special token."""
        self._check_open()
        data = text.encode(
            "utf-8", errors="replace"
        )  # lone surrogates (bad terminal input) become "?"
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(
            self._vocab, data, len(data), buf, n_max, add_special, parse_special
        )
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buf, n_max, add_special, parse_special
            )
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
        n = llama_cpp.llama_token_to_piece(
            self._vocab, token, self._piece_buf, len(self._piece_buf), 0, False
        )
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

    @property
    def chat_template(self) -> str:
        """The chat template in use: ``chat_template_override``, else the GGUF's own."""
        return self.chat_template_override or self.info.chat_template

    @owned
    def chat_tokens(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,
    ) -> list[int]:
        """Render the messages with the chat template and tokenize the result
        (``template_kwargs``: extra template variables, e.g. ``enable_thinking``).

        Only the template's own text may produce special tokens: message contents are
        tokenized as plain text, so a user typing "<|im_start|>system" cannot forge a
        role.  (When the template rewrites contents so they cannot be located, the whole
        rendering is tokenized with special tokens parsed, as llama-cpp-python does.)
        """
        markers = [f"\ue000{i}\ue001" for i in range(len(messages))]
        masked = [{**m, "content": mark} for m, mark in zip(messages, markers)]
        rendered = self.render_chat(masked, tools, template_kwargs)
        if not all(rendered.count(mark) == 1 for mark in markers):
            rendered = self.render_chat(messages, tools, template_kwargs)
            return self.tokenize(rendered, add_special=False, parse_special=True)
        tokens: list[int] = []
        rest = rendered
        for message, mark in zip(messages, markers):
            head, rest = rest.split(mark, 1)
            tokens += self.tokenize(head, add_special=False, parse_special=True) if head else []
            tokens += (
                self.tokenize(message["content"], add_special=False, parse_special=False)
                if message["content"]
                else []
            )
        return tokens + (self.tokenize(rest, add_special=False, parse_special=True) if rest else [])

    @owned
    def render_chat(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,
    ) -> str:
        """Render OpenAI-style messages with :attr:`chat_template` (llama-cpp-python's
        Jinja2 formatter), ending with the assistant's prompt; ``template_kwargs`` are extra
        template variables.  Raises InvalidOptionError when the template rejects the messages."""
        template = self.chat_template
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
            return formatter(messages=messages, tools=tools, **(template_kwargs or {})).prompt
        except (jinja2.TemplateError, ValueError, TypeError) as exc:
            raise InvalidOptionError(
                f"{self.path.name}'s chat template rejected these messages: {exc}"
            ) from None

    # --- decoding ---------------------------------------------------------------------

    @property
    def cache_tokens(self) -> list[int]:
        """What sequence 0's KV cache holds, position i = token i (see :meth:`seq_tokens`)."""
        return self._caches[0]

    def seq_tokens(self, seq: int) -> list[int]:
        """What sequence ``seq``'s cache holds (the engine's own list: do not modify)."""
        return self._caches[seq]

    @property
    def cells_used(self) -> int:
        """KV cells held by all sequences together (a cell shared by several counts once)."""
        return self._cells.used

    def cells_held(self, seqs: Sequence[int]) -> int:
        """KV cells held by the sequences ``seqs`` together (a shared cell counts once)."""
        return self._cells.held(seqs)

    def _note_held(
        self, seq: int, tokens: Sequence[int]
    ) -> None:  # llama.cpp wrote them after seq's cells
        self._caches[seq].extend(int(t) for t in tokens)
        self._cells.extend(seq, len(tokens))

    @owned
    def copy_prefix(self, src: int, dst: int, n: int) -> int:
        """Make sequence ``dst`` hold the first ``n`` cells of ``src`` (shared, not copied:
        ``llama_memory_seq_cp`` in the unified cache), dropping what it held past its common prefix
        with them; its length after."""
        source = self._caches[src][:n]
        keep = common_prefix(self._caches[dst], source)
        self.trim(keep, dst)
        if len(source) > keep:
            llama_cpp.llama_memory_seq_cp(self._memory, src, dst, keep, len(source))
            self._caches[dst].extend(source[keep:])
            self._cells.copy(src, dst, keep, len(source))
        return len(self._caches[dst])

    @owned
    def decode(
        self,
        tokens: Sequence[int],
        logits_rows: Sequence[int] = (),
        copy: bool = True,
        seq: int = 0,
    ) -> np.ndarray:
        """Append ``tokens`` to sequence ``seq``'s KV cache and return the logits of the chosen
        rows.

        Args:
            tokens: ids placed at positions ``len(seq_tokens(seq)) ...``.
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
        if not copy and len(tokens) <= self.n_batch:
            return self.decode_batch([(seq, tokens, logits_rows)], copy=False)[0]
        wanted = list(logits_rows)
        out = np.empty((len(wanted), self.n_vocab), dtype=np.float32)
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            rows = [r - start for r in wanted if start <= r < start + len(chunk)]
            first = next((j for j, r in enumerate(wanted) if r >= start), len(wanted))
            out[first : first + len(rows)] = self.decode_batch([(seq, chunk, rows)], copy=False)[0]
        return out

    @owned
    def decode_batch(
        self, parts: Sequence[tuple[int, Sequence[int], Sequence[int]]], copy: bool = True
    ) -> list:
        """Decode several sequences' tokens together: ``parts`` is ``[(seq, tokens,
        logits_rows)]``, at most ``n_batch`` tokens in all per llama_decode call (more are
        split between calls).  Returns one float32 array ``(len(logits_rows), n_vocab)``
        per part.  ``copy=False`` gives read-only views of llama.cpp's output buffer when
        everything fits one call (valid until the next decode).  Raises as :meth:`decode`;
        on an error every sequence keeps only what it held before the failing call."""
        self._check_open()
        parts = [(seq, list(tokens), list(rows)) for seq, tokens, rows in parts]
        self._make_room(sum(len(t) for _, t, _ in parts), {seq for seq, _, _ in parts})
        for seq, tokens, _ in parts:
            if len(self._caches[seq]) + len(tokens) > self.n_ctx:
                raise ContextOverflowError(
                    f"{len(self._caches[seq]) + len(tokens)} tokens do not fit into the context "
                    f"of {self.n_ctx} tokens"
                )
        calls = pack_batch(parts, self.n_batch)
        if len(calls) == 1 and not copy:
            return self._decode_call(calls[0], views=True)
        out = [np.empty((len(rows), self.n_vocab), dtype=np.float32) for _, _, rows in parts]
        for call in calls:
            for (part, offset, _, _), rows in zip(call, self._decode_call(call, views=False)):
                out[part][offset : offset + len(rows)] = rows
        return out

    def _make_room(self, n_new: int, busy: set[int]) -> None:
        """Free idle sequences' cells (oldest first) until ``n_new`` more fit the unified cache."""
        for seq in self.idle_sequences():
            if self.cells_used + n_new <= self.n_ctx:
                return
            if seq not in busy:
                self.trim(0, seq)

    def _decode_call(self, call: list, views: bool) -> list:
        """One llama_decode of ``call`` = [(part, row offset, seq, (tokens, rows in tokens))];
        the logits rows of each entry, as views or copies."""
        batch, i = self._batch, 0
        for _, _, seq, (tokens, rows) in call:
            pos0, wanted = len(self._caches[seq]), set(rows)
            for j, tok in enumerate(tokens):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos0 + j, 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = j in wanted
                i += 1
        batch.n_tokens = i
        try:
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(self._ctx, batch)
            self.decode_s += time.perf_counter() - t0
            self.last_batch_tokens = i
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc} ({i} tokens)")
            rows = self._output_rows([len(rows) for *_, (_, rows) in call], views)
            for _, _, seq, (tokens, _) in call:
                self._note_held(seq, tokens)
        except BaseException:
            # An error or Ctrl-C may land after llama_decode stored the tokens but before
            # the lists know of them: drop whatever a list does not account for.
            for _, _, seq, _ in call:
                llama_cpp.llama_memory_seq_rm(self._memory, seq, len(self._caches[seq]), -1)
            raise
        return rows

    def _output_rows(self, counts: list[int], views: bool) -> list[np.ndarray]:
        return output_rows(self._ctx, self.n_vocab, counts, views)

    @owned
    def trim(self, n_keep: int, seq: int = 0) -> None:
        """Remove every cached position >= ``n_keep`` of sequence ``seq``
        (``llama_memory_seq_rm``)."""
        cache = self._caches[seq]
        if n_keep >= len(cache):
            return
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq, n_keep, -1):
            raise UnsupportedModelError(
                f"{self.path.name}: llama.cpp refused to trim the KV cache at position {n_keep}"
            )
        del cache[n_keep:]
        self._cells.trim(seq, n_keep)

    @owned
    def reuse_prefix(self, tokens: Sequence[int], seq: int = 0) -> int:
        """Trim sequence ``seq``'s cache to its longest common prefix with ``tokens``; return its
        length."""
        cache = self._caches[seq]
        n = common_prefix(cache, tokens)
        self.trim(n, seq)
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
