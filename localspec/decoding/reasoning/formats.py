"""The thinking formats: read from a chat template (:func:`detect_reasoning`), where generation
starts (:func:`prompt_start`), the text a spent budget forces (:func:`forced_close`) and its
grammar (:func:`close_grammar`); see the package docstring."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

REASONING, CONTENT, MARKER = "reasoning", "content", "marker"
EITHER = "either"  # prompt_start: the model itself decides whether to open a block

THINK_TAGS, HARMONY = "think-tags", "harmony"
HARMONY_OPEN = "<|channel|>analysis<|message|>"
HARMONY_FINAL = "<|start|>assistant<|channel|>final<|message|>"
HARMONY_ENDS = ("<|end|>", "<|call|>", "<|return|>")
HARMONY_MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>") + HARMONY_ENDS
HARMONY_HEADER_LIMIT = 256  # characters of header before the output is taken for plain text


@dataclass(frozen=True)
class ReasoningFormat:
    """How a chat template marks the model's thinking.

    ``kind``: ``"think-tags"``, ``"harmony"`` or None (no thinking).  ``open`` / ``close``:
    the text that starts and ends the thinking (``"<think>"`` / ``"</think>"``; harmony:
    ``"<|channel|>analysis<|message|>"`` / ``"<|end|>"``).  ``separator``: what the template
    writes between the close and the answer (``"\\n\\n"``; harmony: the final channel's
    header).  ``opens_in_prompt``: the template's generation prompt opens the block itself.
    ``reads_enable_thinking`` / ``reads_reasoning_effort``: the template reads that
    variable (pass it to the renderer; Qwen3 reads the first, gpt-oss the second).
    """

    kind: str | None = None
    open: str = ""
    close: str = ""
    separator: str = ""
    opens_in_prompt: bool = False
    reads_enable_thinking: bool = False
    reads_reasoning_effort: bool = False

    @property
    def markers(self) -> tuple[str, ...]:
        """The marker strings a vocabulary may hold as single (special) tokens."""
        if self.kind == HARMONY:
            return HARMONY_MARKERS
        return (self.open, self.close) if self.kind else ()


NO_REASONING = ReasoningFormat()

_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
_GENERATION_PROMPT = re.compile(r"\badd_generation_prompt\b")
_AFTER_CLOSE = re.compile(r"</think>((?:\\n|\n)+)")


def detect_reasoning(template: str | None) -> ReasoningFormat:
    """The reasoning format of a chat template (Jinja text, as in a GGUF's
    ``tokenizer.chat_template``); :data:`NO_REASONING` for None, "" or a template that
    writes no thinking.  Reads the text only (never renders it): a template that mentions
    ``<think>`` and ``</think>`` is think-tags, one with ``<|channel|>`` and ``analysis``
    harmony; the generation prompt is the text after its last ``add_generation_prompt``."""
    if not template:
        return NO_REASONING
    text = _COMMENT.sub("", template)
    generation = text[_last_match(_GENERATION_PROMPT, text) :]
    reads_effort = "reasoning_effort" in text
    if "<|channel|>" in text and "analysis" in text:
        return ReasoningFormat(
            HARMONY,
            HARMONY_OPEN,
            HARMONY_ENDS[0],
            HARMONY_FINAL,
            opens_in_prompt=HARMONY_OPEN in generation,
            reads_reasoning_effort=reads_effort,
        )
    if "<think>" not in text or "</think>" not in text:
        return NO_REASONING
    separator = _AFTER_CLOSE.search(text)
    opens = generation.find("<think>")
    return ReasoningFormat(
        THINK_TAGS,
        "<think>",
        "</think>",
        separator.group(1).replace("\\n", "\n") if separator else "\n\n",
        opens_in_prompt=opens >= 0 and "</think>" not in generation[opens:],
        reads_enable_thinking=re.search(r"\benable_thinking\b", text) is not None,
        reads_reasoning_effort=reads_effort,
    )


def _last_match(pattern: re.Pattern, text: str) -> int:
    start = len(text)
    for match in pattern.finditer(text):
        start = match.start()
    return start


def prompt_start(fmt: ReasoningFormat, prompt: str) -> str:
    """Where generation starts after ``prompt`` (the rendered chat, generation prompt
    included): ``"reasoning"`` when the prompt ends inside an open block (``…<think>\\n``),
    ``"content"`` when the answer starts at once (no format, or the prompt closed the block:
    Qwen3 with ``enable_thinking=False``; harmony: a non-analysis channel opened), else
    ``"either"`` (the model opens a block or not)."""
    if fmt.kind is None:
        return CONTENT
    tail = prompt.rstrip()
    if tail.endswith(fmt.open):
        return REASONING
    if fmt.kind == THINK_TAGS and tail.endswith(fmt.close):
        return CONTENT
    if fmt.kind == HARMONY and tail.endswith("<|message|>"):
        return CONTENT
    return EITHER


def forced_close(fmt: ReasoningFormat, tail: str = "", message: str = "") -> str:
    """The text that ends the thinking and starts the answer, for a budget that is spent:
    think-tags ``"\\n</think>\\n\\n"`` (no leading newline when the thinking's text ``tail``
    already ends with one: the template writes ``'\\n</think>\\n\\n'``); harmony
    ``"<|end|><|start|>assistant<|channel|>final<|message|>"``; "" without a format.
    ``message`` (llama.cpp's ``--reasoning-budget-message``) is written first, on a line of its
    own in think-tags, so the model reads why its thinking ends and goes on to its answer."""
    if fmt.kind is None:
        return ""
    if message and fmt.kind == THINK_TAGS:
        lead = "" if tail.endswith("\n") or not tail else "\n"
        return lead + message.strip("\n") + "\n" + fmt.close + fmt.separator
    lead = "\n" if fmt.kind == THINK_TAGS and not tail.endswith("\n") else ""
    return lead + message.strip("\n") + fmt.close + fmt.separator


def close_grammar(forced: str, special: Collection[str] = (), answer: str = r"/(.|\n)*/") -> str:
    """An llguidance Lark grammar: the text ``forced`` (from :func:`forced_close` or
    :meth:`ChannelSplitter.forced_close`), then ``answer`` (a Lark expression: free text by
    default, or e.g. ``%json {…}`` for a schema).  Each string of ``special`` found in
    ``forced`` is written as a special-token reference (``<|end|>``, ``</think>``): pass the
    markers the vocabulary holds as single tokens, since llguidance keeps such tokens apart
    from text.  Compile it with :meth:`Constraint.compile`; the grammar drafter then drafts
    the forced text, verified like any draft."""
    pieces = _split_special(forced, sorted(special, key=len, reverse=True))
    items = [p if p in special else json.dumps(p, ensure_ascii=False) for p in pieces]
    return "start: " + " ".join(items + ["answer"]) + "\nanswer: " + answer + "\n"


def _split_special(text: str, special: list[str]) -> list[str]:
    if not special or not text:
        return [text] if text else []
    pattern = re.compile("|".join(map(re.escape, special)))
    pieces, at = [], 0
    for match in pattern.finditer(text):
        pieces += [text[at : match.start()]] if match.start() > at else []
        pieces.append(match.group())
        at = match.end()
    return pieces + ([text[at:]] if at < len(text) else [])


def single_token_markers(
    fmt: ReasoningFormat, tokenize: Callable[[str], Sequence[int]]
) -> dict[int, str]:
    """token id -> marker text for each of ``fmt.markers`` that ``tokenize`` (text -> list of
    ids, special tokens parsed) turns into exactly one token."""
    found = {}
    for marker in fmt.markers:
        ids = list(tokenize(marker))
        if len(ids) == 1:
            found[ids[0]] = marker
    return found
