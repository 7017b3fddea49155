"""Fill-in-the-middle prompts from a GGUF's FIM tokens.

The layout is the one llama.cpp's server builds for ``/infill`` and Qwen2.5-Coder was
trained on (repository level)::

    <|repo_name|>myproject\\n
    <|file_sep|>NAME\\nTEXT            one per extra chunk (other open files)
    <|file_sep|>filename\\n
    <|fim_prefix|>PREFIX<|fim_suffix|>SUFFIX<|fim_middle|>

``<|repo_name|>`` and ``<|file_sep|>`` appear only where the vocabulary has them
(llama.cpp's ``fim_rep`` / ``fim_sep``); without ``fim_sep`` the chunks are joined with a
plain ``--- snippet ---`` line, as llama.cpp does.  The model ends the middle with an
end-of-generation token (``<|endoftext|>``, or one of the FIM tokens llama.cpp counts as
such), which the loop already stops at.  Everything the middle may repeat (the suffix,
the other files) is in the prompt, so the suffix drafter indexes it for the request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from localspec.errors import InvalidOptionError

REPO_NAME = "myproject"
CURRENT_FILE = "filename"  # llama.cpp's placeholder for the file being edited
SNIPPET = "\n\n--- snippet ---\n\n"


def check_extra(extra) -> list[dict]:
    """``extra``: ``[{"text": str, "filename": str (optional)}]`` (llama-server's
    ``input_extra``); InvalidOptionError for anything else."""
    if extra is None:
        return []
    if not isinstance(extra, (list, tuple)):
        raise InvalidOptionError(
            f"input_extra must be a list of {{'filename', 'text'}} objects, got {extra!r}"
        )
    for chunk in extra:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str):
            raise InvalidOptionError(f"each input_extra chunk needs a string 'text', got {chunk!r}")
        if not isinstance(chunk.get("filename", ""), str):
            raise InvalidOptionError(
                f"an input_extra chunk's filename must be a string, got {chunk!r}"
            )
    return list(extra)


class FimPrompt(NamedTuple):
    tokens: list[int]
    truncated: bool  # the prefix or the suffix was cut to fit (dropped extra chunks do not count)


def engine_fim_prompt(
    engine, prefix: str, suffix: str, extra: Sequence[dict] = (), reserve: int = 512
) -> FimPrompt:
    """:func:`fim_prompt` with ``engine``'s (a :class:`~localspec.llama.engine.Engine`) FIM
    tokens, tokenizer and BOS, fitted to its context less ``reserve`` tokens for the middle."""
    return fim_prompt(
        engine.fim_tokens(),
        lambda text: engine.tokenize(text, add_special=False),
        prefix,
        suffix,
        extra,
        budget=engine.n_ctx - reserve,
        bos=engine.tokenize("", add_special=True),
    )


def fim_prompt(
    fim: dict[str, int],
    tokenize: Callable[[str], list[int]],
    prefix: str,
    suffix: str,
    extra: Sequence[dict] = (),
    budget: int | None = None,
    bos: Sequence[int] = (),
) -> FimPrompt:
    """The prompt's token ids, and whether the prefix or suffix was cut.  ``fim``: the model's FIM
    token ids by llama.cpp's names (``pre``, ``suf``, ``mid``, ``rep``, ``sep``);
    ``tokenize(text)``: ids without special tokens; ``bos``: what goes before the prefix when the
    model adds a BOS.  Over
    ``budget`` tokens, the extra chunks go first (oldest first), then the prefix is cut from
    its start and the suffix from its end, 3 : 1.  InvalidOptionError for a model without
    the ``pre`` / ``suf`` / ``mid`` tokens."""
    missing = [name for name in ("pre", "suf", "mid") if name not in fim]
    if missing:
        raise InvalidOptionError(
            "this model has no fill-in-the-middle tokens (its vocabulary lacks fim_"
            + "/".join(missing)
            + ")"
        )
    header, chunks, tail = _context_tokens(fim, tokenize, check_extra(extra))
    head = [fim["pre"]] if not bos else [*bos, fim["pre"]]
    pre, suf = tokenize(prefix), tokenize(suffix)
    whole = len(pre) + len(suf)
    if budget is not None:
        chunks, pre, suf = _fit(chunks, pre, suf, budget - len(header) - len(tail) - len(head) - 2)
    context = header + [token for chunk in chunks for token in chunk] + tail
    return FimPrompt(
        context + head + pre + [fim["suf"], *suf, fim["mid"]], len(pre) + len(suf) < whole
    )


def _context_tokens(fim: dict[str, int], tokenize, extra: list[dict]):
    """(the repository header, one token list per chunk, the current file's header)."""
    header = [fim["rep"], *tokenize(REPO_NAME + "\n")] if "rep" in fim else []
    chunks = []
    for chunk in extra:
        if "sep" in fim:
            chunk_header = [fim["sep"], *tokenize(chunk.get("filename", "tmp") + "\n")]
        else:
            chunk_header = tokenize(SNIPPET)
        chunks.append(chunk_header + tokenize(chunk.get("text", "")))
    tail = [fim["sep"], *tokenize(CURRENT_FILE + "\n")] if "sep" in fim else []
    return header, chunks, tail


def _fit(chunks: list[list[int]], pre: list[int], suf: list[int], room: int):
    """Drop chunks, oldest first, then cut the prefix's start and the suffix's end."""
    while chunks and sum(map(len, chunks)) + len(pre) + len(suf) > room:
        chunks = chunks[1:]
    if len(pre) + len(suf) > room:
        keep_suf = min(len(suf), max(0, room // 4))
        keep_pre = max(0, room - keep_suf)
        pre, suf = pre[len(pre) - keep_pre :] if keep_pre else [], suf[:keep_suf]
    return chunks, pre, suf
