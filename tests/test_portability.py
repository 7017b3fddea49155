"""Portability: the AMX probe's decision, the AMX fallback's weight placement, doctor,
the GPU-build warning and the machine record of benchmarks.

This machine's CPU may lack AMX; the fallback is then exercised through
LOCALSPEC_NO_AMX=1 and ``cpu_buffers="no-amx"``, and the probe's crash outcome through
a child that really dies of SIGILL.
"""

import json
import sys

import numpy as np
import pytest

from localspec import machine
from localspec.cli import main
from localspec.errors import InvalidOptionError
from localspec.llama import amx_probe, backend
from localspec.llama import report as doctor
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.peer import load_peer_llama
from localspec.models.gguf_info import check_gguf_file

SIGILL_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]


@pytest.fixture
def no_env_force(monkeypatch):
    monkeypatch.delenv(amx_probe.ENV_NO_AMX, raising=False)


def test_a_child_killed_by_sigill_is_a_result_not_a_crash():
    result = amx_probe.run_probe(SIGILL_CHILD)
    assert not result.ok and result.crash_signal == "SIGILL"


def test_the_real_probe_child_decodes_here_or_crashes_and_the_fallback_decodes(
    tmp_path, no_env_force, monkeypatch
):
    """The probe decodes, except on a CPU with AMX and a build with llama.cpp's AMX kernels,
    where a crash is what it is there to catch: SIGILL on machine B of the design notes,
    SIGSEGV on the Xeon of 2026-12-07.  After a crash, an engine that asks the decision
    loads its weights without AMX and decodes the same Q4_K_M model."""
    from localspec.llama.amx_child import write_probe_model

    result = amx_probe.run_probe()
    if not (machine.cpu_has_amx() and backend.amx_in_build()):
        assert result.ok, result.detail
        return
    assert result.ok or result.crash_signal in amx_probe.CRASH_SIGNALS, result.detail
    decision = amx_probe.decide(True, tmp_path / "probe.json", lambda: result)
    assert decision.avoid_amx == (not result.ok) and decision.source == "probe"
    if result.ok:
        return
    assert "crash on this machine" in decision.status and result.crash_signal in decision.status
    monkeypatch.setattr(amx_probe, "amx_decision", lambda: decision)
    model = write_probe_model(tmp_path)
    engine = Engine(model, EngineConfig(n_ctx=256, n_gpu_layers=0, n_threads=2, cpu_buffers="auto"))
    try:
        assert engine.cpu_buffers.startswith("without AMX")
        logits = engine.decode([3 + (i * 7) % 300 for i in range(64)], [63])[0]
        assert np.isfinite(logits).all()
    finally:
        engine.close()


@pytest.mark.parametrize("signal_name", ["SIGILL", "SIGSEGV", "SIGBUS"])
def test_each_crash_signal_of_the_amx_kernels_turns_amx_off(tmp_path, no_env_force, signal_name):
    child = [sys.executable, "-c", f"import os, signal; os.kill(os.getpid(), signal.{signal_name})"]
    decision = amx_probe.decide(True, tmp_path / "probe.json", lambda: amx_probe.run_probe(child))
    assert (
        decision.avoid_amx
        and f"crash on this machine (probe child killed by {signal_name})" in decision.status
    )


def test_a_child_killed_for_another_reason_avoids_amx_without_blaming_it(tmp_path, no_env_force):
    child = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    decision = amx_probe.decide(True, tmp_path / "probe.json", lambda: amx_probe.run_probe(child))
    assert decision.avoid_amx and "the probe failed (killed by SIGTERM)" in decision.status


def test_a_failing_child_is_reported_with_its_last_line():
    result = amx_probe.run_probe([sys.executable, "-c", "import sys; sys.exit('no llama here')"])
    assert not result.ok and result.crash_signal is None and "no llama here" in result.detail


def test_decision_avoids_amx_after_a_crash_and_caches_it(tmp_path, no_env_force):
    cache = tmp_path / "probe.json"
    calls = []

    def crashing():
        calls.append(1)
        return amx_probe.run_probe(SIGILL_CHILD)

    first = amx_probe.decide(True, cache, crashing)
    assert first.avoid_amx and first.source == "probe" and "SIGILL" in first.status
    second = amx_probe.decide(True, cache, crashing)
    assert second.avoid_amx and second.source == "cache" and len(calls) == 1
    assert json.loads(cache.read_text())[amx_probe.machine_key()]["crash_signal"] == "SIGILL"


