"""``localspec doctor``: what this installation can do on this machine, and what to fix.

One report (a dict, for ``--json``) built from :mod:`localspec.machine` (the hardware),
:mod:`localspec.llama.backend` (the llama.cpp build) and :mod:`localspec.llama.amx_probe`.  The same
facts, as :func:`machine_record`, go into every benchmark result, because a speed-up
measured on one machine says little about another.
"""

from __future__ import annotations

import platform
import sys
import time

from localspec import machine
from localspec.llama import amx_probe, backend
from localspec.llama.engine import default_threads
from localspec.llama.machine_store import MachineStore
from localspec.models import cache
from localspec.models.architectures import (
    NOT_CACHED,
    RS_SNAPSHOTS,
    SAVED_STATE_ARCHS,
    SNAPSHOT_ARCHS,
)

_warned = False


def gpu_warning() -> str | None:
    """One line when the machine has a GPU that this llama.cpp build cannot use, with the
    reinstall command that fixes it; None otherwise."""
    gpu = machine.gpu_hardware()
    if gpu is None or backend.supports_gpu_offload():
        return None
    return (
        f"{gpu.vendor} GPU found, but this llama-cpp-python build is CPU-only, so models run "
        f"slowly and speculation mostly loses; rebuild it for {gpu.backend}: "
        f"{reinstall_command(gpu)}"
    )


def reinstall_command(gpu: machine.GpuHardware) -> str:
    return (
        f'CMAKE_ARGS="{gpu.cmake_flag}" {sys.executable} -m pip install --force-reinstall '
        "--no-deps "
        f"--no-cache-dir llama-cpp-python=={backend.llama_cpp_python_version()}"
    )


def warn_gpu_once(write=lambda line: print(line, file=sys.stderr)) -> str | None:
    """Show :func:`gpu_warning` once per process (``run``, ``serve``, the GUI); returns it."""
    global _warned
    line = gpu_warning()
    if line and not _warned:
        _warned = True
        write(f"localspec: warning: {line}")
    return line


