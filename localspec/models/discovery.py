"""Which models are there, and which of them can draft for a given target?

Front ends (the CLI's ``models`` / ``pull``, the desktop app's pair picker, ``load``
with ``draft="auto"``) ask this module; it reads the catalogue (``models.toml``), the
GGUF files already on disk (the Hugging Face cache and localspec's own cache) and
their headers, never their weights.

A target can be named four ways (:func:`model_ref`): a catalogue pair or model name,
``REPO:FILE`` (``Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:qwen2.5-coder-7b-instruct-q4_k_m.gguf``),
``REPO:QUANT`` (``Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:q4_k_m``) or a path.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from localspec.errors import DownloadError, InvalidOptionError, ModelFileError
from localspec.models.cache import ProgressFn, cache_dir, find_local
from localspec.models.catalog import (
    ModelEntry,
    PairEntry,
    format_params,
    hub_file_problem,
    load_catalog,
)
from localspec.models.compat import check_compatibility
from localspec.models.gguf_info import GGUFInfo, cached_header
from localspec.models.hub import check_reachable, ensure_model, hub_error_message

DRAFT_SIZE_RATIO = (
    0.3  # "about 1/4": a draft above this share of the target's parameters is not picked
)
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass(frozen=True)
class ModelRef:
    """A model localspec knows of: a catalogue entry, a GGUF file on disk, or both.

    ``size`` is in bytes (0 when unknown), ``params`` the parameter count (1.5e9),
    ``family`` the GGUF ``general.basename`` when the file has been read ("" before).
    """

    name: str
    entry: ModelEntry | None = None
    path: Path | None = None
    size: int = 0
    params: float | None = None
    family: str = ""
    builtin_drafter: str = ""  # "built-in drafter (MTP, 1 head)" where the GGUF has MTP blocks

    @property
    def downloaded(self) -> bool:
        return self.path is not None

    @property
    def label(self) -> str:
        """For lists: "qwen2.5-coder-0.5b-instruct-q4_k_m (0.5B, 491 MB)"."""
        facts = [
            f
            for f in (format_params(self.params), _size_text(self.size), self.builtin_drafter)
            if f
        ]
        if not self.downloaded:
            facts.append("not downloaded")
        return f"{self.name} ({', '.join(facts)})" if facts else self.name


@dataclass(frozen=True)
class DraftCandidate:
    """A possible draft for one target.  ``reasons`` says why it cannot draft (empty
    when ``compatible``); ``notes`` are remarks that do not block it; ``recommended``
    marks the catalogue's own pairing."""

    model: ModelRef
    compatible: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recommended: bool = False


# --- what is there ----------------------------------------------------------------------


def local_ggufs() -> list[Path]:
    """GGUF files in the Hugging Face cache and localspec's cache (first parts only for
    split files), sorted by path."""
    found = set()
    hf_cache = _hf_cache_dir()
    if hf_cache.is_dir():
        found.update(p for p in hf_cache.glob("models--*/snapshots/*/**/*.gguf") if p.is_file())
    own = cache_dir()
    if own.is_dir():
        found.update(p for p in own.rglob("*.gguf") if p.is_file() and not _hidden(p, own))
    return sorted(p for p in found if _first_part(p))


def list_models() -> list[ModelRef]:
    """Every catalogue model (downloaded or not), then every other GGUF on disk."""
    refs = [_catalogue_ref(entry) for entry in load_catalog().models.values()]
    known = {r.path.resolve() for r in refs if r.path is not None}
    for path in local_ggufs():
        if path.resolve() not in known:
            known.add(path.resolve())
            refs.append(_file_ref(path))
    return refs


def model_ref(spec: str | Path | None) -> ModelRef:
    """Resolve what a user typed to a model (nothing is downloaded).

    ``None`` is the default pair's target.  Raises ModelFileError when ``spec`` is
    neither a catalogue name, ``REPO:FILE``, ``REPO:QUANT`` nor an existing file;
    DownloadError when a ``REPO:QUANT`` needs the Hub and it cannot be reached;
    InvalidOptionError when a quantization matches several files or none.
    """
    catalog = load_catalog()
    if spec is None:
        return _catalogue_ref(catalog.pair().target)
    text = str(spec)
    if not text.strip():
        raise ModelFileError("no model given (an empty name)")
    if text in catalog.pairs:
        return _catalogue_ref(catalog.pairs[text].target)
    if text in catalog.models:
        return _catalogue_ref(catalog.models[text])
    path = Path(text).expanduser()
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory, not a GGUF file")
    if path.is_file():
        return _file_ref(path)
    repo, sep, rest = text.partition(":")
    if sep and repo.count("/") == 1 and rest:
        return _hub_ref(repo, rest)
    known = ", ".join(sorted(catalog.pairs))
    raise ModelFileError(
        f"model not found: {text!r} is not a file, a catalogue name (pairs: {known}; "
        "`localspec models` lists the models too), REPO:FILE or REPO:QUANT"
    )