def test_decision_keeps_amx_when_the_probe_decodes(tmp_path, no_env_force):
    decoded = amx_probe.ProbeResult(
        True, None, "decoded", 1.0
    )  # the real child crashes on AMX Xeons
    decision = amx_probe.decide(True, tmp_path / "probe.json", lambda: decoded)
    assert (
        not decision.avoid_amx
        and decision.source == "probe"
        and decision.status.startswith("in use")
    )


def test_no_probe_without_amx_in_the_build(tmp_path, no_env_force):
    decision = amx_probe.decide(False, tmp_path / "probe.json", lambda: pytest.fail("probed"))
    assert not decision.avoid_amx and decision.source == "build"


def test_the_environment_forces_the_fallback_without_probing(tmp_path, monkeypatch):
    monkeypatch.setenv(amx_probe.ENV_NO_AMX, "1")
    decision = amx_probe.decide(True, tmp_path / "probe.json", lambda: pytest.fail("probed"))
    assert decision.avoid_amx and decision.source == "env"
    assert amx_probe.amx_decision().source == "env"
    monkeypatch.delenv(amx_probe.ENV_NO_AMX)
    assert amx_probe.amx_decision().source != "env"  # the setting is read again, not remembered


def test_a_corrupt_cache_means_probing_again(tmp_path, no_env_force):
    cache = tmp_path / "probe.json"
    cache.write_text("{not json")
    decision = amx_probe.decide(True, cache, lambda: amx_probe.ProbeResult(True, None, "ok", 0.1))
    assert decision.source == "probe" and not decision.avoid_amx


def test_repack_selection_follows_llama_cpp_rules(real_pair_paths):
    info = check_gguf_file(real_pair_paths.target)
    names = backend.repack_tensors(info, avx2=True, avx512=False)
    by_name = {t.name: t for t in info.tensors}
    assert names and all(
        by_name[n].ggml_type.name in ("Q4_0", "Q4_K", "IQ4_NL", "MXFP4") for n in names
    )
    assert all(by_name[n].shape[1] % 8 == 0 for n in names)
    assert "token_embd.weight" not in names
    q6k = [t.name for t in info.tensors if t.ggml_type.name == "Q6_K"]
    assert q6k and not set(q6k) & set(names)  # Q6_K has no x86 repack kernel
    assert backend.repack_tensors(info, avx2=False, avx512=False) == []


def test_override_patterns_name_exactly_the_chosen_tensors():
    import re

    names = [
        "blk.0.attn_q.weight",
        "blk.12.attn_q.weight",
        "blk.3.ffn_down.weight",
        "output.weight",
    ]
    patterns = backend._override_patterns(names)
    others = [
        "blk.1.attn_q.weight",
        "blk.120.attn_q.weight",
        "blk.0.attn_q.weight2",
        "token_embd.weight",
    ]
    assert all(any(re.search(p, n) for p in patterns) for n in names)
    assert not any(re.search(p, n) for p in patterns for n in others)


def test_fallback_keeps_cpu_repack_and_the_same_logits(real_pair_paths, capfd):
    """The fallback puts the same bytes in CPU_REPACK as llama.cpp's default on a build
    without AMX, and its logits equal the default's.  Where the default's AMX kernels
    crash (the probe says so), the default cannot be decoded here: the fallback must
    then load nothing into the AMX buffer type, repack into CPU_REPACK, and decode."""
    prompt = list(range(1000, 1040))
    engines = {}
    logs = {}
    for mode in ("default", "no-amx"):
        capfd.readouterr()
        engines[mode] = Engine(
            real_pair_paths.target, EngineConfig(n_ctx=256, cpu_buffers=mode), verbose=True
        )
        logs[mode] = capfd.readouterr().err
    buffers = {
        mode: [
            line.split("=")[-1].strip()
            for line in log.splitlines()
            if "CPU_REPACK model buffer size" in line
        ]
        for mode, log in logs.items()
    }
    try:
        if "CPU_REPACK" in backend.cpu_extra_buffer_types() and not backend.amx_in_build():
            assert buffers["no-amx"] and buffers["no-amx"] == buffers["default"]
        assert engines["no-amx"].cpu_buffers.startswith("without AMX")
        b = engines["no-amx"].decode(prompt, [39])[0]
        if amx_probe.amx_decision().avoid_amx and backend.amx_in_build():
            assert (
                "AMX model buffer" in logs["default"] and "AMX model buffer" not in logs["no-amx"]
            )
            assert buffers["no-amx"] and np.isfinite(b).all()
        else:
            np.testing.assert_array_equal(engines["default"].decode(prompt, [39])[0], b)
    finally:
        for e in engines.values():
            e.close()


