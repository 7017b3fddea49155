"""The stats lines under an answer: the speculation's (:func:`format_stats`) and, for a
reasoning model, per channel (:func:`format_channel_stats`)."""

from __future__ import annotations


def format_stats(
    stats: dict | None, finish_reason: str | None = None, baseline_tps: float | None = None
) -> str:
    """One line: "Accepted 87/106 draft tokens (82 %) · mean accepted length 3.1 ·
    14.2 t/s · TTFT 0.41 s · 1.6× vs plain"; times in seconds, rates in tokens/s."""
    if not stats:
        return ""
    if stats.get("unavailable"):
        return (
            "Statistics unavailable (the server sends no timings) · TTFT "
            f"{stats.get('ttft_s', 0.0):.2f} s"
            + (" · stopped" if finish_reason == "cancelled" else "")
        )
    parts = []
    drafted, accepted = stats.get("drafted_tokens", 0), stats.get("accepted_tokens", 0)
    if drafted:
        parts.append(
            f"Accepted {accepted}/{drafted} draft tokens ({100 * accepted / drafted:.0f} %)"
        )
        parts.append(f"mean accepted length {stats.get('mean_accepted_length', 0):.2f}")
    else:
        parts.append("no draft tokens")
    tps = stats.get("tokens_per_s", 0.0)
    parts.append(f"{stats.get('generated_tokens', 0)} tokens, {tps:.1f} t/s")
    parts.append(f"TTFT {stats.get('ttft_s', 0.0):.2f} s")
    if baseline_tps and tps and drafted:
        parts.append(f"{tps / baseline_tps:.2f}× vs plain ({baseline_tps:.1f} t/s)")
    if stats.get("context_dropped_messages"):
        parts.append(
            f"{stats['context_dropped_messages']} oldest messages left out to fit the context"
        )
    if finish_reason and finish_reason != "stop":
        parts.append(
            {
                "length": "stopped at max tokens",
                "cancelled": "stopped",
                "context": "context full",
            }.get(finish_reason, finish_reason)
        )
    return " · ".join(parts)


_CHANNELS = (("reasoning", "Thinking"), ("content", "Answer"))


def format_channel_stats(stats: dict | None) -> str:
    """The stats per channel of a reasoning model's answer: "Thinking: 120 tokens ·
    accepted 40/90 (44 %) · mean accepted length 1.44 · 31.0 t/s · 4 forced   Answer: …"
    (``stats["channels"]``, see ``ChannelStats.to_dict``); "" when the model did not think."""
    channels = (stats or {}).get("channels") or {}
    if not isinstance(channels, dict) or not isinstance(channels.get("reasoning"), dict):
        return ""
    return "   ".join(
        f"{label}: {_channel_line(channels[name])}"
        for name, label in _CHANNELS
        if isinstance(channels.get(name), dict)
    )


def _channel_line(ch: dict) -> str:
    parts = [f"{ch.get('tokens', 0)} tokens"]
    drafted, accepted = ch.get("drafted_tokens", 0), ch.get("accepted_tokens", 0)
    if drafted:
        parts.append(f"accepted {accepted}/{drafted} ({100 * accepted / drafted:.0f} %)")
        parts.append(f"mean accepted length {ch.get('mean_accepted_length', 0.0):.2f}")
    parts.append(f"{ch.get('tokens_per_s', 0.0):.1f} t/s")
    if ch.get("forced_tokens"):
        parts.append(f"{ch['forced_tokens']} forced")
    return " · ".join(parts)