def ensure_local(
    ref: ModelRef, progress: ProgressFn | None = None, cancel: threading.Event | None = None
) -> Path:
    """The model's file on disk, downloaded first if needed (see
    :func:`localspec.models.hub.ensure_model` for progress, cancel and errors)."""
    if ref.path is not None:
        return ref.path
    if ref.entry is None:
        raise ModelFileError(f"{ref.name}: no file and nothing to download")
    return ensure_model(ref.entry, progress, cancel)


# --- drafts -----------------------------------------------------------------------------


def drafts_for(target: ModelRef) -> list[DraftCandidate]:
    """Candidate drafts for ``target``, compatible ones first (catalogue pairing, then
    smallest), each incompatible one with its reasons.

    Candidates are the catalogue's drafts for this target (checked from their headers
    once both files are on disk, trusted from the catalogue before) and every other
    GGUF on disk when the target is on disk too.  A model with as many parameters as
    the target or more is listed as incompatible: it cannot speed anything up
    (``require_smaller`` of :func:`localspec.models.compat.check_compatibility`).
    """
    recommended = {p.draft.name for p in _pairs_of(target)}
    candidates: dict[str, DraftCandidate] = {}
    target_info = cached_header(target.path) if target.path is not None else None
    for ref in list_models():
        if _same_model(ref, target):
            continue
        is_recommended = ref.entry is not None and ref.entry.name in recommended
        if target_info is not None and ref.path is not None:
            candidates[ref.name] = _checked(ref, target_info, is_recommended)
        elif is_recommended:
            candidates[ref.name] = DraftCandidate(
                ref,
                True,
                notes=[
                    "paired with this target in the catalogue; its header is checked once both "
                    "files are downloaded"
                ],
                recommended=True,
            )
    return sorted(
        candidates.values(),
        key=lambda c: (not c.compatible, not c.recommended, c.model.params or 0, c.model.name),
    )


def pick_draft(target: ModelRef) -> ModelRef | None:
    """The draft ``draft="auto"`` chooses: the catalogue's pairing for this target,
    else the smallest compatible model on disk with at most about a quarter of the
    target's parameters (``DRAFT_SIZE_RATIO``); None when there is none."""
    compatible = [c for c in drafts_for(target) if c.compatible]
    for c in compatible:
        if c.recommended:
            return c.model
    if not target.params:
        return None
    small = [
        c.model
        for c in compatible
        if c.model.params and c.model.params <= DRAFT_SIZE_RATIO * target.params
    ]
    return min(small, key=lambda m: m.params, default=None)


def recommended_pair(target: ModelRef, draft: ModelRef | None) -> PairEntry | None:
    """The catalogue pair made of exactly this target and draft (for its settings)."""
    if draft is None or draft.entry is None:
        return None
    return next((p for p in _pairs_of(target) if p.draft.name == draft.entry.name), None)


def check_draft(target: ModelRef, draft: ModelRef) -> DraftCandidate:
    """Check one draft file against one target file, from their headers: the rules of
    :func:`localspec.models.compat.check_compatibility`, a draft as large as the target refused.
    Raises ModelFileError when either model is not on disk."""
    for ref in (target, draft):
        if ref.path is None:
            raise ModelFileError(f"{ref.name} is not downloaded; its header cannot be checked yet")
    return _checked(draft, cached_header(target.path), recommended_pair(target, draft) is not None)


def _checked(ref: ModelRef, target_info: GGUFInfo, recommended: bool) -> DraftCandidate:
    try:
        verdict = check_compatibility(target_info, cached_header(ref.path), require_smaller=True)
    except ModelFileError as exc:
        return DraftCandidate(ref, False, [str(exc)], recommended=recommended)
    return DraftCandidate(ref, verdict.compatible, verdict.reasons, verdict.notes, recommended)


def _pairs_of(target: ModelRef) -> list[PairEntry]:
    pairs = load_catalog().pairs.values()
    if target.entry is not None:
        return [p for p in pairs if p.target.name == target.entry.name]
    if target.path is not None:  # a file on disk that happens to be a catalogued one
        return [p for p in pairs if p.target.file == target.path.name]
    return []


def _same_model(a: ModelRef, b: ModelRef) -> bool:
    if a.path is not None and b.path is not None:
        return a.path.resolve() == b.path.resolve()
    return a.entry is not None and a.entry == b.entry


# --- building refs ----------------------------------------------------------------------


def _catalogue_ref(entry: ModelEntry) -> ModelRef:
    path = find_local(entry)
    family, drafter = _family(path) if path is not None else ("", entry.builtin_drafter)
    return ModelRef(entry.name, entry, path, entry.size, entry.parameters, family, drafter)


def _file_ref(path: Path) -> ModelRef:
    try:
        info = cached_header(path)
        params, family, drafter = info.parameters or None, info.family, info.builtin_drafter
    except ModelFileError:  # listed anyway; checking it as a draft says what is wrong
        params, family, drafter = None, "", ""
    size = path.stat().st_size
    entry = next(
        (e for e in load_catalog().models.values() if e.file == path.name and e.size == size), None
    )
    name = entry.name if entry is not None else path.name
    return ModelRef(name, entry, path, size, params, family, drafter)


