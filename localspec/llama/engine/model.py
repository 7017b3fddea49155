"""The :class:`Engine` itself: load the GGUF model and create its llama.cpp context (the AMX
placement of the CPU weights included), check it is open, free both; its other methods come from
the mixins of :mod:`.vocabulary`, :mod:`.chat`, :mod:`.decode` and :mod:`.kv_cache`."""

from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from localspec.errors import EngineError, ModelFileError, UnsupportedModelError
from localspec.llama import amx_probe, backend
from localspec.llama.assistant import AssistantHead
from localspec.llama.engine.chat import ChatTemplate
from localspec.llama.engine.decode import Decoding
from localspec.llama.engine.kv_cache import KvCache
from localspec.llama.engine.rollback import SNAPSHOTS, Rollback
from localspec.llama.engine.vocabulary import Vocabulary
from localspec.llama.engine_config import (
    EngineConfig,
    _progress_reporter,
    default_threads,
    set_llama_log,
)
from localspec.llama.mtp import MtpHead
from localspec.llama.owner import LlamaThread, owned
from localspec.llama.sequence import CellLedger
from localspec.models.gguf_info import check_gguf_file

_backend_ready = False
log = logging.getLogger("localspec.engine")
_placement_said = False


def _say_placement_once(text: str) -> None:
    global _placement_said
    if not _placement_said:
        _placement_said = True
        print(f"localspec: {text}", file=sys.stderr)


class Engine(Vocabulary, ChatTemplate, Decoding, KvCache, Rollback):
    """One loaded model: tokenize, token bytes, decode with chosen logits rows, trim the cache.

    Raises :class:`ModelFileError` for a missing, non-GGUF or truncated file.  A model that
    keeps a recurrent state (hybrid or recurrent architectures such as Qwen3.5, LFM2, Mamba2)
    goes back to an earlier position as :mod:`~localspec.llama.engine.rollback` says.
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
        self._load_model(load_progress)
        self._make_context()

    def _load_model(self, load_progress: Callable[[float], None] | None) -> None:
        """Load the weights (``self._model``) and find the vocabulary (``self.n_vocab``)."""
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = (
            0x7FFFFFFF if self.config.n_gpu_layers < 0 else self.config.n_gpu_layers
        )
        if load_progress is not None:
            callback = llama_cpp.llama_progress_callback(_progress_reporter(load_progress))
            mparams.progress_callback = (
                callback  # `callback` stays referenced until the load returns
            )
        mparams.load_mtp = self.config.load_mtp
        placement = self._cpu_placement(mparams)
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        del placement  # llama.cpp has read the override table
        if not self._model:
            raise ModelFileError(
                f"llama.cpp could not load {self.path} (see its log with --verbose)"
            )
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))

    def _make_context(self) -> None:
        """Create the llama.cpp context and its batch; start the lists of what the cache holds."""
        n_threads = self.config.n_threads or default_threads()
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = self.config.n_ctx
        cparams.n_batch = self.config.n_batch
        cparams.n_ubatch = self.config.n_batch
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.n_seq_max = self.config.n_seq_max
        recurrent = bool(
            llama_cpp.llama_model_is_recurrent(self._model)
            or llama_cpp.llama_model_is_hybrid(self._model)
        )
        snapshots = SNAPSHOTS if self.config.rs_snapshots is None else self.config.rs_snapshots
        cparams.n_rs_seq = snapshots if recurrent else 0  # clamped to 0 where not supported
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
        self._init_rollback(recurrent)
        self.mtp = self._mtp_head()
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
        self.wait_s = 0.0  # for other sequences' decodes: a whole engine waits for none
        self.last_batch_tokens = 0  # tokens of the latest llama_decode call (all sequences)
        self.last_batch_sequences = 1  # sequences in it

    def _mtp_head(self) -> MtpHead | None:
        """The Gemma 4 assistant the config names, else the model's own MTP block, kept in
        step with this context, where ``load_mtp`` asks for it and the model has one; None
        otherwise, or when the block cannot be made (the target still loads, with a
        warning).  An assistant that cannot be made is an error: it was asked for."""
        if self.config.assistant is not None:
            return AssistantHead(self, self.config.assistant)
        if not self.config.load_mtp or llama_cpp.llama_model_n_layer_nextn(self._model) < 1:
            return None
        try:
            return MtpHead(self)
        except (EngineError, UnsupportedModelError) as exc:
            log.warning("localspec: %s: its MTP block will not draft (%s)", self.path.name, exc)
            return None

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
        if getattr(self, "mtp", None) is not None:
            self.mtp.close()
            self.mtp = None
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
