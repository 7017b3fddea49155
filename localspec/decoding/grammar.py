"""Constrained decoding inside the speculative loop, with llguidance.

A :class:`Constraint` follows one generation through its grammar (an llguidance
``LLMatcher``).  Every round:

- each draft is cut at its first token the grammar forbids (:meth:`Constraint.allowed`);
- the tokens the grammar forces next are themselves a draft (:meth:`Constraint.forced`,
  proposed by :class:`~localspec.decoding.drafters.grammar.GrammarDrafter`), verified like
  any other, so the text stays the target's own;
- each verify row is masked with the grammar's state after the draft tokens before it
  (:meth:`Constraint.rows`): p' = p restricted to allowed tokens and renormalised, so greedy
  is the argmax of the masked row and sampling keeps the constrained distribution exactly
  (the rejection rule applied to p' and to a q masked the same way);
- the emitted tokens are then consumed (:meth:`Constraint.settle`).

Masks are llguidance's bitmasks (one bit per token, little-endian), computed lazily: greedy
verification reads rows only up to the first mismatch.  Sources: llguidance's Python API
(``LLMatcher``: ``validate_tokens``, ``consume_tokens``, ``rollback``, ``compute_bitmask``,
``compute_ff_tokens``); design.md section 12.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from localspec.errors import EngineError, InvalidOptionError


def json_schema_grammar(schema: dict | str | None) -> str:
    """An llguidance grammar for JSON matching ``schema`` (a JSON Schema as a dict or its
    text; None: any JSON object).  Keys and separators are fixed (``", "`` and ``": "``), so
    the grammar forces them.  Raises InvalidOptionError when ``schema`` is not a JSON object."""
    from llguidance import LLMatcher

    if schema is None:
        schema = {"type": "object"}
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise InvalidOptionError(f"the JSON schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise InvalidOptionError(f"a JSON schema must be an object, got {type(schema).__name__}")
    try:
        grammar = LLMatcher.grammar_from_json_schema(
            schema, overrides={"whitespace_flexible": False}
        )
    except ValueError as exc:
        raise InvalidOptionError(f"the JSON schema cannot be compiled: {exc}") from None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise InvalidOptionError(f"the JSON schema cannot be compiled: {'; '.join(messages)}")
    return grammar


def response_format_grammar(response_format: Any) -> tuple[str | None, Any]:
    """(llguidance grammar or None, pydantic model class or None) for OpenAI's
    ``response_format``: ``{"type": "text"}`` / None (free text), ``{"type": "json_object"}``
    (any JSON object), ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``,
    or a pydantic ``BaseModel`` subclass (its JSON schema; the answer is parsed into it).
    Raises InvalidOptionError for anything else."""
    if response_format is None:
        return None, None
    if isinstance(response_format, type) and hasattr(response_format, "model_json_schema"):
        return json_schema_grammar(response_format.model_json_schema()), response_format
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None, None
    if kind == "json_object":
        return json_schema_grammar(None), None
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise InvalidOptionError("response_format json_schema needs {'name', 'schema'}")
        return json_schema_grammar(spec["schema"]), None
    raise InvalidOptionError(
        "response_format must be {'type': 'text' | 'json_object' | 'json_schema', ...} "
        f"or a pydantic model class, got {response_format!r}"
    )


@dataclass(frozen=True)
class LazyTrigger:
    """What wakes a lazy grammar: ``token`` (a special token that is the grammar's first,
    ``<tool_call>``) and/or ``pattern``, a compiled regex over the UTF-8 bytes emitted so far
    whose group ``start`` is where the grammar's text begins (e.g. a fenced JSON call's
    opening, :func:`~localspec.decoding.tool_fallback.wake_pattern`)."""

    token: int | None = None
    pattern: re.Pattern[bytes] | None = None


class _Asleep:
    """The tokens a dormant constraint has seen and their text, for its pattern."""

    LOOK_BACK = 512  # bytes before the end where a match may start

    def __init__(self):
        self.tokens: list[int] = []
        self.ends: list[int] = []  # byte offset after each token
        self.text = bytearray()
        self.scan_from = 0  # a match must start here or later (after one that failed)

    def add(self, tokens: Sequence[int], pieces: list[bytes]) -> None:
        for token, piece in zip(tokens, pieces):
            self.tokens.append(token)
            self.text += piece
            self.ends.append(len(self.text))

    def match(self, pattern: re.Pattern[bytes], extra: bytes = b"") -> tuple[int, int] | None:
        """(start of group ``start``, end) of the first match in the text and then
        ``extra``, as byte offsets, or None.  Only the last LOOK_BACK bytes are searched; a
        ``^`` matches only at the text's real start."""
        base = max(self.scan_from, len(self.text) - self.LOOK_BACK)
        lead = 1 if base > 0 else 0
        m = pattern.search(bytes(self.text[base - lead :]) + extra, lead)
        return None if m is None else (base - lead + m.start("start"), base - lead + m.end())

    def token_at(self, offset: int) -> int:
        """The index of the token whose bytes hold ``offset``."""
        return bisect.bisect_right(self.ends, offset)


