"""``localspec models`` and ``localspec pull``: what the catalogue offers, what is on
disk, which drafts fit a target, and downloads.  Output is a table for people or
``--json`` for scripts (sizes in bytes, parameters as counts)."""

from __future__ import annotations

import json
import sys

from localspec.errors import LocalspecError, ModelFileError
from localspec.models.cache import delete_cached
from localspec.models.catalog import format_params, load_catalog
from localspec.models.discovery import (
    DraftCandidate,
    ModelRef,
    drafts_for,
    ensure_local,
    list_models,
    model_ref,
)
from localspec.models.mirror import remove_abandoned_downloads


def pull(spec: str) -> int:
    """Download a pair (target and draft) or one model; print the local paths."""
    pair = load_catalog().pairs.get(spec)
    refs = [model_ref(pair.target.name), model_ref(pair.draft.name)] if pair else [model_ref(spec)]
    for ref in refs:
        state = "already on disk" if ref.downloaded else "downloaded"
        path = ensure_local(ref)
        print(f"{ref.name}: {state}: {path}")
    return 0


def remove(spec: str) -> int:
    """Delete one model's file from the caches."""
    if spec in load_catalog().pairs:
        pair = load_catalog().pairs[spec]
        raise ModelFileError(
            f"{spec} is a pair; name one of its models: {pair.target.name} or {pair.draft.name}"
        )
    ref = model_ref(spec)
    if not ref.downloaded:
        raise ModelFileError(f"{ref.name} is not downloaded; nothing to delete")
    freed = delete_cached(ref.path)
    print(f"deleted {ref.path} ({freed / 1e9:.2f} GB freed)")
    return 0


def list_all(as_json: bool = False) -> int:
    """The catalogue's pairs and models with their local state, then other GGUFs on disk."""
    catalog = load_catalog()
    remove_abandoned_downloads()
    models = list_models()
    drafts = {m.name: _compatible_names(m) for m in models if m.downloaded and m.entry is None}
    if as_json:
        print(
            json.dumps(
                {
                    "default_pair": catalog.default_pair,
                    "pairs": [
                        {
                            "name": p.name,
                            "target": p.target.name,
                            "draft": p.draft.name,
                            "builtin_drafter": p.target.builtin_drafter or None,
                            "draft_kind": "assistant" if p.draft.assistant else "draft model",
                            "description": p.description,
                            "draft_max": p.draft_max,
                            "draft_min": p.draft_min,
                            "p_min": p.p_min,
                        }
                        for p in catalog.pairs.values()
                    ],
                    "models": [_model_json(m, drafts.get(m.name)) for m in models],
                },
                indent=2,
            )
        )
        return 0
    on_disk = {m.name for m in models if m.downloaded}
    print("Pairs (target <- draft; * = default):")
    for p in catalog.pairs.values():
        mark = "*" if p.name == catalog.default_pair else " "
        state = "ready" if {p.target.name, p.draft.name} <= on_disk else "not downloaded"
        own = f", and its {p.target.builtin_drafter}" if p.target.builtin_drafter else ""
        kind = " (assistant drafter)" if p.draft.assistant else ""
        print(f" {mark} {p.name:<24} {p.target.name} <- {p.draft.name}{kind}{own}  [{state}]")
    print("\nModels:")
    _table([m for m in models if m.entry is not None])
    others = [m for m in models if m.entry is None]
    if others:
        print("\nOther GGUF files on disk (compatible drafts in brackets):")
        for m in others:
            print(
                f"  {m.label}\n      {m.path}\n      drafts: "
                f"{', '.join(drafts[m.name]) or 'none found'}"
            )
    print(
        "\nDownload with `localspec pull NAME`; check drafts with `localspec models --drafts-for "
        "TARGET`."
    )
    return 0


def list_drafts(target_spec: str, as_json: bool = False) -> int:
    """Every candidate draft for one target, compatible ones first, with reasons."""
    target = model_ref(target_spec)
    candidates = drafts_for(target)
    if as_json:
        print(
            json.dumps(
                {
                    "target": _model_json(target),
                    "drafts": [
                        {
                            **_model_json(c.model),
                            "compatible": c.compatible,
                            "recommended": c.recommended,
                            "reasons": c.reasons,
                            "notes": c.notes,
                        }
                        for c in candidates
                    ],
                },
                indent=2,
            )
        )
        return 0
    print(f"Drafts for {target.label}:")
    if not candidates:
        print(
            "  none: no catalogue pairing and no other GGUF file on disk"
            + ("" if target.downloaded else " (download the target to check files on disk)")
        )
    for c in candidates:
        print(_candidate_line(c))
    return 0


def _candidate_line(c: DraftCandidate) -> str:
    if c.compatible:
        head = "  ok  " + ("(recommended) " if c.recommended else "") + c.model.label
    else:
        head = "  no  " + c.model.label
    lines = [head] + [f"        - {r}" for r in c.reasons] + [f"        note: {n}" for n in c.notes]
    return "\n".join(lines)


def _compatible_names(target: ModelRef) -> list[str]:
    try:
        return [c.model.name for c in drafts_for(target) if c.compatible]
    except LocalspecError as exc:
        print(f"localspec: {target.name}: {exc}", file=sys.stderr)
        return []


def _table(models: list[ModelRef]) -> None:
    print(f"  {'name':<44} {'params':>7} {'quant':<7} {'size':>9}  {'on disk'}")
    for m in models:
        size = f"{m.size / 1e9:.2f} GB" if m.size else "?"
        where = str(m.path) if m.downloaded else "-"
        quant = m.entry.quant if m.entry else ""
        print(f"  {m.name:<44} {format_params(m.params):>7} {quant:<7} {size:>9}  {where}")


def _model_json(m: ModelRef, compatible_drafts: list[str] | None = None) -> dict:
    data = {
        "name": m.name,
        "repo": m.entry.repo if m.entry else None,
        "file": m.entry.file if m.entry else None,
        "params": m.params,
        "size": m.size or None,
        "downloaded": m.downloaded,
        "path": str(m.path) if m.path else None,
        "family": m.family or None,
        "builtin_drafter": m.builtin_drafter or None,
    }
    if compatible_drafts is not None:
        data["compatible_drafts"] = compatible_drafts
    return data
