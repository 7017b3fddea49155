"""Reasoning formats read from real chat templates (tests/data/templates/), the stream split
into channels, and the close a thinking budget forces (localspec.decoding.reasoning)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llguidance import LLMatcher

from localspec.decoding.grammar import Constraint
from localspec.decoding.reasoning import (
    CONTENT,
    EITHER,
    HARMONY,
    MARKER,
    NO_REASONING,
    REASONING,
    THINK_TAGS,
    channel_splitter,
    close_grammar,
    detect_reasoning,
    forced_close,
    prompt_start,
    single_token_markers,
)
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.grammar_vocab import grammar_tokenizer

TEMPLATES = Path(__file__).parent / "data" / "templates"
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
QWQ = "Qwen-QwQ-32B.jinja"
R1_DISTILL = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
GPT_OSS = "openai-gpt-oss-120b.jinja"
QWEN25_CODER = "Qwen2.5-Coder-1.5B-Instruct.jinja"  # the default pair's own: no thinking
HARMONY_CLOSE = "<|end|><|start|>assistant<|channel|>final<|message|>"
R, C, M = REASONING, CONTENT, MARKER


def fmt_of(name: str):
    return detect_reasoning((TEMPLATES / name).read_text())


def render(name: str, messages: list[dict], add_generation_prompt: bool = True, **kwargs) -> str:
    formatter = Jinja2ChatFormatter(
        (TEMPLATES / name).read_text(),
        eos_token="</s>",
        bos_token="<s>",
        add_generation_prompt=add_generation_prompt,
    )
    return formatter(messages=messages, **kwargs).prompt


# --- detection ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, kind, opens_in_prompt, reads_enable_thinking, reads_reasoning_effort",
    [
        (QWEN3, THINK_TAGS, False, True, False),
        (QWQ, THINK_TAGS, True, False, False),
        (R1_DISTILL, THINK_TAGS, True, False, False),
        (GPT_OSS, HARMONY, False, False, True),
        (QWEN25_CODER, None, False, False, False),
    ],
)
def test_the_format_is_read_from_the_template(
    name, kind, opens_in_prompt, reads_enable_thinking, reads_reasoning_effort
):
    fmt = fmt_of(name)
    assert (
        fmt.kind,
        fmt.opens_in_prompt,
        fmt.reads_enable_thinking,
        fmt.reads_reasoning_effort,
    ) == (
        kind,
        opens_in_prompt,
        reads_enable_thinking,
        reads_reasoning_effort,
    )
    expected = {
        THINK_TAGS: ("<think>", "</think>", "\n\n"),
        HARMONY: (
            "<|channel|>analysis<|message|>",
            "<|end|>",
            "<|start|>assistant<|channel|>final<|message|>",
        ),
        None: ("", "", ""),
    }[kind]
    assert (fmt.open, fmt.close, fmt.separator) == expected


@pytest.mark.parametrize("template", [None, "", "{{ messages[0].content }}"])
def test_no_template_or_one_without_thinking_has_no_format(template):
    assert detect_reasoning(template) == NO_REASONING


def test_a_separator_the_template_writes_is_kept():
    fmt = detect_reasoning(
        "{{ '<think>' + r + '</think>\\n' + c }}{% if add_generation_prompt %}x{% endif %}"
    )
    assert fmt.separator == "\n"


ONE_TURN = [{"role": "user", "content": "Hi"}]
TOOL_LOOP = [
    {"role": "user", "content": "Weather?"},
    {
        "role": "assistant",
        "content": "<think>\nI should call it.\n</think>\n\n<tool_call>{}</tool_call>",
    },
    {"role": "tool", "content": "sunny"},
]
LITERAL_TAG = [{"role": "user", "content": "What does <think> do?"}]


@pytest.mark.parametrize(
    "name, messages, kwargs, start",
    [
        (QWEN3, ONE_TURN, {}, EITHER),  # Qwen3 writes <think> itself
        (QWEN3, ONE_TURN, {"enable_thinking": True}, EITHER),
        (QWEN3, ONE_TURN, {"enable_thinking": False}, CONTENT),  # the prompt holds an empty block
        (QWEN3, TOOL_LOOP, {}, EITHER),  # an earlier turn's closed block does not count
        (QWEN3, LITERAL_TAG, {}, EITHER),
        (QWQ, ONE_TURN, {}, REASONING),
        (R1_DISTILL, ONE_TURN, {}, REASONING),
        (R1_DISTILL, ONE_TURN, {"enable_thinking": False}, REASONING),  # it does not read it
        (GPT_OSS, ONE_TURN, {}, EITHER),  # <|start|>assistant: the model writes the channel
        (GPT_OSS, ONE_TURN, {"reasoning_effort": "low"}, EITHER),
        (QWEN25_CODER, ONE_TURN, {}, CONTENT),
    ],
)
def test_the_rendered_prompt_tail_says_where_generation_starts(name, messages, kwargs, start):
    assert prompt_start(fmt_of(name), render(name, messages, **kwargs)) == start


@pytest.mark.parametrize(
    "prompt, start",
    [
        ("<|start|>assistant<|channel|>analysis<|message|>", REASONING),
        ("<|start|>assistant<|channel|>final<|message|>", CONTENT),
        ("<|start|>assistant", EITHER),
    ],
)
def test_a_harmony_prompt_that_opens_a_channel(prompt, start):
    assert prompt_start(fmt_of(GPT_OSS), prompt) == start


# --- splitting ------------------------------------------------------------------------


# Pieces are each token's decoded text, or (text, token id) for a marker the vocabulary holds
# as one control token (the engine decodes those to "").
HARMONY_IDS = {
    1: "<|start|>",
    2: "<|channel|>",
    3: "<|message|>",
    4: "<|end|>",
    5: "<|call|>",
    6: "<|constrain|>",
}
START, CHANNEL, MESSAGE, END, CALL, CONSTRAIN = (("", i) for i in range(1, 7))


@pytest.mark.parametrize(
    "name, start, pieces, reasoning, content, labels",
    [
        pytest.param(
            QWEN3,
            EITHER,
            ["<think>", "\n", "Let me", " see.", "\n", "</think>", "\n\n", "Four", "."],
            "Let me see.",
            "Four.",
            [M, M, R, R, R, M, M, C, C],
            id="qwen3-one-token-tags",
        ),
        pytest.param(
            QWEN3,
            EITHER,
            ["<", "think", ">\n", "Let me", " see.\n", "\n</", "think>", "\n\nFour", "."],
            "Let me see.",
            "Four.",
            [C, C, M, R, R, R, M, C, C],
            id="tags-split-across-tokens",
        ),
        pytest.param(
            QWEN3,
            EITHER,
            ["\n", "<think>", "r", "</think>", "c"],
            "r",
            "c",
            [C, M, R, M, C],
            id="whitespace-before-open",
        ),
        pytest.param(
            R1_DISTILL,
            REASONING,
            ["Hmm", ".", "\n\n", "</think>", "\n\n", "42"],
            "Hmm.",
            "42",
            [R, R, R, M, M, C],
            id="prompt-opened-the-block",
        ),
        pytest.param(
            QWQ,
            REASONING,
            ["a <", "/b> c", "</", "think>d"],
            "a </b> c",
            "d",
            [R, R, R, C],
            id="a-tag-prefix-that-is-not-the-close",
        ),
        pytest.param(
            QWEN3,
            EITHER,
            ["Hello", " <think>", " world"],
            "",
            "Hello <think> world",
            [C, C, C],
            id="no-block-a-later-tag-is-text",
        ),
        pytest.param(
            QWEN3,
            EITHER,
            ["<t", "hink", "ing"],
            "",
            "<thinking",
            [C, C, C],
            id="open-prefix-that-fails",
        ),
        pytest.param(
            QWEN3, CONTENT, ["<think>", "x"], "", "<think>x", [C, C], id="prompt-closed-the-block"
        ),
        pytest.param(
            QWEN25_CODER,
            EITHER,
            ["<think>", "x", "</think>"],
            "",
            "<think>x</think>",
            [C, C, C],
            id="no-format",
        ),
        pytest.param(
            GPT_OSS,
            EITHER,
            [
                CHANNEL,
                "analysis",
                MESSAGE,
                "Hmm",
                " ok",
                END,
                START,
                "assistant",
                CHANNEL,
                "final",
                MESSAGE,
                "Hi",
                "!",
            ],
            "Hmm ok",
            "Hi!",
            [M, M, M, R, R, M, M, M, M, M, M, C, C],
            id="harmony-analysis-then-final",
        ),
        pytest.param(
            GPT_OSS,
            EITHER,
            [CHANNEL, "final", MESSAGE, "Hi"],
            "",
            "Hi",
            [M, M, M, C],
            id="harmony-straight-to-final",
        ),
        pytest.param(
            GPT_OSS,
            EITHER,
            [
                CHANNEL,
                "commentary to=functions.f ",
                CONSTRAIN,
                "json",
                MESSAGE,
                '{"a":',
                "1}",
                CALL,
            ],
            "",
            '{"a":1}',
            [M, M, M, M, M, C, C, M],
            id="harmony-tool-call",
        ),
        pytest.param(
            GPT_OSS,
            EITHER,
            ["<|chan", "nel|>analysis<|mess", "age|>think", "ing<|e", "nd|>"],
            "thinking",
            "",
            [M, M, R, R, M],
            id="harmony-tags-spelled-in-text",
        ),
        pytest.param(
            GPT_OSS,
            REASONING,
            ["deep", END],
            "deep",
            "",
            [R, M],
            id="harmony-prompt-opened-analysis",
        ),
        pytest.param(
            GPT_OSS, EITHER, ["x" * 300], "", "x" * 300, [C], id="harmony-model-writes-plain-text"
        ),
    ],
)
def test_the_splitter_labels_each_token_and_splits_the_text(
    name, start, pieces, reasoning, content, labels
):
    splitter = channel_splitter(fmt_of(name), start, HARMONY_IDS if name == GPT_OSS else None)
    got, written = [], []
    for piece in pieces:
        text, token = piece if isinstance(piece, tuple) else (piece, None)
        split = splitter.feed(text, token)
        got.append(split.channel)
        written += split.segments
    written += splitter.finish()
    assert (splitter.reasoning, splitter.content, got) == (reasoning, content, labels)
    assert "".join(t for _, t in written) == "".join(
        HARMONY_IDS.get(p[1], "") if isinstance(p, tuple) else p for p in pieces
    )
    assert splitter.counts == {ch: labels.count(ch) for ch in (R, C, M)}


def test_text_held_back_comes_out_at_the_end():
    splitter = channel_splitter(fmt_of(R1_DISTILL), REASONING)
    assert splitter.feed("abc").segments == [(R, "abc")]
    assert splitter.feed("\n").segments == []
    assert splitter.feed("</thi").segments == []
    assert splitter.channel == R
    assert splitter.finish() == [(R, "\n</thi")]


def test_the_split_renders_back_to_the_same_text():
    """The newlines next to the tags are the template's own: Qwen3 renders the split
    reasoning and answer of its last turn back to exactly the text the model wrote."""
    written = "<think>\nLet me see.\n</think>\n\nFour."
    splitter = channel_splitter(fmt_of(QWEN3), EITHER)
    for piece in ["<think>", "\n", "Let me", " see.", "\n", "</think>", "\n\n", "Four."]:
        splitter.feed(piece)
    turn = {
        "role": "assistant",
        "content": splitter.content,
        "reasoning_content": splitter.reasoning,
    }
    rendered = render(QWEN3, ONE_TURN + [turn], add_generation_prompt=False)
    assert rendered.endswith("<|im_start|>assistant\n" + written + "<|im_end|>\n")


def test_markers_the_vocabulary_holds_as_one_token():
    vocab = {"<think>": [7], "</think>": [8, 9]}
    assert single_token_markers(fmt_of(QWEN3), lambda text: vocab[text]) == {7: "<think>"}
    assert single_token_markers(NO_REASONING, lambda text: [1]) == {}


# --- the budget's forced close --------------------------------------------------------


@pytest.mark.parametrize(
    "name, tail, forced",
    [
        (QWEN3, "", "\n</think>\n\n"),
        (QWEN3, "so it is 4", "\n</think>\n\n"),
        (R1_DISTILL, "so it is 4\n", "</think>\n\n"),
        (GPT_OSS, "", HARMONY_CLOSE),
        (QWEN25_CODER, "x", ""),
    ],
)
def test_the_forced_close_text(name, tail, forced):
    assert forced_close(fmt_of(name), tail) == forced


@pytest.mark.parametrize(
    "name, tail, forced",
    [
        (QWEN3, "so it is 4", "\nTime is up.\n</think>\n\n"),
        (R1_DISTILL, "so it is 4\n", "Time is up.\n</think>\n\n"),
        (GPT_OSS, "", "Time is up." + HARMONY_CLOSE),
        (QWEN25_CODER, "x", ""),
    ],
)
def test_a_budget_message_comes_before_the_close_on_a_line_of_its_own(name, tail, forced):
    assert forced_close(fmt_of(name), tail, message="Time is up.\n") == forced


@pytest.mark.parametrize(
    "name, start, pieces, forced",
    [
        (QWEN3, EITHER, ["<think>", "\n", "abc"], "\n</think>\n\n"),
        (QWEN3, EITHER, ["<think>", "\n", "abc\n"], "</think>\n\n"),
        (QWEN3, EITHER, ["<think>", "\n", "abc\n</th"], "ink>\n\n"),  # finishes the close begun
        (QWEN3, EITHER, ["<think>"], "\n</think>\n\n"),
        (QWEN3, EITHER, ["<think>", "a", "</think>", "b"], ""),  # the answer has begun
        (QWEN3, EITHER, ["Hello"], ""),  # no block
        (R1_DISTILL, REASONING, ["abc"], "\n</think>\n\n"),
        (GPT_OSS, REASONING, ["deep"], HARMONY_CLOSE),
        (GPT_OSS, EITHER, [("", 2), "final", ("", 3), "Hi"], ""),
    ],
)
def test_the_splitter_says_what_to_force_and_the_forced_text_ends_the_block(
    name, start, pieces, forced
):
    splitter = channel_splitter(fmt_of(name), start, HARMONY_IDS if name == GPT_OSS else None)
    for piece in pieces:
        splitter.feed(*(piece if isinstance(piece, tuple) else (piece, None)))
    assert splitter.forced_close() == forced
    if forced:
        reasoning = splitter.reasoning
        splitter.feed(forced)
        splitter.feed("Answer")
        assert (splitter.reasoning, splitter.content, splitter.channel) == (
            reasoning,
            "Answer",
            CONTENT,
        )


@pytest.mark.parametrize(
    "forced, special, grammar",
    [
        ("\n</think>\n\n", (), 'start: "\\n</think>\\n\\n" answer\nanswer: /(.|\\n)*/\n'),
        (
            "\n</think>\n\n",
            ("</think>",),
            'start: "\\n" </think> "\\n\\n" answer\nanswer: /(.|\\n)*/\n',
        ),
        (
            HARMONY_CLOSE,
            fmt_of(GPT_OSS).markers,
            'start: <|end|> <|start|> "assistant" <|channel|> "final" <|message|> answer\nanswer: /(.|\\n)*/\n',
        ),
    ],
)
def test_the_close_grammar_forces_the_close_then_leaves_the_answer_free(forced, special, grammar):
    assert close_grammar(forced, special) == grammar
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    assert not is_error, messages


def test_the_close_grammar_with_a_schema_compiles():
    grammar = close_grammar("</think>\n\n", answer='%json {"type": "object"}')
    assert not LLMatcher.validate_grammar_with_warnings(grammar)[0]


def test_the_close_grammar_forces_its_text_as_the_models_tokens(target_gguf):
    """On a vocabulary without a ``</think>`` token, the forced text is the model's own
    spelling of it (the last token left out, as :meth:`Constraint.forced` does)."""
    engine = Engine(target_gguf, EngineConfig(n_ctx=64))
    try:
        constraint = Constraint.compile(
            grammar_tokenizer(engine), close_grammar("\n</think>\n\n"), engine.n_vocab
        )
        forced = engine.owner.run(constraint.forced)
        written = b"".join(engine.token_bytes(t) for t in forced)
        assert written and b"\n</think>\n\n".startswith(written)
        assert constraint.allowed(forced) == len(forced)
    finally:
        engine.close()
