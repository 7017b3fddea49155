"""Gemma 4's assistant drafter (:class:`AssistantHead`): the small ``gemma4-assistant`` GGUF
Gemma 4 ships beside its target, run as llama.cpp runs it.

llama.cpp treats it as an MTP drafter whose memory is the target's (common/speculative.cpp,
``common_speculative_impl_draft_mtp`` with ``is_mem_shared``): its context is an MTP context
whose ``ctx_other`` is the target's (src/llama-context.cpp refuses one without), and its layers
keep no KV of their own but read the target's (src/llama-model.cpp: its sliding layers the
target's layer ``n_layer - 2``, its full ones ``n_layer - 1``).  So, unlike the target's own MTP
block (:class:`~localspec.llama.mtp.MtpHead`):

- nothing is decoded to follow the target: the target's hidden state of each decoded row is
  all it keeps (:meth:`AssistantHead.follow`);
- every draft token is decoded at the same position, the one after the target's cache (what
  the assistant was trained on), from the hidden state before it: the target's for the first,
  then the assistant's own;
- its decodes add no cells, so nothing is trimmed (:meth:`AssistantHead.trim` only moves the
  position drafting starts from).
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from localspec.errors import ModelFileError, UnsupportedModelError
from localspec.llama.mtp import MtpHead
from localspec.models.architectures import ASSISTANTS


class AssistantHead(MtpHead):
    """The assistant GGUF at ``path`` drafting for ``target`` (an
    :class:`~localspec.llama.engine.Engine` of the Gemma 4 it was made for), in step with it.
    UnsupportedModelError when the two do not fit (vocabulary, hidden width)."""

    shares_memory = True

    def __init__(self, target, path: Path):
        self.path = Path(path)
        self._model = _load(self.path, target.config.n_gpu_layers)
        try:
            _check_fit(self._model, target, self.path)
            super().__init__(target, self._model)
        except BaseException:
            llama_cpp.llama_model_free(self._model)
            self._model = None
            raise

    @property
    def label(self) -> str:
        return f"assistant drafter ({self.path.name})"

    def follow(self, tokens, pos0: int, first_row: int) -> None:
        """The target decoded ``tokens`` at ``pos0``…: keep its hidden states (the assistant
        reads the target's KV cache itself)."""
        before = self._state_before(pos0)
        self._rows = self._target_rows(first_row, len(tokens))
        self._rows_at, self._held, self._before = pos0, pos0 + len(tokens), before

    def _draft_position(self, pos0: int, i: int) -> int:
        return pos0

    def _trim_to(self, n: int) -> None:
        self._held = min(self._held, n)  # the cells are the target's: it trims them

    def close(self) -> None:
        super().close()
        if self._model is not None:
            llama_cpp.llama_model_free(self._model)
            self._model = None


def is_assistant(architecture: str | None) -> bool:
    """Whether a GGUF of this ``general.architecture`` is a drafter that runs against its
    target's memory (Gemma 4's assistant), not a draft model of its own."""
    return architecture in ASSISTANTS


def _load(path: Path, n_gpu_layers: int):
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise ModelFileError(f"llama.cpp could not load {path} (see its log with --verbose)")
    return model


def _check_fit(model, target, path: Path) -> None:
    vocab = llama_cpp.llama_model_get_vocab(model)
    if int(llama_cpp.llama_vocab_n_tokens(vocab)) != target.n_vocab:
        raise UnsupportedModelError(f"{path.name}'s vocabulary is not {target.path.name}'s")
    width, wanted = (
        int(llama_cpp.llama_model_n_embd_out(model)),
        int(llama_cpp.llama_model_n_embd_out(target._model)),
    )
    if width != wanted:
        raise UnsupportedModelError(
            f"{path.name} reads hidden states {width} wide; {target.path.name}'s are {wanted}"
        )
