"""``/metrics`` per channel: a reasoning model's generation counted under ``channel`` labels
(thinking, answer, the tags), on a synthetic GGUF carrying DeepSeek-R1-Distill's template."""

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localspec.api import SpeculativeModel
from localspec.llama.synthetic import write_model
from localspec.server.metrics import Metrics

R1_DISTILL = (
    Path(__file__).parent / "data" / "templates" / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
).read_text()


@pytest.fixture(scope="module")
def r1_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("metrics-thinking")
    target = write_model(
        folder / "r1.gguf", seed=1, chat_template=R1_DISTILL, added_tokens=("<think>", "</think>")
    )
    with SpeculativeModel(target, target, n_ctx=512, draft_max=4, p_min=0.0) as model:
        yield model


def samples(metrics: Metrics) -> dict:
    """{(sample name, channel label): value} of the per-channel families."""
    text = metrics.render().decode()
    return {
        (s.name, s.labels.get("channel")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if family.name.startswith("localspec:channel_")
    }


def test_a_thinking_generation_is_counted_per_channel(r1_model):
    metrics = Metrics(r1_model)
    assert samples(metrics) == {}  # nothing served yet
    result = r1_model.chat("hello world", max_tokens=30, reasoning_budget=6)
    metrics.observe(result)
    metrics.observe(result)
    got, channels = samples(metrics), result.stats.channels
    for channel in ("reasoning", "content"):
        ch = channels[channel]
        assert got[("localspec:channel_tokens_total", channel)] == 2 * ch.tokens > 0
        assert got[("localspec:channel_draft_tokens_total", channel)] == 2 * ch.drafted_tokens
        assert (
            got[("localspec:channel_draft_accepted_tokens_total", channel)]
            == 2 * ch.accepted_tokens
        )
        assert got[("localspec:channel_forced_tokens_total", channel)] == 2 * ch.forced_tokens
        assert got[("localspec:channel_seconds_total", channel)] == pytest.approx(2 * ch.time_s)
    assert (
        got[("localspec:channel_forced_tokens_total", "reasoning")] >= 6
    )  # the budget's close, twice
    assert (
        got[("localspec:channel_draft_accepted_tokens_total", "reasoning")] > 0
    )  # same weights: drafts kept
    assert got[("localspec:channel_tokens_total", "marker")] == 2 * result.stats.marker_tokens > 0
    assert ("localspec:channel_draft_tokens_total", "marker") not in got


def test_a_model_that_does_not_think_adds_no_channel(target_gguf):
    with SpeculativeModel(target_gguf, n_ctx=256) as model:
        metrics = Metrics(model)
        metrics.observe(model.chat("hello world", max_tokens=8))
        assert samples(metrics) == {}
