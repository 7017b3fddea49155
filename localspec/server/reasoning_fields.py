"""Reasoning models in the server's protocols (docs/reasoning.md): what each protocol's
reasoning fields ask of the library (its reasoning options, by their keyword names), the
per-server keys that sign Anthropic ``thinking`` blocks and encrypt the Responses API's
``encrypted_content``, and the helpers the answer shapes share.

Efforts map to thinking budgets (tokens; :data:`EFFORT_BUDGETS`): ``none`` turns thinking
off, ``minimal`` 256, ``low`` 1024, ``medium`` 4096, ``high`` 16384, ``xhigh`` / ``max``
unlimited; an effort this server does not know leaves the server's default.  ``low`` /
``medium`` / ``high`` are also given to the chat template as ``reasoning_effort`` (gpt-oss's
reads it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid

from cryptography.fernet import Fernet, InvalidToken

from localspec.server.errors import FieldPath, RequestError, dotted
from localspec.server.request import given

REASONING, CONTENT = "reasoning", "content"
EFFORT_BUDGETS = {
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": 16384,
    "xhigh": -1,
    "max": -1,
}
TEMPLATE_EFFORTS = ("low", "medium", "high")
MIN_BUDGET_TOKENS = 1024  # Anthropic's least thinking.budget_tokens
_SIGNED = b"localspec thinking\x00"  # what a signature covers, before the thinking's UTF-8


class ReasoningKeys:
    """One server's secrets, made when it starts and never written anywhere: an HMAC-SHA256
    key signing Anthropic ``thinking`` blocks, and a Fernet key (AES-128-CBC with an
    HMAC-SHA256 tag) encrypting the Responses API's ``encrypted_content``.  A block or blob
    from another server (or from before a restart) does not verify."""

    def __init__(self):
        self._sign_key = secrets.token_bytes(32)
        self._fernet = Fernet(Fernet.generate_key())

    def sign(self, thinking: str) -> str:
        """The ``signature`` of a thinking block's text: base64 of its HMAC-SHA256 (44
        characters)."""
        mac = hmac.new(self._sign_key, _SIGNED + thinking.encode("utf-8"), hashlib.sha256).digest()
        return base64.b64encode(mac).decode("ascii")

    def verify(self, thinking: str, signature: str) -> bool:
        return hmac.compare_digest(
            self.sign(thinking).encode("ascii"), signature.encode("utf-8", "replace")
        )

    def encrypt(self, reasoning: str) -> str:
        """``reasoning`` as an opaque, authenticated blob (URL-safe base64 text)."""
        return self._fernet.encrypt(reasoning.encode("utf-8")).decode("ascii")

    def decrypt(self, blob: str) -> str | None:
        """The text :meth:`encrypt` sealed in ``blob``; None for a blob this server did not make."""
        try:
            return self._fernet.decrypt(blob.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            return None


# --- requests: the protocols' fields as the library's options --------------------------------


def effort_reasoning(effort: str | None) -> dict:
    """An effort (OpenAI's ``reasoning_effort`` / ``reasoning.effort``, Anthropic's
    ``output_config.effort``) as the library's reasoning options: a thinking budget
    (:data:`EFFORT_BUDGETS`), {} for an effort this server does not know."""
    if effort == "none":
        return {"enable_thinking": False}
    if effort not in EFFORT_BUDGETS:
        return {}
    kwargs = {"reasoning_effort": effort} if effort in TEMPLATE_EFFORTS else None
    return given(reasoning_budget=EFFORT_BUDGETS[effort], chat_template_kwargs=kwargs)


def chat_reasoning(
    reasoning_format: str | None,
    template_kwargs: dict | None,
    effort: str | None,
    budget: int | None,
    budget_message: str | None = None,
) -> dict:
    """OpenAI chat's (llama-server's) fields as the library's reasoning options:
    ``reasoning_format`` ("none": thinking left in the content; "deepseek" / "auto": apart,
    in ``reasoning_content``), ``chat_template_kwargs`` (its ``enable_thinking`` also turns
    the budget off, whatever the template), then ``reasoning_effort``, then our
    ``reasoning_budget`` (tokens) over the effort's, and ``reasoning_budget_message``
    (llama-server's flag, per request)."""
    base = effort_reasoning(effort)
    kwargs = {**base.get("chat_template_kwargs", {}), **(template_kwargs or {})} or None
    enable = (template_kwargs or {}).get("enable_thinking")
    return given(
        reasoning_budget=budget if budget is not None else base.get("reasoning_budget"),
        reasoning_budget_message=budget_message,
        enable_thinking=enable if isinstance(enable, bool) else base.get("enable_thinking"),
        reasoning_format=None
        if reasoning_format is None
        else ("none" if reasoning_format == "none" else "auto"),
        chat_template_kwargs=kwargs,
    )


def anthropic_reasoning(thinking: dict | None, effort: str | None) -> dict:
    """Anthropic's ``thinking``: ``{"type": "enabled", "budget_tokens": N}`` (N >= 1024) is a
    budget of N; ``{"type": "disabled"}`` turns thinking off; ``{"type": "adaptive"}`` or
    none leaves the budget to ``output_config.effort`` (:func:`effort_reasoning`), else to
    the server.  RequestError (400) naming ``thinking``'s field otherwise."""
    kind = (thinking or {}).get("type")
    if kind == "disabled":
        return {"enable_thinking": False}
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_BUDGET_TOKENS:
            path = ("thinking", "budget_tokens")
            message = (
                f"{dotted(path)}: Input should be an integer greater than or equal to "
                f"{MIN_BUDGET_TOKENS}"
            )
            raise RequestError(message, path)
        return {"reasoning_budget": budget}
    if kind in (None, "adaptive"):
        return effort_reasoning(effort)
    raise RequestError(
        f"thinking.type: Input should be 'enabled', 'adaptive' or 'disabled', got {kind!r}",
        ("thinking",),
    )


def checked_thinking(
    thinking: str | None, signature: str | None, path: FieldPath, keys: ReasoningKeys
) -> str:
    """A ``thinking`` block sent back in an assistant turn: its text, once its signature is
    this server's; RequestError (400) for a block without both, or signed elsewhere."""
    if thinking is None or signature is None:
        raise RequestError(f"{dotted(path)}: a thinking block needs thinking, signature", path)
    if not keys.verify(thinking, signature):
        at = path + ("signature",)
        raise RequestError(f"{dotted(at)}: Invalid `signature` in `thinking` block", at)
    return thinking


# --- answers --------------------------------------------------------------------------------


def channel_runs(events: list) -> list[tuple[str, object]]:
    """A batch of :class:`TokenEvent`s in order as runs: ``("reasoning", text)`` for the
    thinking text of consecutive events, ``("content", events)`` for the events with answer
    text (or none at all).  An event releasing both is in both runs, thinking first."""
    runs: list[list] = []
    for event in events:
        thinking = getattr(event, "reasoning", "")
        if thinking:
            if runs and runs[-1][0] == REASONING:
                runs[-1][1] += thinking
            else:
                runs.append([REASONING, thinking])
        if getattr(event, "text", "") or not thinking:
            if runs and runs[-1][0] == CONTENT:
                runs[-1][1].append(event)
            else:
                runs.append([CONTENT, [event]])
    return [(kind, value) for kind, value in runs]


def reasoning_tokens(result) -> int:
    """Tokens of the thinking (the format's own tags counted in neither channel)."""
    channel = result.stats.channels.get(REASONING)
    return channel.tokens if channel is not None else 0


def channel_timings(result) -> dict:
    """Per-channel speculation for ``timings``: ``{"reasoning": {...}, "content": {...}}``
    (:meth:`ChannelStats.to_dict`), {} without a reasoning format."""
    return {name: channel.to_dict() for name, channel in result.stats.channels.items()}


ENCRYPTED, PLAIN = "reasoning.encrypted_content", "reasoning.content"  # Responses' include values


def reasoning_item(
    text: str, keys: ReasoningKeys, include: tuple[str, ...], status: str = "completed"
) -> dict:
    """A Responses ``reasoning`` output item for the thinking ``text``: ``summary`` [] (no
    summaries are written), ``encrypted_content`` when ``include`` asks for
    ``reasoning.encrypted_content``, the text as ``content`` [``reasoning_text``] only when
    it asks for ``reasoning.content`` (ours)."""
    item = {
        "type": "reasoning",
        "id": f"rs_{uuid.uuid4().hex[:24]}",
        "summary": [],
        "status": status,
    }
    if PLAIN in include:
        item["content"] = [{"type": "reasoning_text", "text": text}]
    if ENCRYPTED in include:
        item["encrypted_content"] = keys.encrypt(text)
    return item
