"""Syntax colours for fenced code blocks, from Pygments: a block's lines as runs of
(column, text, style), the style "tok:<token type>" (empty for plain text), and each
token type's foreground in a light and a dark Pygments style."""

from __future__ import annotations

from functools import lru_cache

LIGHT_STYLE, DARK_STYLE = "default", "github-dark"
PLAIN_TYPES = {"Text", "Text.Whitespace", "Error", "Generic", ""}

Line = tuple[tuple[int, str, str], ...]


def code_lines(code: str, lang: str, piecewise: bool = False) -> list[Line]:
    """One entry per line of ``code`` (split on "\\n"): its runs (column, text, style).
    ``piecewise``: lex the code in pieces cut where a line at column 0 follows a blank
    line (a new top-level definition), each piece cached, so that a block that keeps
    growing costs one piece per update; the full lex (``piecewise`` False) may differ
    only where a piece started inside a multi-line string."""
    if not piecewise:
        return list(_lexed(code, lang))
    lines = code.split("\n")
    cuts = [0] + [
        k for k in range(1, len(lines)) if not lines[k - 1].strip() and lines[k][:1].strip()
    ]
    out: list[Line] = []
    for a, b in zip(cuts, cuts[1:] + [len(lines)]):
        out.extend(_lexed("\n".join(lines[a:b]), lang))
    return out


@lru_cache(maxsize=64)
def _lexed(code: str, lang: str) -> tuple[Line, ...]:
    tokens = _tokens(code, lang)
    lines: list[list[tuple[int, str, str]]] = [[]]
    col = 0
    for name, value in tokens:
        style = "" if name in PLAIN_TYPES else "tok:" + name
        for n, part in enumerate(value.split("\n")):
            if n:
                lines.append([])
                col = 0
            if not part:
                continue
            runs = lines[-1]
            if runs and runs[-1][2] == style:
                runs[-1] = (runs[-1][0], runs[-1][1] + part, style)
            else:
                runs.append((col, part, style))
            col += len(part)
    return tuple(tuple(line) for line in lines)


def _tokens(code: str, lang: str) -> list[tuple[str, str]]:
    """(token type without its "Token." prefix, text) pairs covering ``code`` exactly."""
    lexer = _lexer(lang.lower())
    if lexer is not None:
        tokens = [(str(t)[6:], v) for t, v in lexer.get_tokens(code)]
        if "".join(v for _, v in tokens) == code:
            return tokens
    return [("", code)]


@lru_cache(maxsize=64)
def _lexer(lang: str):
    """The Pygments lexer for a fence's language name, None when unknown or absent."""
    if not lang:
        return None
    try:
        from pygments.lexers import get_lexer_by_name
        from pygments.util import ClassNotFound
    except ImportError:
        return None
    try:
        return get_lexer_by_name(lang, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


@lru_cache(maxsize=2048)
def token_colour(style: str, dark: bool) -> str | None:
    """The foreground ("#rrggbb") of a run's style ("tok:Keyword") in the light or dark
    Pygments style, None for plain text (the caller's colour)."""
    theme = _style(dark)
    if theme is None or not style.startswith("tok:"):
        return None
    from pygments.token import Token

    ttype = Token
    for part in style[4:].split("."):
        ttype = getattr(ttype, part)
    colour = theme.style_for_token(ttype)["color"]
    return "#" + colour if colour else None


@lru_cache(maxsize=2)
def _style(dark: bool):
    try:
        from pygments.styles import get_style_by_name
        from pygments.util import ClassNotFound
    except ImportError:
        return None
    try:
        return get_style_by_name(DARK_STYLE if dark else LIGHT_STYLE)
    except ClassNotFound:  # an older Pygments
        return get_style_by_name("monokai" if dark else "default")


def warm_up(lang: str = "python") -> None:
    """Make a lexer and the styles ahead of the first code block (about 0.1 s at first use)."""
    _lexer(lang)
    token_colour("tok:Keyword", False)
    token_colour("tok:Keyword", True)
