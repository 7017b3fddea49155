"""Reasoning models: the thinking format read from a chat template, the stream split into
channels, and the text a thinking budget forces.

Two formats are known (design.md section 14):

- ``think-tags``: ``<think>…</think>`` then the answer (Qwen3, QwQ, DeepSeek-R1 and its
  distills).  Some templates open the block in the generation prompt (DeepSeek-R1 distills,
  QwQ: ``<think>\\n``); Qwen3 reads ``enable_thinking`` and, when it is false, writes an empty
  block (``<think>\\n\\n</think>\\n\\n``) so the answer starts at once.
- ``harmony`` (gpt-oss): messages ``<|channel|>NAME<|message|>…<|end|>``; the ``analysis``
  channel is the thinking, ``final`` (and ``commentary``, tool calls) the answer.

Where generation starts is read from the rendered prompt's tail (:func:`prompt_start`),
not from the template: a template can open or close the block depending on its arguments.

The splitter (:func:`channel_splitter`) is fed each emitted token's decoded text in order
and says which channel each piece belongs to: ``reasoning``, ``content``, or ``marker`` (the
format's own tags and the newlines the template writes around them, part of neither text).
Text that may be the start of a marker is held back until it is decided, as stop strings
are.  Pure Python, a few string operations per token; the answer channel passes text
through untouched.

A thinking budget is enforced by forcing the close at the budget (:meth:`ChannelSplitter.
forced_close`, :func:`close_grammar`) rather than by one grammar over the whole block:
llguidance's ``max_tokens`` on a rule disables rollback, which the speculative loop needs
for every verify, and a regex bound ``/(.|\\n){0,N}/`` counts bytes, not tokens.
"""

from localspec.decoding.reasoning.formats import (
    CONTENT,
    EITHER,
    HARMONY,
    MARKER,
    NO_REASONING,
    REASONING,
    THINK_TAGS,
    ReasoningFormat,
    close_grammar,
    detect_reasoning,
    forced_close,
    prompt_start,
    single_token_markers,
)
from localspec.decoding.reasoning.splitters import ChannelSplitter, Split, channel_splitter

__all__ = [
    "CONTENT",
    "EITHER",
    "HARMONY",
    "MARKER",
    "NO_REASONING",
    "REASONING",
    "THINK_TAGS",
    "ChannelSplitter",
    "ReasoningFormat",
    "Split",
    "channel_splitter",
    "close_grammar",
    "detect_reasoning",
    "forced_close",
    "prompt_start",
    "single_token_markers",
]
