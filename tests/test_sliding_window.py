"""A real sliding-window model: Gemma 3 270M (Q4_K_M, base, no chat template; its attention
alternates a 512-token window with global layers) as a target with the copy drafters and as its
own draft.  Greedy speculative output is plain's, or parts from it only where a fresh prefill's
two best logits are closer than twice this model's path noise (docs/exactness.md's method),
also past the window; ``localspec run`` sends a base model's prompt as raw text."""

from __future__ import annotations

import pytest

from localspec.api import SpeculativeModel
from localspec.bench.noise import fresh_gap, path_noise

PROMPTS = {
    "code": "import numpy as np\n\n# compute the mean of a list\n",
    # past the 512-token window: the oldest cells of the window layers are dropped
    "long": " ".join(f"Step {i}: add {i} to the total." for i in range(90)) + "\nThe total is",
}


@pytest.fixture(scope="module")
def gemma(gemma3_270m_gguf):
    with SpeculativeModel(gemma3_270m_gguf, gemma3_270m_gguf, n_ctx=2048) as model:
        yield model


@pytest.fixture(scope="module")
def plain_answers(gemma):
    """Each prompt's plain greedy answer, read once."""
    return {
        name: gemma.generate(text, max_tokens=64, temperature=0.0, draft_max=0).tokens
        for name, text in PROMPTS.items()
    }


@pytest.mark.parametrize("name", list(PROMPTS))
@pytest.mark.parametrize("strategy", ["prompt-lookup", "draft-model"])
def test_greedy_output_is_plain_or_parts_at_a_near_tie(gemma, plain_answers, name, strategy):
    text, plain = PROMPTS[name], plain_answers[name]
    prompt = gemma.target.tokenize(text)
    assert gemma.target.info.get("gemma3.attention.sliding_window") == 512
    assert name != "long" or len(prompt) > 512
    spec = gemma.generate(text, max_tokens=64, temperature=0.0, strategy=strategy).tokens
    diverge = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
    if diverge is None:
        assert spec == plain
        return
    tolerance = 2 * path_noise(gemma, prompt, plain)
    assert fresh_gap(gemma, prompt, plain, diverge) < tolerance, (diverge, tolerance)


def test_run_sends_a_base_models_prompt_as_raw_text(gemma3_270m_gguf, capsys):
    from localspec.cli import commands

    path = str(gemma3_270m_gguf)
    argv = ["run", PROMPTS["code"], "-m", path, "-md", path, "-n", "24", "--temp", "0"]
    assert commands.main(argv + ["--no-color", "-c", "1024"]) == 0
    out, err = capsys.readouterr()
    assert "no chat template: the prompt is sent as raw text" in err
    assert out.strip() and "24 tokens" in err
