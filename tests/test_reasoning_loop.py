"""Reasoning models through the loop and the API: the chat template overridden, detected and
rendered with ``enable_thinking``; every emitted token labelled with its channel; the
thinking budget's forced close drafted for free; per-channel statistics (docs/reasoning.md).

Synthetic GGUFs carry the real templates of tests/data/templates/ and ``<think>`` /
``</think>`` as single tokens; the real default pair runs with a thinking-style template
(its generation prompt opens ``<think>``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats
from support.greedy import top2_gap_of_plain_step
from support.thinking import QUESTION, R1_DISTILL, THINK_TOKENS

from localspec.api import SpeculativeModel
from localspec.decoding.reasoning import CONTENT, MARKER, REASONING, THINK_TAGS
from localspec.decoding.stats import TokenSource
from localspec.decoding.thinking import ChatReasoning
from localspec.errors import InvalidOptionError
from localspec.llama.synthetic import write_model

TEMPLATES = Path(__file__).parent / "data" / "templates"
QWEN3 = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()


@pytest.fixture(scope="module")
def r1_model(thinking_pair):
    """DeepSeek-R1-Distill's template: the generation prompt opens ``<think>\\n``."""
    with SpeculativeModel(
        *thinking_pair, n_ctx=512, chat_template=R1_DISTILL, draft_max=4, p_min=0.0
    ) as model:
        yield model


@pytest.fixture(scope="module")
def qwen3_model(thinking_pair, tmp_path_factory):
    """Qwen3's template, given as a file path (``--chat-template-file``)."""
    path = tmp_path_factory.mktemp("template") / "qwen3.jinja"
    path.write_text(QWEN3)
    with SpeculativeModel(
        thinking_pair[0], n_ctx=512, chat_template=str(path), draft_max=4
    ) as model:
        yield model


# --- the template: overridden, detected, rendered ---------------------------------------------


def test_a_chat_template_file_overrides_the_ggufs_and_is_detected(qwen3_model):
    fmt = qwen3_model.reasoning.format
    assert qwen3_model.target.chat_template == QWEN3
    assert (fmt.kind, fmt.reads_enable_thinking, fmt.opens_in_prompt) == (THINK_TAGS, True, False)


