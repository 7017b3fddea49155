"""Constrained decoding inside the speculative loop (llguidance): every emitted token
satisfies the grammar, drafts it forbids are cut, the grammar's forced tokens are a free
draft, greedy output equals constrained plain decoding and sampling keeps the constrained
distribution."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from localspec.api import SpeculativeModel
from localspec.decoding.grammar import Constraint, json_schema_grammar
from localspec.decoding.stats import TokenSource
from localspec.errors import InvalidOptionError
from localspec.llama.grammar_vocab import grammar_tokenizer

PICK = {
    "type": "object",
    "properties": {"c": {"enum": ["ab", "cd", "ef"]}, "s": {"type": "string", "maxLength": 2}},
    "required": ["c", "s"],
    "additionalProperties": False,
}
PICK_FORMAT = {"type": "json_schema", "json_schema": {"name": "pick", "schema": PICK}}


def _category(text: str) -> str:
    answer = json.loads(text)
    return f"{answer['c']}:{answer['s'][:1]}"


@pytest.mark.statistical
@pytest.mark.parametrize("strategy, draft_max", [("draft-model", 3), ("auto", "auto")])
def test_constrained_sampling_matches_constrained_plain(
    target_gguf, other_gguf, strategy, draft_max, drafting_always_pays
):
    """Two-sample chi-square test at temperature 1 on a schema with an enum and a free
    string: the enum value and the string's first letter, speculative (the draft model's q
    masked by the grammar; the adaptive policy with the grammar's forced tokens as a free
    draft) against constrained plain sampling, fixed seeds."""
    opts = dict(
        max_tokens=40, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, response_format=PICK_FORMAT
    )
    prompt = "hello world"
    n = 500

    def collect(model):
        answers, drafted = [], {}
        for seed in range(n):
            r = model.generate(prompt, seed=seed, **opts)
            assert r.finish_reason == "stop", r.text
            jsonschema.validate(json.loads(r.text), PICK)
            answers.append(_category(r.text))
            for name, count in r.stats.drafted_by_drafter.items():
                drafted[name] = drafted.get(name, 0) + count
        return answers, drafted

    with SpeculativeModel(
        target_gguf, other_gguf, n_ctx=512, p_min=0.0, draft_max=draft_max, strategy=strategy
    ) as spec:
        spec_answers, drafted = collect(spec)
    expected = "draft-model" if strategy == "draft-model" else "grammar"
    assert drafted.get(expected, 0) > 0, drafted
    with SpeculativeModel(target_gguf, None, n_ctx=512, strategy="none") as plain:
        plain_answers, _ = collect(plain)
    cats = sorted(set(spec_answers) | set(plain_answers))
    table = np.array(
        [[answers.count(c) for c in cats] for answers in (spec_answers, plain_answers)]
    )
    table = table[:, table.sum(axis=0) >= 10]
    assert table.shape[1] >= 3, table
    _, pvalue, _, _ = stats.chi2_contingency(table)
    assert pvalue > 1e-3, (cats, table)


def test_a_draft_the_grammar_forbids_is_cut_never_verified(target_gguf, monkeypatch):
    """A prediction that breaks the schema (a number where a string must be) is drafted
    only up to its first forbidden token: every verify batch the target decodes holds only
    draft tokens the grammar allows at their place."""
    wrong = '{"c":"ab","s":5}'
    with SpeculativeModel(
        target_gguf, target_gguf, n_ctx=512, strategy="prediction", draft_max=16
    ) as m:
        batches = []
        decode = m.target.decode

        def spy(tokens, logits_rows=(), copy=True):
            batches.append((len(m.target.cache_tokens), list(tokens)))
            return decode(tokens, logits_rows, copy)

        monkeypatch.setattr(m.target, "decode", spy)
        prompt = m.target.tokenize("hello")
        r = m.generate(prompt, prediction=wrong, response_format=PICK_FORMAT, max_tokens=40)
        monkeypatch.undo()
        jsonschema.validate(json.loads(r.text), PICK)
        assert r.stats.drafted_by_drafter["prediction"] > 0
        verifies = [
            (pos, tokens) for pos, tokens in batches if pos >= len(prompt) and len(tokens) > 1
        ]
        assert verifies
        for pos, (last, *draft) in verifies:
            constraint = Constraint.compile(
                grammar_tokenizer(m.target), json_schema_grammar(PICK), m.target.n_vocab
            )
            emitted = r.tokens[: pos - len(prompt) + 1]
            assert emitted[-1] == last
            constraint.settle(None, emitted)
            assert constraint.allowed(draft) == len(draft), (emitted, draft)


def test_the_forced_tokens_are_drafted_and_counted(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=512, strategy="auto") as m:
        r = m.generate("hello", response_format=PICK_FORMAT, max_tokens=40)
    jsonschema.validate(json.loads(r.text), PICK)
    assert r.stats.drafted_by_drafter.get("grammar", 0) >= 4  # {"c":" and ","s":" at least
    assert r.stats.accepted_by_drafter.get("grammar", 0) >= 4
    forced = [t for t, s in zip(r.tokens, r.sources) if s == TokenSource.FORCED]
    assert len(forced) == r.stats.accepted_by_drafter["grammar"]


def test_forced_bytes_become_the_tokens_the_model_writes(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=128, strategy="none") as m:
        constraint = Constraint.compile(
            grammar_tokenizer(m.target), json_schema_grammar(PICK), m.target.n_vocab
        )
        forced = m.target.owner.run(constraint.forced)
        written = b"".join(m.target.token_bytes(t) for t in forced)
        assert (
            written and b'{"c":"'.startswith(written) and written != b'{"c":"'
        )  # the last token is left out
        assert constraint.allowed(forced) == len(forced)


def test_a_schema_that_cannot_finish_in_max_tokens_ends_with_length(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=256) as m:
        r = m.generate("hello", response_format=PICK_FORMAT, max_tokens=3)
    assert r.finish_reason == "length" and len(r.tokens) == 3 and r.parsed is None


@pytest.mark.parametrize(
    "response_format, message",
    [
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "x",
                    "schema": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}},
                },
            },
            "cannot be compiled",
        ),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "schema"),
        ({"type": "xml"}, "response_format"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": "{not json"}},
            "not valid JSON",
        ),
    ],
)
def test_a_schema_that_cannot_be_used_is_refused_with_its_reason(
    target_gguf, response_format, message
):
    with SpeculativeModel(target_gguf, None, n_ctx=128) as m:
        with pytest.raises(InvalidOptionError, match=message):
            m.generate("hello", response_format=response_format)
        assert (
            m.generate("hello", max_tokens=2).finish_reason == "length"
        )  # the model is fine after it


class Book(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(max_length=60)
    year: int
    genres: list[str] = Field(max_length=3)


SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "colour": {"enum": ["red", "green", "blue"]},
        },
        "required": ["name", "age", "colour"],
        "additionalProperties": False,
    },
    Book.model_json_schema(),
    {
        "type": "object",
        "properties": {
            "function": {"type": "string"},
            "arguments": {
                "type": "object",
                "properties": {"n": {"type": "integer"}, "strict": {"type": "boolean"}},
                "required": ["n", "strict"],
            },
        },
        "required": ["function", "arguments"],
        "additionalProperties": False,
    },
]
QUESTIONS = [
    "Invent a person for a story.",
    "Describe a famous novel.",
    "Call a function that checks whether 97 is prime.",
    "Give me one example record.",
    "Answer in JSON.",
    "A character from a fairy tale.",
    "A science fiction book.",
    "Call is_even on 10.",
    "A painter of the 19th century.",
    "A cookbook.",
    "Call factorial on 5 strictly.",
    "Someone who likes green.",
    "A book about the sea.",
    "Call fib on 12.",
    "An old sailor.",
    "A children's book.",
    "Call sqrt on 81.",
    "A baker from Paris.",
    "A poetry collection.",
    "Call abs on -3.",
]


def _masked_top2_gap(model, prompt_tokens, schema, tokens, i):
    """The top-2 gap among the tokens the grammar allows at plain step ``i`` (recomputed
    with a batch of one on the same cache, as the plain run had it)."""
    engine = model.target
    constraint = Constraint.compile(
        grammar_tokenizer(engine), json_schema_grammar(schema), engine.n_vocab
    )
    constraint.settle(None, tokens[:i])
    engine.reuse_prefix(prompt_tokens + tokens[: i - 1])
    row = engine.decode([(prompt_tokens + tokens)[len(prompt_tokens) + i - 1]], [0])[0]
    top = np.sort(constraint.masked(row))[-2:]
    return float(top[1] - top[0])


@pytest.mark.real_pair
def test_greedy_constrained_speculative_equals_constrained_plain_on_20_prompts(
    real_model, tie_tolerance
):
    """Every answer validates against its schema; speculative and plain greedy answers are
    the same tokens, or part only where plain's two best allowed logits were a near tie
    (design.md section 5)."""
    report, drafted = [], {}
    for n, question in enumerate(QUESTIONS):
        schema = SCHEMAS[n % len(SCHEMAS)]
        fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
        messages = [{"role": "user", "content": question + " Reply with JSON only."}]
        plain = real_model.chat(messages, max_tokens=96, response_format=fmt, strategy="none")
        spec = real_model.chat(messages, max_tokens=96, response_format=fmt, draft_max="auto")
        for result in (plain, spec):
            assert result.finish_reason == "stop", result.text
            jsonschema.validate(json.loads(result.text), schema)
        for name, count in spec.stats.drafted_by_drafter.items():
            drafted[name] = drafted.get(name, 0) + count
        diverge = next(
            (i for i, (a, b) in enumerate(zip(plain.tokens, spec.tokens)) if a != b), None
        )
        if diverge is None:
            assert plain.tokens == spec.tokens
            report.append(len(plain.tokens))
            continue
        gap = _masked_top2_gap(
            real_model, real_model.target.chat_tokens(messages), schema, plain.tokens, diverge
        )
        report.append(("diverged", diverge, round(gap, 4)))
        assert gap < tie_tolerance, (question, diverge, gap)
    print("\nconstrained greedy report:", report, "drafted:", drafted)
    assert drafted.get("grammar", 0) > 0


@pytest.mark.real_pair
def test_a_pydantic_model_comes_back_parsed(real_model):
    r = real_model.chat(
        "Describe a famous novel. Reply with JSON only.", response_format=Book, max_tokens=128
    )
    assert isinstance(r.parsed, Book) and r.parsed.title and r.parsed.year > 0
    assert r.parsed == Book.model_validate_json(r.text)