class Constraint:
    """One generation's grammar state over a vocabulary of ``n_vocab`` tokens.

    Built by :meth:`compile`; raises InvalidOptionError for a grammar llguidance rejects
    (the message carries llguidance's reason).  Not thread-safe: the loop's thread only.
    """

    def __init__(
        self,
        matcher: Any,
        n_vocab: int,
        tokenizer: Any = None,
        trigger: int | LazyTrigger | None = None,
    ):
        self._matcher = matcher
        self._tokenizer = tokenizer
        self.n_vocab = n_vocab
        # A lazy grammar (tool calls with tool_choice "auto") sleeps until the model itself
        # emits ``trigger`` (``<tool_call>``, the grammar's first token) or text that matches
        # the trigger's pattern; drafts stop before either.
        lazy = (
            trigger
            if isinstance(trigger, LazyTrigger) or trigger is None
            else LazyTrigger(token=trigger)
        )
        self.trigger = lazy.token if lazy is not None else None
        self._pattern = lazy.pattern if lazy is not None else None
        self.dormant = lazy is not None
        self._asleep = _Asleep()  # the text emitted while dormant, for the pattern
        self.consumed = 0  # tokens consumed since the grammar woke (the call's length in tokens)

    @classmethod
    def compile(
        cls, tokenizer: Any, grammar: str, n_vocab: int, trigger: int | LazyTrigger | None = None
    ) -> Constraint:
        from llguidance import LLMatcher

        is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
        if is_error:
            raise InvalidOptionError(f"the grammar cannot be compiled: {'; '.join(messages)}")
        matcher = LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise InvalidOptionError(f"the grammar cannot be compiled: {matcher.get_error()}")
        return cls(matcher, n_vocab, tokenizer, trigger)

    # --- drafting ---------------------------------------------------------------------

    def allowed(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` (from the current state on) the grammar allows."""
        if self.dormant:
            n = next((i for i, t in enumerate(tokens) if t == self.trigger), len(tokens))
            return self._before_pattern(tokens[:n]) if self._pattern is not None else n
        return self._matcher.validate_tokens(list(tokens)) if tokens else 0

    def forced(self, limit: int = 32) -> list[int]:
        """Up to ``limit`` tokens the grammar forces next (may be []): the forced bytes (a
        key and its quotes and colon) as the model's tokenizer writes them, cut where the
        grammar would refuse them, but for their last token, after any special token that
        is the only one allowed (``<tool_call>``).  The last token is left out because the
        model often writes it merged with the free text after it (``":"`` then ``Alice``
        as ``":`` and ``"Alice``): drafted, it was rejected, and its misses taught the
        policy to distrust every forced token.  llguidance's own ``compute_ff_tokens`` is
        shorter still: it stops before any token another tokenization could split (on a
        3-key schema: 9 forced tokens of 14 from the bytes, 5 from ``compute_ff_tokens``)."""
        out: list[int] = []
        consumed = 0
        if self.dormant:
            return out
        try:
            while len(out) < limit:
                forced = self._matcher.compute_ff_bytes()
                if forced and self._tokenizer is not None:
                    tokens = list(self._tokenizer.tokenize_bytes(forced))
                    out += tokens[: self.allowed(tokens)][:-1]
                    break
                only = np.flatnonzero(self.mask())
                if len(only) != 1:
                    break
                out.append(int(only[0]))
                consumed += self.advance(out[-1:])
        finally:
            self.back(consumed)
        return out[:limit]

    def mask(self) -> np.ndarray:
        """bool ``(n_vocab,)``: the tokens allowed next."""
        bits = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)

    def masked(self, row: np.ndarray) -> np.ndarray:
        """A copy of the float32 logits ``row`` with forbidden tokens at -inf.  Raises
        EngineError when the grammar allows nothing (it has failed)."""
        if self.dormant:
            return row
        allowed = self.mask()
        if not allowed.any():
            raise EngineError(
                f"the grammar allows no token here: {self._matcher.get_error() or 'it has ended'}"
            )
        return np.where(allowed, row[: self.n_vocab], np.float32(-np.inf))

    def advance(self, tokens: Sequence[int]) -> int:
        """Consume ``tokens``; returns how many were consumed (undo with :meth:`back`).  Once
        the grammar has ended, the rest (end-of-generation tokens, the only ones its mask
        allows then) are not consumed.  EngineError for a token the grammar refuses."""
        n = 0
        for token in [] if self.dormant else tokens:
            if self._matcher.is_stopped():
                break
            if not self._matcher.consume_token(token):
                raise EngineError(f"the grammar refused token {token}: {self._matcher.get_error()}")
            n += 1
        return n

    def back(self, n: int) -> None:
        if n and not self._matcher.rollback(n):
            raise EngineError(f"the grammar could not roll back {n} tokens")

    # --- verifying --------------------------------------------------------------------

    def rows(self, logits: np.ndarray, draft_tokens: Sequence[int]) -> MaskedRows:
        """The verify batch ``logits`` (float32 ``(k + 1, n_vocab)``) with each row masked
        by the state after the draft tokens before it; read rows in ascending order, then
        call :meth:`settle`."""
        return MaskedRows(self, logits, list(draft_tokens))

    def settle(self, rows: MaskedRows | None, emitted: Sequence[int]) -> None:
        """Undo what ``rows`` consumed, then consume the tokens really emitted."""
        if rows is not None:
            self.back(rows.consumed)
            rows.consumed = 0
        if self.dormant and self.trigger in emitted:
            self.dormant = False
            emitted = emitted[list(emitted).index(self.trigger) :]
        elif self.dormant and self._pattern is not None:
            self._wake_on_text(emitted)
            return
        self.consumed += self.advance(emitted)

    # --- the text trigger -------------------------------------------------------------

    def _bytes(self, tokens: Sequence[int]) -> list[bytes]:
        return [self._tokenizer.decode_bytes([t]) for t in tokens]

    def _before_pattern(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` can follow the text so far before one completes a match
        of the trigger's pattern (that token is left to the target: the mask applies from
        the token after it)."""
        extra = b""
        for i, piece in enumerate(self._bytes(tokens)):
            extra += piece
            if self._asleep.match(self._pattern, extra) is not None:
                return i
        return len(tokens)

    def _wake_on_text(self, emitted: Sequence[int]) -> None:
        """Note ``emitted``; when the text now matches the pattern, wake: consume the tokens
        from the one that holds the match's start (group ``start``) on.  The grammar's
        first rule takes that token's text before the start; if it refuses them (a token
        that joins the opening to text the grammar cannot take), it sleeps on, and the
        pattern is looked for after this match."""
        asleep = self._asleep
        asleep.add(emitted, self._bytes(emitted))
        found = asleep.match(self._pattern)
        if found is None:
            return
        tokens = asleep.tokens[asleep.token_at(found[0]) :]
        n = self._matcher.try_consume_tokens(tokens)
        if n == len(tokens):
            self.dormant = False
            self.consumed += n
            return
        self.back(n)
        asleep.scan_from = found[1]

    @property
    def accepting(self) -> bool:
        """True when the text so far is complete under the grammar (a sleeping one is)."""
        return self.dormant or bool(self._matcher.is_accepting())


class MaskedRows(Sequence):
    """Rows of a verify batch masked by the grammar, each computed when first read."""

    def __init__(self, constraint: Constraint, logits: np.ndarray, draft_tokens: list[int]):
        self.constraint, self.logits, self.draft = constraint, logits, draft_tokens
        self.advanced = 0  # draft tokens read past to reach the latest row's state
        self.consumed = 0  # of those, the ones the grammar consumed (none after it ended)
        self._rows: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.logits)

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self._rows:
            if i < self.advanced:
                raise EngineError("grammar rows must be read in ascending order")
            self.consumed += self.constraint.advance(self.draft[self.advanced : i])
            self.advanced = i
            self._rows[i] = self.constraint.masked(self.logits[i])
        return self._rows[i]