def machine_record(n_threads: int | None = None) -> dict:
    """The machine and build a benchmark ran on: CPU model, cores, threads used, memory
    (bytes), llama.cpp's system info line and backend, versions, the AMX decision."""
    decision = amx_probe.amx_decision()
    return {
        "cpu": machine.cpu_model(),
        "logical_cpus": machine.logical_cpus(),
        "threads": n_threads or default_threads(),
        "memory_bytes": machine.memory_bytes(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "llama_cpp_python": backend.llama_cpp_python_version(),
        "llama_cpp_commit": backend.llama_cpp_commit(),
        "backend": backend.gpu_backend(),
        "system_info": backend.system_info(),
        "amx": decision.status,
    }


def machine_line(record: dict) -> str:
    """``machine_record`` in one line for tables and plot titles."""
    return (
        f"{record['cpu']}, {record['threads']} of {record['logical_cpus']} threads, "
        f"{record['memory_bytes'] / 2**30:.0f} GiB, {record['backend']} build "
        f"(llama-cpp-python {record['llama_cpp_python']}, llama.cpp {record['llama_cpp_commit']}), "
        f"AMX {record['amx'].split(' (')[0]}"
    )


def report() -> dict:
    """Everything ``localspec doctor`` prints."""
    from importlib.metadata import version

    from huggingface_hub import constants

    from localspec.models.catalog import load_catalog

    gpu = machine.gpu_hardware()
    pair = load_catalog().pair()
    on_disk = {
        role: cache.find_local(entry)
        for role, entry in (("target", pair.target), ("draft", pair.draft))
    }
    return {
        "localspec": version("localspec"),
        "llama_cpp_python": backend.llama_cpp_python_version(),
        "llama_cpp_commit": backend.llama_cpp_commit(),
        "system_info": backend.system_info(),
        "gpu_offload": backend.supports_gpu_offload(),
        "backend": backend.gpu_backend(),
        "backends": backend.registered_backends(),
        "devices": [vars(d) for d in backend.devices()],
        "cpu": machine.cpu_model(),
        "logical_cpus": machine.logical_cpus(),
        "threads": default_threads(),
        "memory_bytes": machine.memory_bytes(),
        "gpu_hardware": vars(gpu) if gpu else None,
        "gpu_warning": gpu_warning(),
        "reinstall_command": reinstall_command(gpu)
        if gpu and not backend.supports_gpu_offload()
        else None,
        "amx": amx_report(),
        "caches": {
            "models": str(cache.cache_dir()),
            "huggingface": str(constants.HF_HUB_CACHE),
            "amx_probe": str(amx_probe.cache_file()),
        },
        "learned": learned_report(),
        "hybrid_models": hybrid_models(),
        "default_pair": {
            "name": pair.name,
            **{
                role: {
                    "name": entry.name,
                    "size_bytes": entry.size,
                    "path": str(on_disk[role]) if on_disk[role] else None,
                }
                for role, entry in (("target", pair.target), ("draft", pair.draft))
            },
        },
    }


def amx_report() -> dict:
    """The CPU's AMX, the build's, and whether localspec avoids llama.cpp's AMX kernels here."""
    decision = amx_probe.amx_decision()
    return {
        "cpu_has_amx": machine.cpu_has_amx(),
        "in_build": backend.amx_in_build(),
        "forced_off": amx_probe.forced_off(),
        "avoided": decision.avoid_amx,
        "status": decision.status,
        "source": decision.source,
        "cpu_buffer_types": sorted(backend.cpu_extra_buffer_types()),
    }


def hybrid_models() -> dict:
    """How models that keep a recurrent state go back after a rejected draft, and what of
    them is not cached (:mod:`localspec.models.architectures`)."""
    return {
        "snapshots": RS_SNAPSHOTS,
        "snapshot_archs": list(SNAPSHOT_ARCHS),
        "saved_state_archs": list(SAVED_STATE_ARCHS),
        "not_cached": NOT_CACHED,
    }


def format_report(r: dict) -> str:
    """The report as text for people."""
    amx = r["amx"]
    lines = [
        f"localspec          {r['localspec']}",
        f"llama-cpp-python   {r['llama_cpp_python']} (llama.cpp {r['llama_cpp_commit']})",
        f"backend            {r['backend']} (registered: {', '.join(r['backends'])}; "
        f"GPU offload {'yes' if r['gpu_offload'] else 'no'})",
        f"system info        {r['system_info']}",
        f"CPU                {r['cpu']} ({r['logical_cpus']} logical CPUs, {r['threads']} "
        "threads used)",
        f"memory             {r['memory_bytes'] / 2**30:.1f} GiB",
    ]
    for d in r["devices"]:
        memory = f", {d['memory_total'] / 2**30:.1f} GiB" if d["memory_total"] else ""
        lines.append(f"device             {d['name']} ({d['kind']}: {d['description']}{memory})")
    gpu = r["gpu_hardware"]
    lines.append(
        f"GPU hardware       {gpu['vendor']} ({gpu['detail']})"
        if gpu
        else "GPU hardware       none found"
    )
    lines += [
        f"AMX                CPU {'has' if amx['cpu_has_amx'] else 'lacks'} AMX; build "
        f"{'has' if amx['in_build'] else 'lacks'} AMX kernels; {amx['status']} [{amx['source']}]",
        f"{amx_probe.ENV_NO_AMX:<18} "
        f"{'set: the fallback is forced' if amx['forced_off'] else 'not set'}",
        f"CPU buffer types   {', '.join(amx['cpu_buffer_types']) or 'none'}",
        f"model cache        {r['caches']['models']}",
        f"Hugging Face cache {r['caches']['huggingface']}",
        f"AMX probe cache    {r['caches']['amx_probe']}",
    ]
    pair = r["default_pair"]
    for role in ("target", "draft"):
        entry = pair[role]
        state = (
            entry["path"]
            or f"not downloaded ({entry['size_bytes'] / 1e9:.2f} GB; `localspec pull "
            f"{pair['name']}`)"
        )
        lines.append(f"default {role:<10} {entry['name']}: {state}")
    hybrid = r["hybrid_models"]
    lines += [
        f"hybrid models      rolled back by {hybrid['snapshots']} recurrent-state snapshots: "
        f"{', '.join(hybrid['snapshot_archs'])}; from a saved state: "
        f"{', '.join(hybrid['saved_state_archs'])}; not cached: {hybrid['not_cached']}",
        "built-in drafters  a GGUF's own MTP blocks (nextn_predict_layers); Gemma 4's assistant "
        "(gemma4-assistant GGUF as -md); both with --parallel 1",
    ]
    lines += format_learned(r["learned"])
    if r["gpu_warning"]:
        lines += ["", f"warning: {r['gpu_warning']}"]
    return "\n".join(lines)


def learned_report(store: MachineStore | None = None) -> dict:
    """What the store keeps (:mod:`localspec.llama.machine_store`): ``{"folder", "entries"}``,
    an entry per key with the pair's file names (None where not recorded), threads,
    offload, hardware, when updated (seconds since the epoch), c(1) and c(17) in seconds
    (None where not measured) and ``acceptance``: kind of request -> drafter -> estimate."""
    store = store or MachineStore()
    entries = []
    for e in store.entries():
        key, record = e["key"], e["record"] if isinstance(e["record"], dict) else {}
        pair = _mapping(record.get("pair"))
        verify = _mapping(_mapping(record.get("costs")).get("verify"))
        entries.append(
            {
                "file": e["path"],
                "target": pair.get("target"),
                "draft": pair.get("draft"),
                "threads": key.get("threads"),
                "offload": key.get("offload"),
                "hardware": key.get("hardware"),
                "updated": e["updated"],
                "c1_s": verify.get("1"),
                "c17_s": verify.get("17"),
                "acceptance": {
                    kind: _alphas(p) for kind, p in _mapping(record.get("priors")).items()
                },
            }
        )
    return {"folder": str(store.directory), "entries": entries}


def _mapping(x) -> dict:
    return x if isinstance(x, dict) else {}


def _alphas(priors) -> dict:
    out = {}
    for name, p in _mapping(priors).items():
        s, t = _mapping(p).get("successes"), _mapping(p).get("trials")
        if isinstance(s, (int, float)) and isinstance(t, (int, float)) and t > 0:
            out[name] = round(s / t, 3)
    return out


def format_learned(learned: dict) -> list[str]:
    """:func:`learned_report` as text lines."""
    lines = [
        f"learned store      {learned['folder']} ({len(learned['entries'])} pair(s); `doctor "
        "--recalibrate` forgets)"
    ]
    for e in learned["entries"]:
        when = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(e["updated"])) if e["updated"] else "?"
        )
        costs = ", ".join(
            f"{n} {v * 1e3:.1f} ms" for n, v in (("c(1)", e["c1_s"]), ("c(17)", e["c17_s"])) if v
        )
        lines.append(
            f"  {e['target'] or '?'} + {e['draft'] or 'no draft'}: {e['threads']} threads, "
            f"updated {when}; "
            f"{costs or 'no costs'}"
        )
        for kind, alphas in e["acceptance"].items():
            lines.append(
                f"    {kind}: " + ", ".join(f"{name} {a:.2f}" for name, a in alphas.items())
            )
    return lines
