"""``GET /metrics``: the server's counters in Prometheus' text format (prometheus_client).

Names follow llama-server's ``/metrics`` where it has one (``llamacpp:prompt_tokens_total``,
``llamacpp:tokens_predicted_total``, ``llamacpp:prompt_seconds_total``,
``llamacpp:tokens_predicted_seconds_total``, ``llamacpp:n_decode_total``,
``llamacpp:n_busy_slots_per_decode``, ``llamacpp:prompt_tokens_seconds``,
``llamacpp:predicted_tokens_seconds``, ``llamacpp:kv_cache_usage_ratio``,
``llamacpp:kv_cache_tokens``, ``llamacpp:requests_processing``,
``llamacpp:requests_deferred``); speculation's own are ``localspec:``
(``draft_tokens_total`` and ``draft_accepted_tokens_total`` by drafter,
``draft_position_acceptance`` by position in the draft, ``requests_total`` by finish reason;
and per channel of a reasoning model's output, labelled ``channel`` = ``reasoning`` /
``content`` (``marker`` too for ``channel_tokens_total``, the thinking's tags):
``channel_tokens_total``, ``channel_draft_tokens_total``,
``channel_draft_accepted_tokens_total``, ``channel_forced_tokens_total``,
``channel_seconds_total``; see ``GenerationStats.channels``, empty for a model that does
not think).  Units: tokens, seconds, tokens per second; ratios in [0, 1].
"""

from __future__ import annotations

