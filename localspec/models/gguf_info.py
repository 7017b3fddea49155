"""GGUF header metadata, read without loading any weights.

Follows the GGUF spec (ggml-org/ggml ``docs/gguf.md``, versions 2 and 3) and uses the
``gguf`` package's type tables (:class:`gguf.GGUFValueType`, ``GGML_QUANT_SIZES``).
``gguf.GGUFReader`` itself builds one numpy view per array element and takes about
7.5 s on a 151,936-token vocabulary (measured on the Qwen2.5-Coder 1.5B file); this
streaming reader takes a fraction of a second, so it can run before every load.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from localspec.errors import ModelFileError

_MAGIC = b"GGUF"
_MAX_FIELD_BYTES = 1 << 26  # no header string is anywhere near 64 MiB (chat templates: KB)
_MAX_ITEMS = 1 << 22  # nor an array near 4M items (the largest vocabularies: ~262k tokens)
_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.FLOAT64: "<d",
    GGUFValueType.BOOL: "<?",
}
# Arrays of these are large and never needed as values (scores, merges, token types).
_SKIPPED_ARRAYS = {"tokenizer.ggml.scores", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file: ``shape`` in GGUF order (``shape[0]`` is ggml's ne[0], the
    contiguous row length), ``ggml_type`` its storage type, ``n_bytes`` its data size."""

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    n_bytes: int


@dataclass
class GGUFInfo:
    """What localspec needs from a GGUF header.

    ``tokens`` is the vocabulary's token texts (``tokenizer.ggml.tokens``), index = id.
    ``metadata`` holds every other scalar or string key as read.
    """

    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tokens: list[str] = field(default_factory=list)
    n_tensors: int = 0
    n_elements: int = 0  # sum of all tensor elements: the parameter count, embeddings included
    tensors: list[TensorInfo] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", ""))

    @property
    def chat_template(self) -> str:
        return self.get("tokenizer.chat_template", "")

    @property
    def vocab_type(self) -> str:
        return self.get("tokenizer.ggml.model", "")

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @property
    def mtp_blocks(self) -> int:
        """The MTP (NextN) blocks the model carries (``<arch>.nextn_predict_layers``), 0 without."""
        value = self.get(f"{self.architecture}.nextn_predict_layers", 0)
        return value if isinstance(value, int) and value > 0 else 0

    @property
    def builtin_drafter(self) -> str:
        """What lists say of a model that drafts for itself: "built-in drafter (MTP, 1 head)";
        "" without one."""
        n = self.mtp_blocks
        return f"built-in drafter (MTP, {n} head{'s' if n > 1 else ''})" if n else ""

    @property
    def family(self) -> str:
        """``general.basename`` ("Qwen2.5-Coder"), else the architecture ("qwen2")."""
        return str(self.get("general.basename") or self.architecture)

    @property
    def parameters(self) -> float:
        """Parameter count: ``general.size_label`` ("1.5B") when it is a plain number,
        else the sum of tensor elements."""
        from localspec.models.catalog import parse_params

        return parse_params(self.get("general.size_label")) or float(self.n_elements)


def check_gguf_file(path: str | Path) -> GGUFInfo:
    """Read the header of a GGUF file and check that its tensor data is all there.

    Raises :class:`~localspec.errors.ModelFileError` when the file is missing, is not
    GGUF (bad magic), has a malformed header, or is shorter than its tensors need
    (a truncated download).
    """
    path = Path(path)
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory, not a GGUF file")
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    try:
        with open(path, "rb") as f:
            return read_gguf_header(f, path, path.stat().st_size)
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None


def cached_header(path: str | Path) -> GGUFInfo:
    """:func:`check_gguf_file`, kept per file version (path, size, mtime): a 152k-token
    vocabulary takes ~0.4 s to parse, and the picker and the memory badge ask often."""
    path = Path(path)
    stat = path.stat() if path.is_file() else None
    return _cached_header(
        str(path.resolve()), stat.st_size if stat else -1, stat.st_mtime_ns if stat else -1
    )


@functools.lru_cache(maxsize=64)
def _cached_header(path: str, size: int, mtime_ns: int) -> GGUFInfo:
    return check_gguf_file(path)


def read_gguf_header(f: BinaryIO, path: str | Path, size: int) -> GGUFInfo:
    """Read a GGUF header from ``f``, any binary file object that reads and seeks forward
    (a file on disk, or :func:`localspec.models.remote_header.remote_gguf_header`'s ranged reader),
    whose whole length is ``size`` bytes; ``path`` names it in the info and in errors.

    Raises :class:`~localspec.errors.ModelFileError` as :func:`check_gguf_file` does;
    OSError from ``f`` itself passes through."""
    path = Path(path)
    try:
        info, data_end = _read(_Bounded(f, size), path)
    except (
        struct.error,
        ValueError,
        KeyError,
        TypeError,
        UnicodeDecodeError,
        EOFError,
        MemoryError,
        OverflowError,
    ) as exc:
        raise ModelFileError(
            f"{path}: malformed GGUF header ({type(exc).__name__}: {exc})"
        ) from None
    if data_end > size:
        raise ModelFileError(
            f"{path}: truncated GGUF file: its tensors need {data_end} bytes, the file has {size}"
        )
    return info


