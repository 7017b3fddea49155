"""Which files a pair is: names resolved to local GGUF files (fetched when the catalogue or the
Hub has them), checked before anything loads, and the context their memory allows."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from localspec.decoding.params import LoadOptions
from localspec.errors import IncompatibleDraftError
from localspec.llama import backend
from localspec.models.cache import ProgressFn
from localspec.models.catalog import PairEntry, load_catalog
from localspec.models.compat import check_compatibility
from localspec.models.discovery import (
    ModelRef,
    ensure_local,
    model_ref,
    pick_draft,
    recommended_pair,
)
from localspec.models.gguf_info import GGUFInfo, check_gguf_file
from localspec.models.memory import AutoContext, auto_context


@dataclass(frozen=True)
class ResolvedPair:
    target: Path
    draft: Path | None
    pair: PairEntry | None  # the catalogue pair it came from, if any


def resolve_pair(
    target: str | Path | None = None,
    draft: str | Path | None = "auto",
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> ResolvedPair:
    """Turn user-facing names into local files, fetching catalogue files if needed.

    ``target``: None (the default pair), a pair or model name from ``models.toml``,
    ``REPO:FILE``, ``REPO:QUANT`` or a path to a GGUF file (see
    :func:`localspec.models.discovery.model_ref`).  ``draft``: "auto" (the named pair's draft,
    else :func:`localspec.models.discovery.pick_draft`), None / "none" (no draft model), or a
    name or path as for ``target``.  ``progress`` and ``cancel`` go to the downloads.
    Raises ModelFileError for a path that does not exist, CatalogError, DownloadError.
    """
    catalog = load_catalog()
    named_pair = catalog.pairs.get(str(target)) if target is not None else catalog.pair()
    target_ref = model_ref(target)
    draft_ref: ModelRef | None
    if draft is None or str(draft).lower() == "none":
        draft_ref = None
    elif str(draft) == "auto":
        draft_ref = model_ref(named_pair.draft.name) if named_pair else pick_draft(target_ref)
    else:
        draft_ref = model_ref(draft)
    pair = named_pair or recommended_pair(target_ref, draft_ref)
    target_path = ensure_local(target_ref, progress, cancel)
    draft_path = ensure_local(draft_ref, progress, cancel) if draft_ref is not None else None
    return ResolvedPair(target=target_path, draft=draft_path, pair=pair)


def check_pair(target: Path, draft: Path | None) -> GGUFInfo | None:
    """The draft's header (None without a draft), read once; raise ModelFileError for a
    missing, non-GGUF or truncated file, IncompatibleDraftError for a draft whose vocabulary
    does not match the target's; loads nothing."""
    target_info = check_gguf_file(target)
    if draft is None:
        return None
    draft_info = check_gguf_file(draft)
    verdict = check_compatibility(target_info, draft_info)
    if not verdict.compatible:
        raise IncompatibleDraftError(
            f"{draft.name} cannot draft for {target.name}: " + "; ".join(verdict.reasons),
            verdict.reasons,
        )
    return draft_info


def auto_context_for(target: Path, draft: Path | None, options: LoadOptions) -> AutoContext:
    """``n_ctx="auto"``: the pair's trained context, capped by the memory its layers go to
    (VRAM when the build offloads them, else RAM)."""
    offload = options.n_gpu_layers != 0 and backend.supports_gpu_offload()
    return auto_context(target, draft, budget=backend.memory_budget(offload))
