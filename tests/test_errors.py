"""Bad input: a clear exception from the API, one line and exit status 2 from the CLI."""

import subprocess
import sys

import pytest

from localspec.api import SpeculativeModel, load
from localspec.decoding.params import CallOptions, call_options
from localspec.errors import IncompatibleDraftError, InvalidOptionError, ModelFileError
from localspec.llama.synthetic import vocabulary, write_model
from localspec.models.compat import check_compatibility
from localspec.models.gguf_info import check_gguf_file


@pytest.fixture
def junk_file(tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"this is not a model" * 100)
    return path


@pytest.fixture
def truncated_file(tmp_path, target_gguf):
    path = tmp_path / "truncated.gguf"
    data = target_gguf.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    return path


@pytest.fixture
def big_vocab_gguf(synth_dir):
    return write_model(synth_dir / "bigvocab.gguf", seed=3, extra_words=129)


def test_header_reader_accounts_for_every_byte(target_gguf):
    info = check_gguf_file(target_gguf)
    assert info.architecture == "llama" and info.n_vocab == len(vocabulary()[0])


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        SpeculativeModel(tmp_path / "nope.gguf")
    with pytest.raises(ModelFileError, match="not found"):
        load(str(tmp_path / "nope.gguf"))


def test_not_gguf(junk_file):
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        SpeculativeModel(junk_file)


def test_truncated_gguf(truncated_file):
    with pytest.raises(ModelFileError, match="truncated"):
        SpeculativeModel(truncated_file)


def test_vocabulary_size_difference_limit(synth_dir, target_gguf, big_vocab_gguf):
    ok = write_model(synth_dir / "vocab128.gguf", seed=4, extra_words=128)
    assert check_compatibility(check_gguf_file(target_gguf), check_gguf_file(ok)).compatible
    with pytest.raises(IncompatibleDraftError) as err:
        SpeculativeModel(target_gguf, big_vocab_gguf)
    assert any("129" in r for r in err.value.reasons)


def test_changed_token_text_and_bos(synth_dir, target_gguf):
    tokens = vocabulary()[0]
    tokens[300] = "\u2581changed"
    changed = write_model(synth_dir / "changed.gguf", seed=5, vocab_override=tokens)
    verdict = check_compatibility(check_gguf_file(target_gguf), check_gguf_file(changed))
    assert not verdict.compatible and "1 token text(s) differ" in verdict.reasons[0]
    other_bos = write_model(synth_dir / "bos.gguf", seed=6, bos_id=0)
    verdict = check_compatibility(check_gguf_file(target_gguf), check_gguf_file(other_bos))
    assert verdict.reasons == ["draft BOS id is 0, target 1"]


def test_bad_generation_options(target_gguf):
    with pytest.raises(InvalidOptionError, match="draft_min"):
        SpeculativeModel(target_gguf, target_gguf, draft_min=5, draft_max=2)
    with SpeculativeModel(target_gguf, target_gguf) as m:
        with pytest.raises(InvalidOptionError, match="temperature"):
            m.generate("hello", temperature=-1.0)
        with pytest.raises(InvalidOptionError, match="draft_min"):
            m.generate("hello", draft_min=3, draft_max=1)
        with pytest.raises(InvalidOptionError, match="unknown option"):
            m.generate("hello", temprature=0.5)
        with pytest.raises(InvalidOptionError, match="max_tokens"):
            m.generate("hello", max_tokens=0)
        with pytest.raises(InvalidOptionError, match="role"):
            m.chat([{"role": "user"}])