def test_enable_thinking_reaches_the_template(qwen3_model):
    messages = [{"role": "user", "content": QUESTION}]
    off = qwen3_model.target.render_chat(messages, template_kwargs={"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert qwen3_model.target.render_chat(messages).endswith("<|im_start|>assistant\n")
    for options in (
        {"enable_thinking": False},
        {"chat_template_kwargs": {"enable_thinking": False}},
    ):
        result = qwen3_model.chat(QUESTION, max_tokens=8, **options)
        assert result.reasoning == "" and result.stats.channels.get(REASONING) is None
        prompt = qwen3_model.target.chat_tokens(
            messages, template_kwargs={"enable_thinking": False}
        )
        assert result.stats.prompt_tokens == len(prompt)


def test_a_model_that_does_not_open_a_block_writes_only_answer(qwen3_model):
    result = qwen3_model.chat(QUESTION, max_tokens=12)
    assert result.reasoning == "" and result.text  # random weights never write <think>
    assert result.stats.channels[CONTENT].tokens == 12


def test_without_a_reasoning_format_nothing_changes(target_gguf):
    with SpeculativeModel(target_gguf, n_ctx=256, draft_max=4) as model:
        result = model.chat(QUESTION, max_tokens=10)
        events = list(model.chat(QUESTION, max_tokens=10, stream=True))
    assert (
        result.reasoning is None
        and result.stats.channels == {}
        and "thinking" not in result.stats.summary()
    )
    assert {e.channel for e in events} == {CONTENT} and not any(e.reasoning for e in events)


# --- channels through the loop ----------------------------------------------------------------


def test_every_token_is_labelled_and_the_texts_are_kept_apart(r1_model):
    generation = r1_model.chat(QUESTION, max_tokens=30, reasoning_budget=6, stream=True)
    events = list(generation)
    result = generation.result
    assert "".join(e.reasoning for e in events) == result.reasoning and result.reasoning
    assert "".join(e.text for e in events) == result.text and result.text
    channels = [e.channel for e in events if e.token >= 0]
    first_marker, first_content = channels.index(MARKER), channels.index(CONTENT)
    assert set(channels[:first_marker]) == {REASONING} and set(channels[first_content:]) == {
        CONTENT
    }
    stats = result.stats
    assert stats.channels[REASONING].tokens + stats.channels[
        CONTENT
    ].tokens + stats.marker_tokens == len(channels)
    assert "</think>" not in result.text and "</think>" not in result.reasoning


def test_reasoning_format_none_keeps_everything_as_answer(r1_model):
    result = r1_model.chat(QUESTION, max_tokens=20, reasoning_budget=4, reasoning_format="none")
    assert result.reasoning is None  # no split, so no budget either: nothing forced
    assert TokenSource.FORCED not in result.sources


def test_stop_strings_apply_to_the_answer_not_to_the_thinking(r1_model):
    free = r1_model.chat(QUESTION, max_tokens=30, reasoning_budget=8)
    in_thinking = next(
        free.reasoning[i : i + 2]
        for i in range(len(free.reasoning) - 1)
        if free.reasoning[i : i + 2] not in free.text
    )
    kept = r1_model.chat(QUESTION, max_tokens=30, reasoning_budget=8, stop=[in_thinking])
    assert (kept.reasoning, kept.text, kept.finish_reason) == (
        free.reasoning,
        free.text,
        free.finish_reason,
    )
    cut = r1_model.chat(QUESTION, max_tokens=30, reasoning_budget=8, stop=[free.text[3:5]])
    assert cut.finish_reason == "stop" and cut.text == free.text[: free.text.find(free.text[3:5])]
    assert cut.reasoning == free.reasoning


# --- the thinking budget ----------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 3, 9])
def test_the_budget_forces_the_close_in_one_verify(r1_model, budget):
    result = r1_model.chat(QUESTION, max_tokens=40, reasoning_budget=budget)
    thinking = result.stats.channels[REASONING]
    forced = thinking.forced_tokens
    assert forced >= 3  # "</think>", "\n", "\n" (and a "\n" before it after text)
    assert thinking.tokens - (1 if budget else 0) == budget  # a forced newline is held as thinking
    assert result.sources.count(TokenSource.FORCED) == forced
    assert (
        result.stats.drafted_by_drafter["grammar"]
        == result.stats.accepted_by_drafter["grammar"]
        == forced
    )
    assert result.stats.rounds_by_drafter["grammar"] == 1  # the whole close in one target step
    assert result.stats.rounds < result.stats.generated_tokens
    assert result.text and "</think>" not in result.reasoning
    assert "thinking:" in result.stats.summary() and "forced" in result.stats.summary()


def test_a_budget_message_is_forced_before_the_close_then_the_model_answers(thinking_pair):
    """The message ends the thinking, forced like the close (one verify), per call or as the
    load option's default."""
    message = "Time is up, the answer now."
    with SpeculativeModel(
        thinking_pair[0], n_ctx=512, chat_template=R1_DISTILL, reasoning_budget_message=message
    ) as model:
        for result in (
            model.chat(QUESTION, max_tokens=40, reasoning_budget=5),
            model.chat(QUESTION, max_tokens=40, reasoning_budget=5, reasoning_budget_message=""),
        ):
            thinking = result.stats.channels[REASONING]
            assert thinking.tokens >= 5 and result.text
            assert result.stats.rounds_by_drafter["grammar"] == 1
        said, silent = (
            model.chat(QUESTION, max_tokens=40, reasoning_budget=5, reasoning_budget_message=m)
            for m in (None, "")
        )
        assert said.reasoning.endswith(message) and not silent.reasoning.endswith(message)
        assert (
            said.stats.channels[REASONING].forced_tokens
            > silent.stats.channels[REASONING].forced_tokens
        )
    with pytest.raises(InvalidOptionError, match="reasoning_budget_message"):
        SpeculativeModel(thinking_pair[0], n_ctx=512, reasoning_budget_message=3)


def test_the_budget_is_a_load_option_and_enable_thinking_false_means_zero(thinking_pair):
    with SpeculativeModel(
        thinking_pair[0], n_ctx=512, chat_template=R1_DISTILL, reasoning_budget=2
    ) as model:
        assert model.chat(QUESTION, max_tokens=20).stats.channels[REASONING].tokens == 3
        off = model.chat(QUESTION, max_tokens=20, enable_thinking=False)
        assert off.reasoning == "" and off.stats.channels[REASONING].forced_tokens >= 3
        assert (
            model.chat(QUESTION, max_tokens=20, reasoning_budget=-1).stats.channels.get(CONTENT)
            is None
        )


@pytest.mark.parametrize("budget", [0, 4, 11, -1])
def test_greedy_speculative_equals_greedy_plain_on_both_channels(r1_model, budget):
    spec = r1_model.chat(QUESTION, max_tokens=40, reasoning_budget=budget)
    plain = r1_model.chat(QUESTION, max_tokens=40, reasoning_budget=budget, strategy="none")
    assert (spec.tokens, spec.reasoning, spec.text) == (plain.tokens, plain.reasoning, plain.text)
    assert spec.stats.rounds < plain.stats.rounds


SAMPLED = dict(max_tokens=12, temperature=1.0, top_k=6, top_p=1.0, min_p=0.0, reasoning_budget=3)
N_SAMPLED = 800


def _first_tokens(model, n: int = N_SAMPLED) -> tuple[np.ndarray, int]:
    """Per seed 0..n-1 of a sampled chat: the first 3 thinking tokens then the first 3 answer
    tokens (-1 where a channel has fewer); and the answer's drafted tokens, all seeds."""
    rows, drafted = [], 0
    for seed in range(n):
        generation = model.chat(QUESTION, seed=seed, stream=True, **SAMPLED)
        events = [e for e in generation if e.token >= 0]
        row = []
        for channel in (REASONING, CONTENT):
            tokens = [e.token for e in events if e.channel == channel][:3]
            row += tokens + [-1] * (3 - len(tokens))
        rows.append(row)
        answer = generation.result.stats.channels.get(CONTENT)
        drafted += answer.drafted_tokens if answer is not None else 0
    return np.array(rows), drafted


@pytest.fixture(scope="module")
def plain_sampled(thinking_pair):
    with SpeculativeModel(
        thinking_pair[0], n_ctx=512, chat_template=R1_DISTILL, strategy="none"
    ) as plain:
        return _first_tokens(plain)[0]


@pytest.fixture(scope="module")
def sharp_draft(tmp_path_factory):
    """The target's weights with logits doubled: a draft sharper than the target, on the same
    support, so drafts are often accepted and often rejected (the residual is sampled)."""
    path = tmp_path_factory.mktemp("sharp") / "sharp.gguf"
    return write_model(path, seed=1, logit_scale=2.0, added_tokens=THINK_TOKENS)


@pytest.mark.statistical
@pytest.mark.parametrize("strategy, draft_max", [("draft-model", 4), ("auto", "auto")])
def test_sampling_keeps_the_targets_distribution_given_the_forced_close(
    thinking_pair, sharp_draft, plain_sampled, strategy, draft_max, drafting_always_pays
):
    """Two-sample chi-square test at temperature 1: the first three thinking tokens and the
    first three answer tokens after the budget's forced close (the first one the bonus of the
    round that verifies the close), speculative against plain sampling, fixed seeds.  Fails
    (p ~ 1e-9) with the correction sampled from the target's row instead of the residual."""
    options = dict(
        n_ctx=512, chat_template=R1_DISTILL, p_min=0.0, draft_max=draft_max, strategy=strategy
    )
    with SpeculativeModel(thinking_pair[0], sharp_draft, **options) as spec:
        spec_sampled, drafted = _first_tokens(spec)
        forced = spec.chat(QUESTION, seed=0, **SAMPLED).stats.channels[REASONING].forced_tokens
    assert forced >= 3 and drafted >= N_SAMPLED  # the close forced, the answers drafted
    for pos in range(spec_sampled.shape[1]):
        cats = np.union1d(spec_sampled[:, pos], plain_sampled[:, pos])
        table = np.array(
            [[np.sum(x[:, pos] == c) for c in cats] for x in (spec_sampled, plain_sampled)]
        )
        table = table[:, table.sum(axis=0) >= 10]
        if table.shape[1] < 2:  # a position where one token is (nearly) always drawn
            assert set(spec_sampled[:, pos]) == set(plain_sampled[:, pos])
            continue
        _, pvalue, _, _ = scipy_stats.chi2_contingency(table)
        assert pvalue > 1e-3, (pos, table)


def test_options_a_thinking_model_cannot_combine_are_refused(r1_model):
    with pytest.raises(InvalidOptionError, match="response_format"):
        r1_model.chat(QUESTION, response_format={"type": "json_object"})
    with pytest.raises(InvalidOptionError, match="reasoning_budget"):
        r1_model.chat(QUESTION, reasoning_budget=-2)
    with pytest.raises(InvalidOptionError, match="enable_thinking"):
        r1_model.chat(QUESTION, enable_thinking="no")
    with pytest.raises(InvalidOptionError, match="reasoning_format"):
        SpeculativeModel("missing.gguf", reasoning_format="deepseek")


# --- the real default pair with a thinking-style template --------------------------------------


def thinking_style(template: str) -> str:
    """The Qwen2.5-Coder template with a generation prompt that opens ``<think>``."""
    opened = template.replace(
        "{{- '<|im_start|>assistant\\n' }}\n{%- endif %}",
        "{{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}",
    )
    assert opened != template
    return (
        "{%- if false %}</think>{% endif %}" + opened
    )  # mentions the close (before the generation prompt)


@pytest.fixture
def thinking_real(real_model):
    """The session's real pair with the thinking-style template, restored afterwards."""
    target = real_model.target
    before, reasoning = target.chat_template_override, real_model.reasoning
    target.chat_template_override = thinking_style(target.info.chat_template)
    real_model.reasoning = ChatReasoning(target)
    yield real_model
    target.chat_template_override, real_model.reasoning = before, reasoning


@pytest.mark.real_pair
def test_real_pair_budget_forces_the_close_and_speculation_keeps_plain_greedy(
    thinking_real, tie_tolerance
):
    model = thinking_real
    messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    assert model.reasoning.format.opens_in_prompt
    spec = model.chat(messages, max_tokens=64, reasoning_budget=24)
    plain = model.chat(messages, max_tokens=64, reasoning_budget=24, strategy="none")
    thinking = spec.stats.channels[REASONING]
    print("\n" + spec.stats.summary())
    assert spec.reasoning and "</think>" not in spec.text
    assert thinking.forced_tokens >= 2 and spec.stats.rounds_by_drafter.get("grammar", 0) <= 2
    assert spec.stats.rounds < spec.stats.generated_tokens
    if spec.tokens != plain.tokens:
        prompt = model.target.chat_tokens(messages)
        diverge = next(i for i, (a, b) in enumerate(zip(plain.tokens, spec.tokens)) if a != b)
        assert top2_gap_of_plain_step(model, prompt, plain.tokens, diverge) < tie_tolerance
    else:
        assert (spec.reasoning, spec.text) == (plain.reasoning, plain.text)


# --- the CLI ----------------------------------------------------------------------------------


def test_cli_run_prints_the_thinking_apart_and_the_stats_per_channel(
    thinking_pair, tmp_path, capsys
):
    from localspec.cli import commands

    template = tmp_path / "r1.jinja"
    template.write_text(R1_DISTILL)
    argv = ["run", QUESTION, "-m", str(thinking_pair[0]), "--no-draft", "-c", "512", "-n", "20"]
    argv += ["--chat-template-file", str(template), "--reasoning-budget", "4", "--no-color"]
    assert commands.main(argv) == 0
    out, err = capsys.readouterr()
    assert (
        out.startswith("<think>\n") and "\n</think>\n\n" in out
    )  # no colour: the tags show where it ends
    assert "thinking: 5 tokens" in err and "answer:" in err
    assert commands.main(argv + ["--json"]) == 0
    assert '"reasoning"' in capsys.readouterr().out
    assert commands.main(argv[:-5] + ["--reasoning-budget", "-5"]) == 2


@pytest.mark.real_pair
def test_real_pair_goes_on_to_answer_after_the_budget_message(thinking_real):
    message = "Time is up: I stop thinking and write the answer now."
    messages = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    result = thinking_real.chat(
        messages, max_tokens=96, reasoning_budget=48, reasoning_budget_message=message
    )
    assert result.reasoning.endswith(message) and "def " in result.text