import threading
from collections import Counter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """Totals over the finished generations (:meth:`observe`), and gauges read at scrape
    time from ``worker`` (requests running and queued) and ``model`` (cells in use, the
    batcher's decodes).  Thread-safe; :meth:`render` gives the exposition text."""

    def __init__(self, model, worker=None):
        self.model = model
        self.worker = worker
        self._lock = threading.Lock()
        self.prompt_tokens = self.generated_tokens = 0
        self.prompt_s = self.decode_s = 0.0
        self.drafted: Counter = Counter()
        self.accepted: Counter = Counter()
        self.drafted_at: list[int] = []
        self.accepted_at: list[int] = []
        self.finished: Counter = Counter()
        self.channels: dict[
            str, Counter
        ] = {}  # channel -> {"tokens", "drafted", "accepted", "forced", "seconds"}
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    def observe(self, result) -> None:
        """Add one finished generation (a :class:`~localspec.decoding.stats.GenerationResult`)."""
        s = result.stats
        with self._lock:
            self.prompt_tokens += s.prompt_eval_tokens
            self.generated_tokens += s.generated_tokens
            self.prompt_s += s.prompt_eval_s
            self.decode_s += max(0.0, s.total_s - s.ttft_s)
            self.drafted.update(s.drafted_by_drafter)
            self.accepted.update(s.accepted_by_drafter)
            _add_lists(self.drafted_at, s.drafted_per_position)
            _add_lists(self.accepted_at, s.accepted_at_position)
            self.finished[result.finish_reason] += 1
            self._observe_channels(s)

    def _observe_channels(self, s) -> None:
        for name, ch in getattr(s, "channels", {}).items():
            self.channels.setdefault(name, Counter()).update(
                {
                    "tokens": ch.tokens,
                    "drafted": ch.drafted_tokens,
                    "accepted": ch.accepted_tokens,
                    "forced": ch.forced_tokens,
                    "seconds": ch.time_s,
                }
            )
        if getattr(s, "marker_tokens", 0):
            self.channels.setdefault("marker", Counter())["tokens"] += s.marker_tokens

    def render(self) -> bytes:
        return generate_latest(self._registry)

    def collect(self):
        with self._lock:
            yield from self._totals()
            yield from self._speculation()
            yield from self._by_channel()
        yield from self._gauges()

    def _totals(self):
        yield _counter(
            "llamacpp:prompt_tokens",
            "Prompt tokens evaluated (cached ones excluded).",
            self.prompt_tokens,
        )
        yield _counter(
            "llamacpp:prompt_seconds", "Seconds spent evaluating prompts.", self.prompt_s
        )
        yield _counter("llamacpp:tokens_predicted", "Tokens generated.", self.generated_tokens)
        yield _counter(
            "llamacpp:tokens_predicted_seconds", "Seconds from first to last token.", self.decode_s
        )
        yield _gauge(
            "llamacpp:prompt_tokens_seconds",
            "Average prompt throughput in tokens/s.",
            _rate(self.prompt_tokens, self.prompt_s),
        )
        yield _gauge(
            "llamacpp:predicted_tokens_seconds",
            "Average generation throughput in tokens/s (per request).",
            _rate(max(0, self.generated_tokens - sum(self.finished.values())), self.decode_s),
        )
        requests = CounterMetricFamily(
            "localspec:requests", "Finished generations by finish reason.", labels=["reason"]
        )
        for reason, n in sorted(self.finished.items()):
            requests.add_metric([str(reason)], n)
        yield requests

    def _speculation(self):
        drafted = CounterMetricFamily(
            "localspec:draft_tokens", "Draft tokens verified, by drafter.", labels=["drafter"]
        )
        accepted = CounterMetricFamily(
            "localspec:draft_accepted_tokens",
            "Draft tokens the target kept, by drafter.",
            labels=["drafter"],
        )
        for name in sorted(self.drafted):
            drafted.add_metric([name], self.drafted[name])
            accepted.add_metric([name], self.accepted.get(name, 0))
        yield drafted
        yield accepted
        position = GaugeMetricFamily(
            "localspec:draft_position_acceptance",
            "Share of draft tokens kept at each position of the draft (1 = first).",
            labels=["position"],
        )
        for i, n in enumerate(self.drafted_at):
            if n:
                position.add_metric(
                    [str(i + 1)], self.accepted_at[i] / n if i < len(self.accepted_at) else 0.0
                )
        yield position

    def _by_channel(self):
        families = (
            (
                "tokens",
                "localspec:channel_tokens",
                "Tokens emitted, by channel (reasoning, content, marker).",
            ),
            (
                "drafted",
                "localspec:channel_draft_tokens",
                "Draft tokens verified in rounds of each channel.",
            ),
            (
                "accepted",
                "localspec:channel_draft_accepted_tokens",
                "Draft tokens kept in rounds of each channel.",
            ),
            (
                "forced",
                "localspec:channel_forced_tokens",
                "Tokens a grammar forced (the thinking budget's close).",
            ),
            ("seconds", "localspec:channel_seconds", "Wall seconds of the rounds of each channel."),
        )
        for key, name, documentation in families:
            family = CounterMetricFamily(name, documentation, labels=["channel"])
            for channel in sorted(self.channels):
                if key == "tokens" or channel != "marker":
                    family.add_metric([channel], self.channels[channel][key])
            yield family

    def _gauges(self):
        target = self.model.target
        used = target.cells_used
        yield _gauge("llamacpp:kv_cache_tokens", "KV cells in use (all sequences).", used)
        yield _gauge(
            "llamacpp:kv_cache_usage_ratio", "Share of the KV cells in use.", used / target.n_ctx
        )
        if self.worker is not None:
            yield _gauge(
                "llamacpp:requests_processing", "Requests generating now.", self.worker.running
            )
            yield _gauge(
                "llamacpp:requests_deferred", "Requests waiting in the queue.", self.worker.waiting
            )
        batcher = self.model.slots.batcher
        if batcher is not None:
            yield _counter(
                "llamacpp:n_decode", "Target decodes shared by the slots.", batcher.decodes
            )
            yield _gauge(
                "llamacpp:n_busy_slots_per_decode",
                "Average sequences per target decode.",
                batcher.sequences_decoded / batcher.decodes if batcher.decodes else 0.0,
            )


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _rate(tokens: float, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def _add_lists(total: list[int], more: list[int]) -> None:
    total.extend([0] * (len(more) - len(total)))
    for i, n in enumerate(more):
        total[i] += n
