"""Exceptions raised by localspec, and :func:`require_int`, the one check of an integer option.

Every error a user can cause derives from :class:`LocalspecError`; the CLI prints
those as one line (no traceback) and exits with status 2.  Anything else is a bug.
"""

from __future__ import annotations


class LocalspecError(Exception):
    """Base class of the errors a user can cause and fix."""


class InvalidOptionError(LocalspecError, ValueError):
    """A generation or load option is out of range (e.g. ``draft_min > draft_max``).
    ``param``: the option's field path, dotted (``"tools.0.function.parameters"``), where the
    check knows it; a server names it in its error."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ModelFileError(LocalspecError):
    """A model file is missing, unreadable, not GGUF, or truncated."""


class UnsupportedModelError(LocalspecError):
    """The model loads but cannot be used for speculation (e.g. a recurrent model
    whose KV cache cannot be trimmed)."""


class IncompatibleDraftError(LocalspecError):
    """The draft model's vocabulary does not match the target's.

    ``reasons`` lists each failed check in plain words."""

    def __init__(self, message: str, reasons: list[str]):
        super().__init__(message)
        self.reasons = reasons


class ContextOverflowError(LocalspecError):
    """The prompt does not fit into the context window (``n_ctx`` tokens)."""


class CatalogError(LocalspecError):
    """``models.toml`` is malformed or names an unknown model pair."""


class DownloadError(LocalspecError):
    """A model file could not be fetched from any source, or failed its sha256 check."""


class DownloadCancelled(DownloadError):
    """The caller cancelled a download; nothing of it is kept."""


class EngineError(LocalspecError):
    """llama.cpp reported a failure while decoding or trimming the KV cache."""


def require_int(
    name: str,
    value,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    what: str = "an integer",
    unit: str = "",
    expected: str | None = None,
    error: type[Exception] = InvalidOptionError,
) -> int:
    """``value`` when it is an int (a bool is not) from ``minimum`` to ``maximum`` (None: no
    bound); else raises ``error``: "NAME must be EXPECTED UNIT, got VALUE!r".  EXPECTED is by
    default ``what`` and the bounds ("an integer", "an integer >= 1", "an integer from 1 to
    64"; ``what=""`` for a value already known to be an int); ``unit`` (e.g. " tokens") follows.
    An :class:`InvalidOptionError` carries NAME as its ``param``."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    ):
        return value
    if expected is None:
        if minimum is not None and maximum is not None:
            bounds = f"from {minimum} to {maximum}"
        elif minimum is not None or maximum is not None:
            bounds = f">= {minimum}" if minimum is not None else f"<= {maximum}"
        else:
            bounds = ""
        expected = f"{what} {bounds}".strip()
    message = f"{name} must be {expected}{unit}, got {value!r}"
    if issubclass(error, InvalidOptionError):
        raise error(message, param=name)  # the option's name: a server maps it to its field
    raise error(message)