def _hub_ref(repo: str, file_or_quant: str) -> ModelRef:
    catalog = load_catalog()
    is_file = file_or_quant.lower().endswith(".gguf")
    problem = hub_file_problem(repo, file_or_quant if is_file else None)
    if problem:
        raise InvalidOptionError(f"{repo}:{file_or_quant}: {problem}")
    if is_file:
        for entry in catalog.models.values():
            if entry.repo.lower() == repo.lower() and entry.file == file_or_quant:
                return _catalogue_ref(entry)
        return _uncatalogued(ModelEntry(name=file_or_quant, repo=repo, file=file_or_quant))
    quant = file_or_quant.lower()
    for entry in catalog.models.values():
        if entry.repo.lower() == repo.lower() and entry.quant.lower() == quant:
            return _catalogue_ref(entry)
    return _uncatalogued(_entry_for_quant(repo, quant))


def _uncatalogued(entry: ModelEntry) -> ModelRef:
    path = find_local(entry)
    if path is not None:
        return _file_ref(path)
    return ModelRef(entry.name, entry, None, entry.size, None, "")


def _entry_for_quant(repo: str, quant: str) -> ModelEntry:
    """Which file of ``repo`` has quantization ``quant``: from the Hugging Face cache
    when a download of it is there, else from the Hub's file list."""
    cached = _matching(_cached_repo_ggufs(repo), quant)
    files = cached if len(cached) == 1 else _hub_repo_ggufs(repo)
    matching = _matching(files, quant)
    if len(matching) == 1 and _SPLIT_PART.search(matching[0][0]):
        raise InvalidOptionError(
            f"{repo}: the {quant} file is split into parts ({matching[0][0]}); "
            "split GGUF files are not supported yet, pick a single-file quantization"
        )
    if len(matching) != 1:
        listed = ", ".join(sorted({_quant_of(f[0]) for f in files if _quant_of(f[0])})) or "none"
        what = "several files" if matching else "no file"
        raise InvalidOptionError(
            f"{repo}: {what} with quantization {quant!r} (available: {listed}); name the file as "
            "REPO:FILE"
        )
    name, size, sha256 = matching[0]
    return ModelEntry(
        name=Path(name).name, repo=repo, file=name, size=size, sha256=sha256, quant=quant.upper()
    )


def _matching(files: list[tuple[str, int, str]], quant: str) -> list[tuple[str, int, str]]:
    return [f for f in files if _quant_of(f[0]) == quant and _first_part(Path(f[0]))]


def _cached_repo_ggufs(repo: str) -> list[tuple[str, int, str]]:
    folder = _hf_cache_dir() / f"models--{repo.replace('/', '--')}" / "snapshots"
    return [(p.name, p.stat().st_size, "") for p in folder.glob("*/*.gguf") if p.exists()]


def _hub_repo_ggufs(repo: str) -> list[tuple[str, int, str]]:
    """``[(path in repo, size in bytes, sha256 or "")]`` of the repo's GGUF files, from the Hub."""
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        raise DownloadError(
            f"offline (HF_HUB_OFFLINE is set) and no single matching file of {repo} is in the "
            "Hugging Face cache, so its files cannot be listed; name the file as REPO:FILE"
        )
    check_reachable(constants.ENDPOINT)
    try:
        tree = HfApi().list_repo_tree(repo, recursive=True)
        return [
            (f.path, f.size, f.lfs.sha256 if getattr(f, "lfs", None) else "")
            for f in tree
            if f.path.endswith(".gguf") and hasattr(f, "size")
        ]
    except Exception as exc:  # 401, 404, network: huggingface_hub raises many types
        raise DownloadError(
            hub_error_message(ModelEntry(name=repo, repo=repo, file="(file list)"), exc)
        ) from None


def _quant_of(filename: str) -> str:
    """ "qwen2.5-coder-7b-instruct-q4_k_m.gguf" -> "q4_k_m" (the last dash- or dot-separated
    part before the extension and any split suffix)."""
    stem = _SPLIT_PART.sub(".gguf", Path(filename).name.lower())[: -len(".gguf")]
    match = re.search(r"[-.]((?:i?q\d[\w]*)|f16|bf16|f32)$", stem)
    return match[1] if match else ""


def _first_part(path: Path) -> bool:
    match = _SPLIT_PART.search(path.name)
    return match is None or int(match[1]) == 1


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _hf_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _family(path: Path) -> tuple[str, str]:
    """(family, built-in drafter) of the GGUF at ``path``; empty when it cannot be read."""
    try:
        info = cached_header(path)
    except ModelFileError:
        return "", ""
    return info.family, info.builtin_drafter


def _size_text(n: int) -> str:
    if not n:
        return ""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"
