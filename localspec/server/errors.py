"""Errors with their HTTP status: :class:`APIError` (answered in OpenAI's shape
``{"error": {message, type, param, code}}`` unless a protocol maps it to its own) and
:class:`RequestError`, a 400 that names the request's field by its path; the conversions
from localspec's own errors and pydantic's."""

from __future__ import annotations

import re

from pydantic import ValidationError
from starlette.responses import JSONResponse

from localspec.errors import ContextOverflowError, InvalidOptionError, LocalspecError

FieldPath = tuple[str | int, ...]


class APIError(Exception):
    """An error answered in OpenAI's shape.  ``retry``: whether a retry may help (the
    SDK retries 408/409/429/5xx unless told ``x-should-retry: false``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry: bool = False,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )
        self.retry, self.headers = retry, headers or {}

    def response(self) -> JSONResponse:
        """OpenAI's shape (chat, completions, Responses, llama-server's endpoints)."""
        headers = {"x-should-retry": "true" if self.retry else "false", **self.headers}
        body = {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
        return JSONResponse(body, status_code=self.status, headers=headers)


class RequestError(APIError):
    """A request the server will not run (400): ``path`` is the field at fault as the
    protocol's own body names it, e.g. ``("tools", 4, "function", "parameters")`` (empty:
    the request as a whole); OpenAI's shape gives it as ``param``
    ("tools.4.function.parameters")."""

    def __init__(
        self,
        message: str,
        path: FieldPath = (),
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(400, message, type=kind, param=dotted(path), code=code)
        self.path = tuple(path)


def dotted(path: FieldPath) -> str | None:
    """``("input", 0, "content")`` as ``"input.0.content"`` (None for the empty path)."""
    return ".".join(str(p) for p in path) or None


def path_of(param: str | None) -> FieldPath:
    """A dotted field name ("tools.0.function.parameters") as a path, indexes as ints."""
    return tuple(int(p) if p.isdigit() else p for p in param.split(".")) if param else ()


def from_localspec_error(
    exc: LocalspecError, prompt_path: FieldPath = ("messages",)
) -> RequestError:
    """A lower layer's refusal as a 400: a prompt over the context names ``prompt_path``;
    an error that carries its own ``param`` names that; any other names no field."""
    if isinstance(exc, ContextOverflowError):
        return RequestError(str(exc), prompt_path, code="context_length_exceeded")
    param = exc.param if isinstance(exc, InvalidOptionError) else None
    return RequestError(str(exc), path_of(param), code="invalid_value")


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none"}


def _field_path(loc: tuple) -> FieldPath:
    """A pydantic error location as the request's own field path (messages, 0, role),
    without the names of the union members tried ("str", "list[_TextPart]", ...)."""
    return tuple(
        p if isinstance(p, int) else str(p)
        for p in loc
        if isinstance(p, int)
        or (re.fullmatch(r"[a-z_][a-z0-9_]*", str(p)) and str(p) not in _TYPE_NAMES)
    )


def from_validation_error(exc: ValidationError) -> RequestError:
    """The most specific of pydantic's errors: for a value that matched no member of a
    union (``input``: a string or a list of items), the one from inside the member it came
    closest to (``input.0.role``), not "Input should be a valid string"."""
    first = max(exc.errors(), key=lambda e: len(dotted(_field_path(e["loc"])) or ""))
    if first["type"] in ("json_invalid", "json_type"):
        return RequestError(
            "We could not parse the JSON body of your request.", code="invalid_json"
        )
    path = _field_path(first["loc"])
    reason = first["msg"].removeprefix(
        "Value error, "
    )  # pydantic's prefix for a validator's ValueError
    message = reason if not path else f"{dotted(path)}: {reason}"
    return RequestError(f"Invalid request: {message}", path, code="invalid_value")