def test_the_benchmarks_peer_llama_loads_its_weights_as_an_engine_does(
    real_pair_paths, monkeypatch, capfd
):
    """llama-cpp-python's own ``Llama`` (the benchmarks' peer) has no option to avoid the
    AMX kernels; on a machine where they crash, it must still load without them (before
    load_peer_llama, ``localspec bench`` died of SIGILL at the peer's first decode)."""
    monkeypatch.setattr(
        amx_probe, "amx_decision", lambda: amx_probe.AmxDecision(True, "forced by the test", "env")
    )
    capfd.readouterr()
    peer = load_peer_llama(
        real_pair_paths.target,
        n_ctx=256,
        n_threads=2,
        flash_attn=True,
        logits_all=True,
        verbose=True,
    )
    log = capfd.readouterr().err
    ours = Engine(real_pair_paths.target, EngineConfig(n_ctx=256, cpu_buffers="no-amx"))
    try:
        assert "model buffer size" in log and "AMX model buffer" not in log
        prompt = list(range(1000, 1040))
        peer.eval(prompt)
        np.testing.assert_allclose(
            peer.scores[len(prompt) - 1], ours.decode(prompt, [39])[0], rtol=0, atol=1e-4
        )
    finally:
        peer.close()
        ours.close()


def test_unknown_cpu_buffers_setting_is_refused():
    with pytest.raises(InvalidOptionError, match="cpu_buffers"):
        EngineConfig(cpu_buffers="amx-please")


def test_doctor_reports_the_build(monkeypatch, capsys):
    monkeypatch.setenv(amx_probe.ENV_NO_AMX, "1")
    assert main(["doctor", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["llama_cpp_python"] == "0.3.36" and r["llama_cpp_commit"] == "0c1e57098"
    assert r["system_info"].startswith("CPU :") and r["backend"] in ("CPU",) + backend.GPU_BACKENDS
    assert r["gpu_offload"] == backend.supports_gpu_offload()
    assert r["amx"]["forced_off"] and r["amx"]["avoided"] and r["amx"]["source"] == "env"
    assert r["threads"] >= 1 and r["memory_bytes"] > 0 and r["default_pair"]["target"]["name"]
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert (
        "LOCALSPEC_NO_AMX   set: the fallback is forced" in text and "llama.cpp 0c1e57098" in text
    )
    hybrid = next(line for line in text.splitlines() if line.startswith("hybrid models"))
    assert "16 recurrent-state snapshots: qwen35, qwen35moe" in hybrid
    assert "saved state: mamba, mamba2" in hybrid and "never share a prompt prefix" in hybrid
    assert r["hybrid_models"]["snapshot_archs"][:2] == ["qwen35", "qwen35moe"]


def test_gpu_without_a_gpu_build_warns_once_with_the_reinstall_command(monkeypatch):
    gpu = machine.GpuHardware("NVIDIA", "NVRM version: test", "CUDA", "-DGGML_CUDA=on")
    monkeypatch.setattr(machine, "gpu_hardware", lambda: gpu)
    monkeypatch.setattr(backend, "supports_gpu_offload", lambda: False)
    monkeypatch.setattr(doctor, "_warned", False)
    line = doctor.gpu_warning()
    assert "NVIDIA GPU found" in line and 'CMAKE_ARGS="-DGGML_CUDA=on"' in line
    assert "llama-cpp-python==0.3.36" in line and sys.executable in line
    shown = []
    doctor.warn_gpu_once(shown.append)
    doctor.warn_gpu_once(shown.append)
    assert len(shown) == 1
    monkeypatch.setattr(backend, "supports_gpu_offload", lambda: True)
    assert doctor.gpu_warning() is None


def test_benchmark_machine_record_names_cpu_build_and_threads():
    record = doctor.machine_record(2)
    assert record["cpu"] == machine.cpu_model() and record["threads"] == 2
    assert record["system_info"] == backend.system_info() and record["memory_bytes"] > 0
    line = doctor.machine_line(record)
    assert record["cpu"] in line and "llama-cpp-python 0.3.36" in line
