"""What one generation did: token events and statistics, with units in the field names."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from localspec.decoding.attribution import TimeAccount

if TYPE_CHECKING:
    from localspec.decoding.tool_parser import CallDelta, ToolCall


class TokenSource(str, Enum):
    """Where an emitted token came from."""

    TARGET = "target"  # plain decoding: sampled from the target alone (no draft that round)
    ACCEPTED = "accepted"  # a draft token the target verified and kept
    CORRECTION = "correction"  # the target's token replacing the first rejected draft token
    BONUS = "bonus"  # the target's extra token after every draft token was accepted
    FORCED = (
        "forced"  # a token a grammar forced (a schema's key, a call's name), drafted free and kept
    )


@dataclass(frozen=True)
class TokenEvent:
    """One emitted token.

    ``text`` is the new text this token completes: "" while a multi-byte UTF-8
    character or a possible stop string is still incomplete.  ``p_target`` / ``p_draft``
    are the processed probabilities of this token under target and draft when sampling
    (None in greedy mode or when there was no draft).  ``round`` counts verify rounds
    from 0 (the token sampled right after prompt eval).  A last event with ``token == -1``
    carries text held back until the end (an incomplete UTF-8 tail, or text that could
    have started a stop string).  With ``logprobs`` asked for, ``logprob`` is the
    token's natural-log probability under the target's raw distribution (its own verify
    row) and ``top_logprobs`` the most likely ``(token id, logprob)`` pairs, best first.

    With a reasoning format (:mod:`localspec.decoding.reasoning`), ``channel`` is
    ``"reasoning"``, ``"content"`` or ``"marker"`` (a token of the format's own tags, part
    of neither text), ``text`` the new answer text and ``reasoning`` the new thinking text
    (one token may release both); without one, ``channel`` is always ``"content"``.

    With tools, ``content`` is the part of the answer's text released as content (text that
    may still be a call is held back, a call's text never is) and ``calls`` the
    :class:`~localspec.decoding.tool_parser.CallDelta` pieces of the calls being written
    (a call's id and name, then its arguments as they come); ``content`` None: all of
    ``text`` is content.
    """

    token: int
    text: str
    source: TokenSource
    round: int
    p_target: float | None = None
    p_draft: float | None = None
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] | None = None
    channel: str = "content"
    reasoning: str = ""
    content: str | None = None
    calls: tuple[CallDelta, ...] = ()

    @classmethod
    def emitted(
        cls,
        token: int,
        source: TokenSource,
        p_target: float | None = None,
        p_draft: float | None = None,
        logprob: float | None = None,
        top_logprobs: tuple[tuple[int, float], ...] | None = None,
    ) -> TokenEvent:
        """A token as a round emits it, before it is handed out: no text yet and round -1
        (the emitting step sets both, and the channel, with :func:`dataclasses.replace`)."""
        return cls(token, "", source, -1, p_target, p_draft, logprob, top_logprobs)


class _Acceptance:
    """acceptance rate (accepted / drafted tokens) and mean accepted length (tokens per
    target decode, its correction or bonus token included) of ``accepted_tokens``,
    ``drafted_tokens`` and ``rounds``."""

    accepted_tokens: int
    drafted_tokens: int
    rounds: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else 0.0


@dataclass
class ChannelStats(_Acceptance):
    """The speculation of one channel (``reasoning`` or ``content``).  A round belongs to
    the channel in force when it starts; ``tokens`` counts the tokens labelled with this
    channel (marker tokens are counted apart, in ``GenerationStats.marker_tokens``);
    ``forced_tokens``: tokens a grammar forced (the thinking budget's close); ``time_s``:
    wall seconds of this channel's rounds (draft, verify, bookkeeping)."""

    tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    forced_tokens: int = 0
    time_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens emitted by this channel's rounds per second of them."""
        return (self.accepted_tokens + self.rounds) / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "tokens_per_s": self.tokens_per_s,
        }

    def summary(self) -> str:
        line = f"{self.tokens} tokens, {self.tokens_per_s:.1f} t/s"
        if self.drafted_tokens:
            line += (
                f", accepted {self.accepted_tokens}/{self.drafted_tokens} "
                f"({100 * self.acceptance_rate:.1f} %), "
                f"mean accepted length {self.mean_accepted_length:.2f}"
            )
        return line + (f", {self.forced_tokens} forced" if self.forced_tokens else "")


@dataclass
class GenerationStats(_Acceptance):
    """Counters and timings of one generation.  Times are seconds (wall clock).

    ``generated_tokens`` counts every token the target produced, an end-of-generation
    token included.  ``rounds`` counts verify rounds (one target decode each, after the
    prompt).  ``acceptance_rate`` = accepted / drafted; ``mean_accepted_length`` =
    (accepted + rounds) / rounds, i.e. tokens emitted per target decode.
    ``accepted_per_position[i]`` is the share of drafts reaching position i that were
    accepted there.  ``draft_s`` and ``verify_s`` are time inside llama_decode for the
    draft and the target after prompt eval; ``overhead_s`` is the rest of the time
    after the first token (sampling, bookkeeping, Python).  ``tokens_per_s`` is
    (generated_tokens - 1) / (total_s - ttft_s).  With a reasoning format, ``channels``
    holds a :class:`ChannelStats` for ``"reasoning"`` and ``"content"`` and
    ``marker_tokens`` counts the tokens of the format's tags; both are empty / 0 without one.
    ``against_plain``: where the time went against plain decoding
    (:class:`~localspec.decoding.attribution.TimeAccount`).
    """

    prompt_tokens: int = 0
    prompt_cached_tokens: int = 0  # reused from the KV cache of the previous call
    prompt_truncated: bool = (
        False  # cut to fit the context (FIM prompts; others that do not fit are refused)
    )
    generated_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    rounds: int = 0
    rounds_by_drafter: dict = field(default_factory=dict)  # "plain" / drafter name -> rounds
    drafted_by_drafter: dict = field(default_factory=dict)  # drafter name -> drafted tokens
    accepted_by_drafter: dict = field(default_factory=dict)  # drafter name -> accepted tokens
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_at_position: list[int] = field(default_factory=list)
    ttft_s: float = 0.0
    prompt_eval_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    channels: dict[str, ChannelStats] = field(default_factory=dict)
    marker_tokens: int = 0
    against_plain: TimeAccount = field(default_factory=TimeAccount)

    @property
    def prompt_eval_tokens(self) -> int:
        return self.prompt_tokens - self.prompt_cached_tokens

    @property
    def accepted_per_position(self) -> list[float]:
        return [
            a / d if d else 0.0
            for a, d in zip(self.accepted_at_position, self.drafted_per_position)
        ]

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.total_s - self.ttft_s - self.draft_s - self.verify_s)

    @property
    def overhead_ms_per_round(self) -> float:
        """Our own cost per verify round in milliseconds: sampling, acceptance, drafters
        without a model, bookkeeping, Python (``overhead_s`` over ``rounds``)."""
        return 1000.0 * self.overhead_s / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_s(self) -> float:
        decode_s = self.total_s - self.ttft_s
        return (
            (self.generated_tokens - 1) / decode_s
            if self.generated_tokens > 1 and decode_s > 0
            else 0.0
        )

    def record_round(
        self,
        n_drafted: int,
        n_accepted: int,
        drafter: str = "plain",
        forced: list[bool] | None = None,
    ) -> None:
        """A round of ``drafter``'s; ``forced``: per draft token, whether a grammar forced
        it (those count as the grammar's drafted and accepted tokens)."""
        self.rounds += 1
        self.rounds_by_drafter[drafter] = self.rounds_by_drafter.get(drafter, 0) + 1
        forced = (forced or [])[:n_drafted]
        for name, drafted, accepted in (
            (drafter, n_drafted - sum(forced), n_accepted - sum(forced[:n_accepted])),
            ("grammar", sum(forced), sum(forced[:n_accepted])),
        ):
            if drafted:
                self.drafted_by_drafter[name] = self.drafted_by_drafter.get(name, 0) + drafted
                self.accepted_by_drafter[name] = self.accepted_by_drafter.get(name, 0) + accepted
        self.drafted_tokens += n_drafted
        self.accepted_tokens += n_accepted
        while len(self.drafted_per_position) < n_drafted:
            self.drafted_per_position.append(0)
            self.accepted_at_position.append(0)
        for i in range(n_drafted):
            self.drafted_per_position[i] += 1
            if i < n_accepted:
                self.accepted_at_position[i] += 1

    def to_dict(self) -> dict:
        return {
            **asdict(self),
            "prompt_eval_tokens": self.prompt_eval_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "accepted_per_position": self.accepted_per_position,
            "overhead_s": self.overhead_s,
            "overhead_ms_per_round": self.overhead_ms_per_round,
            "tokens_per_s": self.tokens_per_s,
            "channels": {name: ch.to_dict() for name, ch in self.channels.items()},
            "against_plain": self.against_plain.to_dict(),
        }

    def record_channel_round(
        self, channel: str, n_drafted: int, n_accepted: int, n_forced: int, time_s: float
    ) -> None:
        """One round of ``channel`` (the channel in force as it started)."""
        ch = self.channels.setdefault(channel, ChannelStats())
        ch.rounds += 1
        ch.drafted_tokens += n_drafted
        ch.accepted_tokens += n_accepted
        ch.forced_tokens += n_forced
        ch.time_s += time_s

    def count_token(self, channel: str) -> None:
        """One emitted token labelled ``channel`` (``"marker"`` counted apart)."""
        if channel == "marker":
            self.marker_tokens += 1
        else:
            self.channels.setdefault(channel, ChannelStats()).tokens += 1

    def channel_summary(self) -> str:
        """Per channel, e.g. ``thinking: 120 tokens, 30.1 t/s, ... | answer: ...``; "" without
        channels."""
        names = (("reasoning", "thinking"), ("content", "answer"))
        return " | ".join(
            f"{label}: {self.channels[n].summary()}" for n, label in names if n in self.channels
        )

    def summary(self) -> str:
        """One line for people, e.g. for the CLI's stats line."""
        line = (
            f"{self.generated_tokens} tokens, {self.tokens_per_s:.1f} t/s, TTFT "
            f"{self.ttft_s:.2f} s, "
            f"prompt {self.prompt_tokens} tokens ({self.prompt_cached_tokens} cached)"
        )
        if self.drafted_tokens:
            line += (
                f" | draft: accepted {self.accepted_tokens}/{self.drafted_tokens} "
                f"({100 * self.acceptance_rate:.1f} %), mean accepted length "
                f"{self.mean_accepted_length:.2f}"
            )
            by = ", ".join(
                f"{name} {self.accepted_by_drafter.get(name, 0)}/{n}"
                for name, n in sorted(self.drafted_by_drafter.items())
                if n
            )
            line += f" [{by}]"
        line += (
            f" | time: prompt {self.prompt_eval_s:.2f} s, draft {self.draft_s:.2f} s, "
            f"verify {self.verify_s:.2f} s, overhead {self.overhead_s:.2f} s "
            f"({self.overhead_ms_per_round:.2f} ms per round)"
        )
        if self.drafted_tokens or self.against_plain.spent_s:
            line += f" | against plain: {self.against_plain.summary()}"
        by_channel = self.channel_summary()
        return line + (f" | {by_channel}" if by_channel else "")


@dataclass
class GenerationResult:
    """A finished generation.  ``finish_reason``: "stop" (end-of-generation token or a
    stop string), "length" (max_tokens) or "context" (n_ctx full).  ``parsed``: with
    ``response_format=`` a pydantic model class, the answer validated into it (None when
    the answer was cut short before the JSON ended).  ``tool_calls``: with ``tools=``,
    the calls the answer made, :class:`~localspec.decoding.tool_parser.ToolCall` records
    (``id``, ``name``, ``arguments`` as JSON text, ``index``; finish_reason "tool_calls").
    ``content``: the answer's text without its calls (with calls, the prose around them;
    a call cut short is not content either; the whole text without tools).  With a
    reasoning format, ``text`` is the answer only and ``reasoning`` the thinking's text
    ("" when the model did not think); None without a reasoning format."""

    text: str
    tokens: list[int]
    sources: list[TokenSource]
    finish_reason: str
    stats: GenerationStats
    parsed: Any = None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    content: str | None = None

    def __post_init__(self):
        if self.content is None:
            self.content = self.text
