"""The session line under the chat: totals over this run's answers."""

from __future__ import annotations


class SessionStats:
    """Totals over this run's answers (speculative ones) and the plain baseline."""

    def __init__(self):
        self.accepted = self.drafted = self.rounds = self.tokens = self.answers = 0
        self.decode_s = self.ttft_s = 0.0
        self.baseline_tps: float | None = None

    def add(self, stats: dict) -> None:
        self.answers += 1
        self.accepted += stats.get("accepted_tokens", 0)
        self.drafted += stats.get("drafted_tokens", 0)
        self.rounds += stats.get("rounds", 0)
        self.tokens += max(0, stats.get("generated_tokens", 0) - 1)
        self.decode_s += max(0.0, stats.get("total_s", 0.0) - stats.get("ttft_s", 0.0))
        self.ttft_s += stats.get("ttft_s", 0.0)

    def text(self) -> str:
        if not self.answers:
            return "Session: no answers yet"
        tps = self.tokens / self.decode_s if self.decode_s > 0 else 0.0
        parts = [f"Session: {self.answers} answer(s)"]
        if self.drafted:
            parts.append(
                f"Accepted {self.accepted}/{self.drafted} draft tokens "
                f"({100 * self.accepted / self.drafted:.0f} %)"
            )
            parts.append(
                f"mean accepted length {(self.accepted + self.rounds) / max(1, self.rounds):.2f}"
            )
        parts.append(f"{tps:.1f} t/s")
        parts.append(f"mean TTFT {self.ttft_s / self.answers:.2f} s")
        if self.baseline_tps:
            parts.append(f"plain {self.baseline_tps:.1f} t/s → {tps / self.baseline_tps:.2f}×")
        return " · ".join(parts)