def test_a_call_takes_one_options_record_or_keywords_not_both(target_gguf):
    with SpeculativeModel(target_gguf, None) as m:
        keywords = dict(max_tokens=12, temperature=0.0, strategy="prompt-lookup", draft_max=4)
        record = m.options(**keywords)
        assert record.params == call_options(keywords, m.default_draft).params
        by_keywords = m.generate("the cat sat", **keywords)
        assert m.generate("the cat sat", record).tokens == by_keywords.tokens
        assert len(by_keywords.tokens) == 12
        streamed = m.generate("the cat sat", record, stream=True)
        assert [e.token for e in streamed if e.token >= 0] == by_keywords.tokens
        with pytest.raises(InvalidOptionError, match="not both .*also given: max_tokens"):
            m.generate("the cat sat", record, max_tokens=3)
        with pytest.raises(InvalidOptionError, match="must be a CallOptions"):
            m.generate("the cat sat", {"max_tokens": 3})
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        with pytest.raises(InvalidOptionError, match="tools need a chat call"):
            m.infill("def f(", ")", call_options({"tools": tools}, m.default_draft))
        unused = call_options({"tools": tools, "tool_choice": "none"}, m.default_draft)
        assert m.generate("the cat sat", unused).tokens  # "none": no call, nothing to render
        with pytest.raises(InvalidOptionError, match="reasoning options need a chat call"):
            m.generate("the cat sat", m.options(enable_thinking=False))
        with pytest.raises(InvalidOptionError, match="params must be a GenerationParams"):
            CallOptions(params={"max_tokens": 3})
        with pytest.raises(InvalidOptionError, match="parallel_tool_calls"):
            CallOptions(tools=tools, parallel_tool_calls="no")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "localspec.cli", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "case", ["missing", "junk", "truncated", "incompatible", "draft_min", "temp", "n_ctx"]
)
def test_cli_prints_one_line_errors(
    case, tmp_path, junk_file, truncated_file, target_gguf, big_vocab_gguf
):
    args = {
        "missing": ["--model", str(tmp_path / "nope.gguf")],
        "junk": ["--model", str(junk_file)],
        "truncated": ["--model", str(truncated_file)],
        "incompatible": ["--model", str(target_gguf), "--model-draft", str(big_vocab_gguf)],
        "draft_min": [
            "--model",
            str(target_gguf),
            "--model-draft",
            str(target_gguf),
            "--draft-min",
            "5",
            "--draft-max",
            "2",
        ],
        "temp": ["--model", str(target_gguf), "--temp", "-0.5"],
        "n_ctx": ["--model", str(target_gguf), "--n-ctx", "256"],
    }[case]
    prompt = "hello " * 300 if case == "n_ctx" else "hello"
    run = _cli("run", prompt, *args)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("localspec: error:")]
    assert len(errors) == 1, run.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["run", "x", "--draft-max", "foo"],
            "argument --draft-max: expected an integer or 'auto', got 'foo'",
        ),
        (["run"], "the following arguments are required: prompt"),
        (["serve", "--port", "http"], "argument --port: invalid int value: 'http'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_a_bad_flag_is_one_line_naming_the_help(args, says):
    run = _cli(*args)
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr.splitlines() == [run.stderr.strip()], run.stderr
    assert (
        run.stderr.startswith("localspec: error: ")
        and says in run.stderr
        and "--help)" in run.stderr
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["--reps", "0"], "--reps must be at least 1"),
        (["--strategies", ","], "names no strategy"),
        (["--strategies", "suffix k=9"], "unknown strategy"),
    ],
)
def test_bench_options_that_make_no_run_fail_in_one_line_before_any_model_loads(args, says):
    run = _cli("bench", "--quick", *args)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("localspec: error:")] == [
        next(line for line in run.stderr.splitlines() if says in line)
    ]


TOOL = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
JSON = {"type": "json_object"}


@pytest.mark.parametrize(
    "options, param, says",
    [
        ({"tool_choice": "required"}, "tool_choice", "tool_choice needs tools"),
        ({"tools": [{"type": "function"}]}, "tools.0", "function.name"),
        ({"tools": TOOL, "tool_choice": {"type": "function", "function": {"name": "g"}}},
         "tool_choice", "names no tool"),
        ({"tools": TOOL, "response_format": {"type": "json_object"}}, "response_format",
         "cannot be combined"),
        ({"response_format": {"type": "yaml"}}, "response_format", "must be"),
    ],
)  # fmt: skip
def test_an_options_record_is_checked_once_when_made_naming_the_option(options, param, says):
    from localspec.decoding.params import DraftParams

    with pytest.raises(InvalidOptionError, match=says) as err:
        call_options(options, DraftParams())
    assert err.value.param == param
    none = call_options(
        {"tools": TOOL, "tool_choice": "none", "response_format": JSON}, DraftParams()
    )
    assert not none.calls_tools and none.format_grammar is not None  # "none": the format holds