class _Bounded:
    """``f`` (positioned at the start of the file) refusing, before reading it, a field
    longer than what is left of the file's ``size`` bytes: a corrupt length never
    allocates, or downloads, more than the file holds."""

    def __init__(self, f: BinaryIO, size: int):
        self.f, self.left = f, size

    def _spend(self, n: int) -> None:
        if n > self.left:
            raise EOFError(
                f"a header field claims {n} bytes, more than the {self.left} left in the file"
            )
        self.left -= n

    def read(self, n: int) -> bytes:
        self._spend(n)
        return self.f.read(n)

    def skip(self, n: int) -> None:
        self._spend(n)
        self.f.seek(n, 1)

    def tell(self) -> int:
        return self.f.tell()


def _read(f: BinaryIO, path: Path) -> tuple[GGUFInfo, int]:
    if f.read(4) != _MAGIC:
        raise ModelFileError(f"{path}: not a GGUF file (no GGUF magic at the start)")
    version, n_tensors, n_kv = struct.unpack("<IQQ", _exact(f, 20))
    if n_tensors > 1 << 20 or n_kv > 1 << 20:
        raise ValueError(f"implausible counts: {n_tensors} tensors, {n_kv} keys")
    if version not in (2, 3):
        raise ModelFileError(f"{path}: unsupported GGUF version {version}")
    info = GGUFInfo(path=path, version=version, n_tensors=n_tensors)
    for _ in range(n_kv):
        key = _string(f)
        vtype = GGUFValueType(_unpack(f, "<I"))
        if vtype == GGUFValueType.ARRAY:
            value = _array(f, key)
        else:
            value = _value(f, vtype)
        if key == "tokenizer.ggml.tokens":
            info.tokens = value
        elif value is not None:
            info.metadata[key] = value

    data_size = 0
    for _ in range(n_tensors):
        name = _string(f)
        n_dims = _unpack(f, "<I")
        if n_dims > 8:
            raise ValueError(f"a tensor claims {n_dims} dimensions")
        dims = struct.unpack(f"<{n_dims}Q", _exact(f, 8 * n_dims))
        ggml_type = GGMLQuantizationType(_unpack(f, "<I"))
        offset = _unpack(f, "<Q")
        block_size, type_size = GGML_QUANT_SIZES[ggml_type]
        n_elements = 1
        for d in dims:
            n_elements *= d
        n_bytes = n_elements // block_size * type_size
        info.n_elements += n_elements
        info.tensors.append(TensorInfo(name, tuple(dims), ggml_type, n_bytes))
        data_size = max(data_size, offset + n_bytes)
    alignment = info.get("general.alignment", 32)
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or alignment <= 0
        or alignment & (alignment - 1)
    ):
        raise ValueError(f"general.alignment {alignment} is not a power of two")
    data_start = -(-f.tell() // alignment) * alignment
    return info, data_start + data_size


def _exact(f: BinaryIO, n: int) -> bytes:
    if n > _MAX_FIELD_BYTES:
        raise ValueError(f"a header field claims {n} bytes")
    data = f.read(n)
    if len(data) != n:
        raise EOFError("unexpected end of file inside the header")
    return data


def _unpack(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack(fmt, _exact(f, struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    n = _unpack(f, "<Q")
    return _exact(f, n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: GGUFValueType) -> Any:
    if vtype == GGUFValueType.STRING:
        return _string(f)
    return _unpack(f, _SCALARS[vtype])


def _array(f: BinaryIO, key: str, depth: int = 0) -> list | None:
    if depth > 8:
        raise ValueError("arrays nested more than 8 deep")
    item_type = GGUFValueType(_unpack(f, "<I"))
    n = _unpack(f, "<Q")
    if n > _MAX_ITEMS:
        raise ValueError(f"an array claims {n} items")
    if item_type == GGUFValueType.STRING:
        if key in _SKIPPED_ARRAYS:
            for _ in range(n):
                f.skip(_unpack(f, "<Q"))
            return None
        return [_string(f) for _ in range(n)]
    if item_type == GGUFValueType.ARRAY:
        return [_array(f, key, depth + 1) for _ in range(n)]
    fmt = _SCALARS[item_type]
    raw = _exact(f, struct.calcsize(fmt) * n)
    if key in _SKIPPED_ARRAYS:
        return None
    return list(struct.unpack(f"<{n}{fmt[1]}", raw))
