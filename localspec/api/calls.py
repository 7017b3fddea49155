"""The one-call functions: :func:`load` a pair by name and :func:`chat` with it kept loaded."""

from __future__ import annotations

import threading
from pathlib import Path

from localspec.api.generation_calls import Messages
from localspec.api.model import SpeculativeModel
from localspec.api.pairs import resolve_pair
from localspec.decoding.loop import Generation
from localspec.decoding.stats import GenerationResult
from localspec.models.cache import ProgressFn


def load(
    target: str | Path | None = None,
    draft: str | Path | None = "auto",
    *,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    **kwargs,
) -> SpeculativeModel:
    """Resolve (and fetch if needed) a target and draft, then load both.

    ``target`` / ``draft`` as in :func:`resolve_pair`; the catalogue pair's recommended
    ``draft_max`` / ``draft_min`` / ``p_min`` apply unless given.  Other keyword
    arguments go to :class:`SpeculativeModel` (``load_progress`` and the fields of
    :class:`~localspec.decoding.params.LoadOptions`: ``n_ctx``, ``n_gpu_layers``, ...).
    """
    resolved = resolve_pair(target, draft, progress, cancel)
    for key in ("draft_max", "draft_min", "p_min") if resolved.pair is not None else ():
        if getattr(resolved.pair, key) is not None:
            kwargs.setdefault(key, getattr(resolved.pair, key))
    return SpeculativeModel(resolved.target, resolved.draft, **kwargs)


_shared: tuple[tuple, SpeculativeModel] | None = None


def chat(
    messages: str | Messages,
    *,
    target: str | Path | None = None,
    draft: str | Path | None = "auto",
    stream: bool = False,
    **options,
) -> GenerationResult | Generation:
    """One call: answer ``messages`` with the default pair (or ``target`` / ``draft``).

    The loaded models are kept for the next call with the same ``target`` and ``draft``.
    Options as in :meth:`SpeculativeModel.chat`.
    """
    global _shared
    key = (target, draft)
    if _shared is None or _shared[0] != key:
        if _shared is not None:
            _shared[1].close()
            _shared = None
        _shared = (key, load(target, draft))
    return _shared[1].chat(messages, stream=stream, **options)
