"""Errors in the OpenAI shape ``{"error": {message, type, param, code}}``, with the
HTTP status, and the conversions from localspec's own errors and pydantic's."""

from __future__ import annotations

import re

from pydantic import ValidationError
from starlette.responses import JSONResponse

from localspec.errors import ContextOverflowError, LocalspecError


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
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.retry, self.headers = retry, headers or {}

    def response(self) -> JSONResponse:
        headers = {"x-should-retry": "true" if self.retry else "false", **self.headers}
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=headers)


def from_localspec_error(exc: LocalspecError, prompt_param: str = "messages") -> APIError:
    if isinstance(exc, ContextOverflowError):
        return APIError(400, str(exc), param=prompt_param, code="context_length_exceeded")
    return APIError(400, str(exc), code="invalid_value")


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none"}


def _field_path(loc: tuple) -> str | None:
    """A pydantic error location as the request's own field path ("messages.0.role"),
    without the names of the union members tried ("str", "list[_TextPart]", ...)."""
    parts = [
        str(p)
        for p in loc
        if isinstance(p, int) or (re.fullmatch(r"[a-z_][a-z0-9_]*", str(p)) and str(p) not in _TYPE_NAMES)
    ]
    return ".".join(parts) or None


def from_validation_error(exc: ValidationError) -> APIError:
    """The most specific of pydantic's errors: for a value that matched no member of a
    union (``input``: a string or a list of items), the one from inside the member it came
    closest to (``input.0.role``), not "Input should be a valid string"."""
    first = max(exc.errors(), key=lambda e: len(_field_path(e["loc"]) or ""))
    if first["type"] in ("json_invalid", "json_type"):
        return APIError(400, "We could not parse the JSON body of your request.", code="invalid_json")
    param = _field_path(first["loc"])
    reason = first["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
    message = reason if param is None else f"{param}: {reason}"
    return APIError(400, f"Invalid request: {message}", param=param, code="invalid_value")
