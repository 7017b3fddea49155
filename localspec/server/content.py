"""Reading a protocol's content parts (Anthropic's blocks, the Responses API's items and
parts): the text they hold, and the fields a part of some type needs."""

from __future__ import annotations

from collections.abc import Callable

from localspec.server.errors import FieldPath, RequestError, dotted


def missing(
    part, path: FieldPath, *names: str, noun: str, name_field: bool = False
) -> RequestError | None:
    """The error for a ``part`` (with a ``type``) lacking any of the fields ``names``:
    "PATH: a TYPE NOUN needs A, B", naming the first one missing when ``name_field``;
    None when it has them all."""
    absent = [n for n in names if getattr(part, n) is None]
    if not absent:
        return None
    message = f"{dotted(path)}: a {part.type} {noun} needs {', '.join(absent)}"
    return RequestError(message, path + ((absent[0],) if name_field else ()))


def need(part, path: FieldPath, *names: str, noun: str, name_field: bool = False) -> None:
    """Raise :func:`missing`'s error, if any."""
    error = missing(part, path, *names, noun=noun, name_field=name_field)
    if error is not None:
        raise error


def text_of(
    content, path: FieldPath, refusal: Callable[[object, FieldPath], RequestError | None], sep: str
) -> str:
    """Text content: a string (None: ""), or parts whose ``text`` is joined by ``sep``;
    ``refusal(part, path)`` gives the error for a part that is not text (None: it is)."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        error = refusal(part, path + (j,))
        if error is not None:
            raise error
        texts.append(part.text)
    return sep.join(texts)
