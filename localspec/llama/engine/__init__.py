"""The engine: one GGUF model with one llama.cpp context holding one or more sequences.

Every llama.cpp call of an engine runs on its owner, a :class:`~localspec.llama.owner.LlamaThread`
(a pair shares one), whichever thread calls the method.  It keeps the list of tokens held in its KV
cache, so callers can reuse the longest common prefix and trim the rest; it never re-prefills on its
own.

Built on the low-level ctypes bindings of llama-cpp-python (pinned exactly in
``pyproject.toml``): ``llama_batch_init`` / ``llama_decode`` /
``llama_get_logits_ith`` / ``llama_memory_seq_rm``.

The :class:`Engine` class lives in :mod:`.model` (load, close) and takes its methods from one
module per responsibility: :mod:`.vocabulary` (tokens and their text), :mod:`.chat` (the chat
template), :mod:`.decode` (batches and logits rows) and :mod:`.kv_cache` (what each sequence's
cache holds: trim, copy, reuse).
"""

from localspec.llama.engine.model import Engine
from localspec.llama.engine_config import EngineConfig, default_threads
from localspec.llama.sequence import common_prefix

__all__ = ["Engine", "EngineConfig", "common_prefix", "default_threads"]
