"""Fill-in-the-middle: the prompt built from the GGUF's FIM tokens in llama.cpp's
repository layout, trimmed to the context, and completion through the library, llama-server's
``/infill`` and ``/v1/completions`` with ``suffix`` (the openai SDK), on cuts of HumanEval
canonical solutions: greedy speculative == greedy plain."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from support.greedy import top2_gap_of_plain_step
from support.served import RunningServer

from localspec.api import SpeculativeModel
from localspec.bench.workloads import fim_cases
from localspec.decoding.fim import engine_fim_prompt, fim_prompt
from localspec.errors import InvalidOptionError

CASES = fim_cases(4)
N = 32


def _post(base: str, path: str, body: dict, timeout_s: float = 300) -> tuple[int, dict | str]:
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            text = r.read().decode()
            return r.status, json.loads(text) if not text.startswith("data:") else text
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def server(real_model):
    running = RunningServer(real_model)
    yield running
    running.stop()


def test_the_prompt_is_llama_cpp_s_repository_layout(real_model):
    case = CASES[0]
    tokens, truncated = engine_fim_prompt(real_model.target, case.prefix, case.suffix, case.extra)
    assert not truncated
    special = set(real_model.target.fim_tokens().values())
    engine = real_model.target
    text = b"".join(
        engine.token_text(t).encode() if t in special else engine.token_bytes(t) for t in tokens
    ).decode()
    files = "".join(f"<|file_sep|>{e['filename']}\n{e['text']}" for e in case.extra)
    expected = (
        f"<|repo_name|>myproject\n{files}<|file_sep|>filename\n"
        f"<|fim_prefix|>{case.prefix}<|fim_suffix|>{case.suffix}<|fim_middle|>"
    )
    assert text == expected


def test_over_the_budget_other_files_go_first_then_the_prefix_start_and_suffix_end():
    fim = {"pre": 1, "suf": 2, "mid": 3, "rep": 4, "sep": 5}

    def tokenize(text):
        return [100 + ord(c) for c in text]

    extra = [{"filename": "a", "text": "x" * 50}, {"filename": "b", "text": "y" * 5}]
    whole, truncated = fim_prompt(fim, tokenize, "p" * 40, "s" * 40, extra)
    assert not truncated
    assert len(whole) == (1 + 10) + (1 + 2 + 50) + (1 + 2 + 5) + (1 + 9) + 1 + 40 + 1 + 40 + 1
    fitted, truncated = fim_prompt(fim, tokenize, "p" * 40, "s" * 40, extra, budget=len(whole) - 10)
    assert 100 + ord("x") not in fitted and 100 + ord("y") in fitted  # the older file went
    assert not truncated  # the prefix and suffix are whole
    tight, truncated = fim_prompt(
        fim, tokenize, "abc" * 20, "xyz" * 20, extra, budget=11 + 10 + 1 + 2 + 20
    )
    assert truncated
    pre, suf = (
        tight[tight.index(1) + 1 : tight.index(2)],
        tight[tight.index(2) + 1 : tight.index(3)],
    )
    assert (len(pre), len(suf)) == (15, 5)
    assert pre == tokenize(("abc" * 20)[-15:]) and suf == tokenize(("xyz" * 20)[:5])


def test_a_model_without_fim_tokens_is_refused(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=256) as m:
        assert m.target.fim_tokens() == {}
        with pytest.raises(InvalidOptionError, match="no fill-in-the-middle tokens"):
            m.infill("def f(", ")")
        running = RunningServer(m)
        try:
            status, body = _post(
                running.base, "/infill", {"input_prefix": "a", "input_suffix": "b"}
            )
            assert status == 400 and "fill-in-the-middle" in body["error"]["message"]
            status, body = _post(
                running.base, "/v1/completions", {"prompt": "a", "suffix": "b", "model": "m"}
            )
            assert status == 400 and body["error"]["param"] == "suffix"
        finally:
            running.stop()


def _assert_same_greedy(model, prompt_tokens, reference, other, tie_tolerance):
    diverge = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if diverge is not None:
        gap = top2_gap_of_plain_step(model, prompt_tokens, reference, diverge)
        assert gap < tie_tolerance, (diverge, gap, tie_tolerance)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_speculative_infill_keeps_the_plain_greedy_middle(real_model, tie_tolerance, case):
    plain = real_model.infill(
        case.prefix, case.suffix, extra=case.extra, max_tokens=N, strategy="none"
    )
    spec = real_model.infill(case.prefix, case.suffix, extra=case.extra, max_tokens=N)
    prompt = engine_fim_prompt(real_model.target, case.prefix, case.suffix, case.extra, N).tokens
    _assert_same_greedy(real_model, prompt, plain.tokens, spec.tokens, tie_tolerance)
    assert spec.stats.drafted_tokens > 0


def test_infill_and_completions_suffix_answer_as_the_library_does(server, real_model):
    case = CASES[1]
    result = real_model.infill(case.prefix, case.suffix, extra=case.extra, max_tokens=N)
    library = result.text
    body = {
        "input_prefix": case.prefix,
        "input_suffix": case.suffix,
        "input_extra": list(case.extra),
        "n_predict": N,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
    }
    status, whole = _post(server.base, "/infill", {**body, "temperature": 0})
    assert status == 200 and whole["content"] == library and whole["stop"] is True
    assert whole["tokens_predicted"] == len(result.tokens) and whole["timings"]["predicted_n"] >= 1
    assert whole["stop_type"] == ("limit" if result.finish_reason == "length" else "eos")
    status, stream = _post(server.base, "/infill", {**body, "temperature": 0, "stream": True})
    chunks = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: ")]
    assert "".join(c["content"] for c in chunks) == library
    assert (
        [c["stop"] for c in chunks].count(True) == 1
        and chunks[-1]["stop"]
        and "timings" in chunks[-1]
    )
    plain = real_model.infill(case.prefix, case.suffix, max_tokens=N).text  # no other files
    answer = server.client().completions.create(
        model="m", prompt=case.prefix, suffix=case.suffix, max_tokens=N, temperature=0
    )
    assert answer.choices[0].text == plain


@pytest.mark.parametrize(
    "bad, param",
    [
        ({"input_prefix": 3}, "input_prefix"),
        ({"n_predict": -2}, "n_predict"),
        ({"input_extra": [{"text": 5}]}, "input_extra.0.text"),
    ],
)
def test_a_bad_infill_request_is_a_400_naming_the_param(server, bad, param):
    status, body = _post(server.base, "/infill", bad)
    assert status == 400 and body["error"]["message"] and body["error"]["param"] == param, bad


def test_a_long_infill_prefix_is_cut_to_fit(server):
    status, body = _post(server.base, "/infill", {"input_prefix": "x = ", "n_predict": 2})
    assert status == 200 and body["tokens_predicted"] == 2 and body["truncated"] is False
    n_ctx = server.state.model.target.n_ctx
    long = {"input_prefix": "x = 1\n" * n_ctx, "input_suffix": "y = 2\n" * 50, "n_predict": 2}
    # a whole context read (about 75 s on 2 quiet cores): the timeout only guards against a hang
    status, body = _post(server.base, "/infill", long, timeout_s=1200)  # the prefix's start goes
    assert status == 200 and body["truncated"] is True and body["tokens_evaluated"] < n_ctx
