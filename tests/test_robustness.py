"""Regressions from trying to break the project: interrupts, interleaved and threaded
use, closed models, malformed headers, bad option types, forged special tokens."""

import signal
import struct
import subprocess
import sys
import threading

import pytest

from localspec.api import SpeculativeModel
from localspec.errors import EngineError, InvalidOptionError, ModelFileError
from localspec.llama.synthetic import write_model
from localspec.models.gguf_info import check_gguf_file

PROMPT = "hello world the code"


def test_interrupt_inside_decode_leaves_the_model_usable(target_gguf, monkeypatch):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=512, draft_max=4, p_min=0.0) as m:
        reference = m.generate(PROMPT, max_tokens=12).tokens
        m.reset_cache()
        engine = m.target
        original = engine._output_rows
        calls = []

        def interrupted(
            counts, views
        ):  # llama_decode has stored the tokens; cache_tokens not yet updated
            calls.append(counts)
            raise KeyboardInterrupt

        monkeypatch.setattr(engine, "_output_rows", interrupted)
        with pytest.raises(KeyboardInterrupt):
            m.generate(PROMPT, max_tokens=12)
        monkeypatch.setattr(engine, "_output_rows", original)
        assert calls and m.generate(PROMPT, max_tokens=12).tokens == reference


def test_a_newer_generation_supersedes_an_unfinished_stream(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=512, strategy="none") as m:
        reference = m.generate(PROMPT, max_tokens=10).tokens
        old = m.generate(PROMPT, max_tokens=10, stream=True)
        next(old)
        assert m.generate("the code is here", max_tokens=5).finish_reason == "length"
        with pytest.raises(EngineError, match="superseded"):
            next(old)
        assert m.generate(PROMPT, max_tokens=10).tokens == reference


def test_a_second_thread_gets_a_clear_error_not_a_corrupt_cache(target_gguf):
    with SpeculativeModel(target_gguf, target_gguf, n_ctx=2048, draft_max=2, p_min=0.0) as m:
        reference = m.generate(PROMPT, max_tokens=60).tokens
        errors, results = [], []

        def worker():
            try:
                results.append(m.generate(PROMPT, max_tokens=60).tokens)
            except EngineError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(r == reference for r in results)  # whoever ran, ran correctly
        assert len(results) + len(errors) == 4
        assert m.generate(PROMPT, max_tokens=60).tokens == reference


def test_closed_model_raises(target_gguf):
    m = SpeculativeModel(target_gguf, target_gguf, n_ctx=256)
    stream = m.generate(PROMPT, max_tokens=5, stream=True)
    m.close()
    with pytest.raises(EngineError, match="closed"):
        m.generate(PROMPT)
    with pytest.raises(EngineError, match="closed"):
        m.chat("hi")
    with pytest.raises(EngineError):
        next(stream)
    engine = m.target  # the vocabulary is freed with the model: no read of it after close
    for call in (
        engine.eog_tokens,
        lambda: engine.is_eog(7),
        lambda: engine.token_text(7),
        lambda: engine.token_bytes(7),
    ):
        with pytest.raises(EngineError, match="closed"):
            call()


@pytest.mark.parametrize("patch", ["huge string", "huge array", "alignment 0", "many dims"])
def test_malformed_headers_are_model_file_errors(synth_dir, tmp_path, patch):
    data = bytearray(
        (synth_dir / "target.gguf").read_bytes()
        if (synth_dir / "target.gguf").exists()
        else write_model(tmp_path / "t.gguf", seed=1).read_bytes()
    )
    if patch == "huge string":  # the first key's length
        data[24:32] = struct.pack("<Q", 1 << 62)
    elif patch == "huge array":
        i = data.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 8
        data[i : i + 8] = struct.pack("<Q", 1 << 61)
    elif patch == "alignment 0":
        data += b""
        path = tmp_path / "a.gguf"
        import numpy as np
        from gguf import GGUFWriter

        w = GGUFWriter(str(path), "llama")
        w.add_uint32("general.alignment", 0)
        w.add_tensor("x", np.zeros(4, dtype=np.float32))
        try:
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
        except Exception:
            pytest.skip("gguf refuses to write alignment 0")
        data = bytearray(path.read_bytes())
    elif patch == "many dims":
        i = data.index(b"token_embd.weight") + len("token_embd.weight")
        data[i : i + 4] = struct.pack("<I", 1 << 30)
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError):
        check_gguf_file(path)


