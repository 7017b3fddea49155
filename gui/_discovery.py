"""Model discovery for the pair picker.

Uses :mod:`localspec.discovery` when the installed localspec has it; until then a
small stand-in with the same interface (catalogue entries + GGUF files in the cache,
drafts checked with :func:`localspec.compat.check_compatibility`).
"""

from __future__ import annotations

try:  # pragma: no cover - the real module, once it lands
    from localspec.discovery import (DraftCandidate, ModelRef, drafts_for, ensure_local,  # noqa: F401
                                     list_models, model_ref, pick_draft)
    from localspec.errors import DownloadCancelled  # noqa: F401
except ImportError:
    import re
    import threading
    from dataclasses import dataclass, field
    from functools import lru_cache
    from pathlib import Path

    from localspec import hub
    from localspec.catalog import ModelEntry, load_catalog
    from localspec.compat import check_compatibility
    from localspec.errors import DownloadError, LocalspecError, ModelFileError
    from localspec.gguf_info import check_gguf_file

    class DownloadCancelled(LocalspecError):
        """The user cancelled a download."""

    @dataclass(frozen=True)
    class ModelRef:
        name: str
        entry: ModelEntry | None
        path: Path | None
        size: int  # bytes, 0 if unknown
        params: float | None
        family: str

        @property
        def downloaded(self) -> bool:
            return self.path is not None and Path(self.path).is_file()

        @property
        def label(self) -> str:
            size = f", {self.size / 2**30:.1f} GiB" if self.size else ""
            return f"{self.name}{size}" + ("" if self.downloaded else " (not downloaded)")

    @dataclass(frozen=True)
    class DraftCandidate:
        model: ModelRef
        compatible: bool
        reasons: list[str] = field(default_factory=list)
        recommended: bool = False

    def _params(text: str) -> float | None:
        m = re.match(r"([\d.]+)\s*([bmBM])", text or "")
        return float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6) if m else None

    def _family(name: str) -> str:
        name = re.sub(r"\.gguf$", "", name.lower())
        name = re.sub(r"-\d+(\.\d+)?[bm](-.*)?$", "", name)
        return re.sub(r"-\d+$", "", name)

    def _from_entry(entry: ModelEntry) -> ModelRef:
        return ModelRef(entry.name, entry, hub.find_local(entry), entry.size, _params(entry.params),
                        _family(entry.name))

    def _from_path(path: Path) -> ModelRef:
        path = Path(path).expanduser()
        return ModelRef(path.stem, None, path, path.stat().st_size if path.is_file() else 0, None,
                        _family(path.stem))

    def list_models() -> list[ModelRef]:
        refs = [_from_entry(e) for e in load_catalog().models.values()]
        known = {r.path.resolve() for r in refs if r.path is not None}
        root = hub.cache_dir()
        if root.is_dir():
            for path in sorted(root.rglob("*.gguf")):
                if path.resolve() not in known and not path.name.startswith("."):
                    refs.append(_from_path(path))
        return refs

    def model_ref(spec) -> ModelRef:
        catalog = load_catalog()
        if str(spec) in catalog.pairs:
            return _from_entry(catalog.pairs[str(spec)].target)
        if str(spec) in catalog.models:
            return _from_entry(catalog.models[str(spec)])
        path = Path(spec).expanduser()
        if not path.is_file():
            raise ModelFileError(f"model file not found: {path}")
        for ref in list_models():
            if ref.path is not None and ref.path.resolve() == path.resolve():
                return ref
        return _from_path(path)

    @lru_cache(maxsize=64)
    def _info(path: str, mtime: float):
        return check_gguf_file(path)

    def _header(ref: ModelRef):
        return _info(str(ref.path), Path(ref.path).stat().st_mtime)

    def drafts_for(target: ModelRef) -> list[DraftCandidate]:
        catalog = load_catalog()
        paired = {p.draft.name for p in catalog.pairs.values() if p.target.name == target.name}
        out = []
        for ref in list_models():
            if ref.name == target.name or (target.path and ref.path and ref.path == target.path):
                continue
            if target.size and ref.size and ref.size > target.size:
                continue  # a draft is never larger than its target
            if ref.name in paired:
                out.append(DraftCandidate(ref, True, [], True))
            elif ref.downloaded and target.downloaded:
                try:
                    verdict = check_compatibility(_header(target), _header(ref))
                    reasons = verdict.reasons
                    if not reasons and ref.family != target.family:
                        reasons = [f"a different model family ({ref.family}, target {target.family})"]
                except LocalspecError as exc:
                    reasons = [str(exc)]
                out.append(DraftCandidate(ref, not reasons, reasons, False))
            elif ref.family == target.family:
                out.append(DraftCandidate(ref, True, [], False))
            else:
                out.append(DraftCandidate(ref, False, [f"a different model family ({ref.family}, "
                                                      f"target {target.family})"], False))
        out.sort(key=lambda c: (not c.compatible, not c.recommended, -(c.model.size or 0)))
        return out

    def pick_draft(target: ModelRef) -> ModelRef | None:
        return next((c.model for c in drafts_for(target) if c.compatible), None)

    def ensure_local(ref: ModelRef, progress=None, cancel: threading.Event | None = None) -> Path:
        if ref.downloaded:
            return Path(ref.path)
        if ref.entry is None:
            raise ModelFileError(f"model file not found: {ref.path}")

        def report(done: int, total: int) -> None:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(f"download of {ref.name} cancelled")
            if progress is not None:
                progress(done, total)

        try:
            return hub.ensure_model(ref.entry, report)
        except DownloadError:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled(f"download of {ref.name} cancelled") from None
            raise