def test_unreadable_file_and_directory(tmp_path):
    with pytest.raises(ModelFileError, match="directory"):
        check_gguf_file(tmp_path)


@pytest.mark.parametrize(
    "options",
    [
        dict(max_tokens=None),
        dict(max_tokens="10"),
        dict(max_tokens=2.5),
        dict(temperature=None),
        dict(temperature="0.5"),
        dict(p_min=None),
        dict(seed="abc"),
        dict(seed=1.5),
        dict(seed=-2),
        dict(seed=2**64),  # OpenAI's seed is a 64-bit integer
        dict(stop=5),
        dict(stop=[""]),
        dict(stop=""),
        dict(draft_max="lots"),
        dict(strategy="magic"),
    ],
)
def test_bad_option_types_are_invalid_option_errors(target_gguf, options):
    with SpeculativeModel(target_gguf, None, n_ctx=256) as m:
        with pytest.raises(InvalidOptionError):
            m.generate(PROMPT, max_tokens=options.pop("max_tokens", 4), **options)


@pytest.mark.parametrize("prompt", [None, b"hi", 5, [1, "x"]])
def test_bad_prompts_are_invalid_option_errors(target_gguf, prompt):
    with SpeculativeModel(target_gguf, None, n_ctx=256) as m:
        with pytest.raises(InvalidOptionError):
            m.generate(prompt)
        if not isinstance(prompt, list):
            with pytest.raises(InvalidOptionError):
                m.chat(prompt)


def test_seed_minus_one_is_random_and_tiny_temperature_is_greedy(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=256, strategy="none") as m:
        greedy = m.generate(PROMPT, max_tokens=10).tokens
        assert (
            m.generate(PROMPT, max_tokens=10, temperature=5e-324, top_k=0, seed=-1).tokens == greedy
        )


def test_smaller_draft_vocabulary_skips_tokens_it_cannot_read(synth_dir, target_gguf):
    big_target = write_model(synth_dir / "bigtarget.gguf", seed=1, extra_words=100)
    with SpeculativeModel(big_target, target_gguf, n_ctx=512, draft_max=4, p_min=0.0) as m:
        r = m.generate(
            [1, 300, 330, 360, 400, 310], max_tokens=20
        )  # ids >= 321 exist only in the target
    assert len(r.tokens) == 20


def test_user_content_cannot_forge_special_tokens(target_gguf):
    with SpeculativeModel(target_gguf, None, n_ctx=256) as m:
        tokens = m.target.chat_tokens([{"role": "user", "content": "hi <s> there"}])
        assert tokens.count(1) == 1  # the template's own <s> only


def test_cli_ctrl_c_while_answering_exits_130_without_traceback(target_gguf, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "localspec.cli",
            "run",
            PROMPT,
            "--model",
            str(target_gguf),
            "-n",
            "100000",
            "-c",
            "8192",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a shell starts background jobs with SIGINT ignored, and a test
        # run started so would hand that on
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # its first line ("no compatible draft model found ...") comes once the model is loaded,
    # as it starts answering: main() runs by then, whatever the load made of the imports
    first = proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = first + err
    assert "no compatible draft" in first and proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err


def test_cli_broken_pipe_is_quiet(target_gguf):
    run = subprocess.run(
        f"{sys.executable} -m localspec.cli run hello --model {target_gguf} -n 400 | head -c 5",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in run.stderr
