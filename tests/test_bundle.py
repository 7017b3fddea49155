"""The desktop bundle's recipe (packaging/): the .desktop file, the checks of the build
script, the entry point's Python-like dispatch, the self-test it runs, and the bundle
itself, built here (about 3 minutes on 2 cores), answering from a shell with no venv on
PATH."""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"packaging_{name}", PACKAGING / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_app = _load("build_app")
bundle_main = _load("bundle_main")


def _desktop_entry(text: str) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string(text)
    return dict(parser["Desktop Entry"])


def _validate(path: Path) -> None:
    """desktop-file-validate's verdict where it is installed (desktop-file-utils)."""
    if shutil.which("desktop-file-validate"):
        done = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
        assert done.returncode == 0 and "error" not in done.stdout, done.stdout


def test_the_desktop_file_has_what_a_menu_needs():
    entry = _desktop_entry((PACKAGING / "localspec.desktop").read_text())
    assert entry["Type"] == "Application" and entry["Name"] == "localspec"
    assert entry["Exec"] == "localspec-gui" and entry["Icon"] == "localspec"
    assert entry["Categories"].endswith(";") and "Development" in entry["Categories"]
    assert entry["Terminal"] == "false"
    _validate(PACKAGING / "localspec.desktop")


def test_the_built_desktop_file_points_at_the_bundle(tmp_path):
    folder = tmp_path / "my apps" / "localspec"
    text = build_app.desktop_entry(folder / "localspec-gui", folder / "localspec.png")
    entry = _desktop_entry(text)
    assert entry["Exec"] == f'"{folder / "localspec-gui"}"'  # quoted: the path has a space
    assert entry["Icon"] == str(folder / "localspec.png")
    assert entry["Name"] == "localspec" and entry["Type"] == "Application"
    (tmp_path / "localspec.desktop").write_text(text)
    _validate(tmp_path / "localspec.desktop")


def test_llama_cpp_libraries_are_found_and_checked_in_the_bundle(tmp_path):
    libraries = build_app.llama_libraries()
    names = {build_app.unversioned(p.name) for p in libraries}
    assert any(n.startswith("libllama") or n.startswith("llama") for n in names), names
    assert any("ggml" in n for n in names), names
    bundle_lib = tmp_path / "_internal" / "llama_cpp" / "lib"
    bundle_lib.mkdir(parents=True)
    assert build_app.bundle_problems(bundle_lib, libraries) == sorted(names)
    for name in names:
        (bundle_lib / name).write_bytes(b"")
    assert build_app.bundle_problems(bundle_lib, libraries) == []
    assert build_app.unversioned("libggml-base.so.0.25.3") == "libggml-base.so"
    assert build_app.unversioned("libllama.0.dylib") == "libllama.dylib"


def test_pyinstaller_puts_llama_cpp_libraries_where_llama_cpp_loads_them():
    from PyInstaller.utils.hooks import collect_dynamic_libs

    collected = collect_dynamic_libs("llama_cpp")
    assert collected and {dest for _, dest in collected} == {os.path.join("llama_cpp", "lib")}
    assert 'collect_dynamic_libs("llama_cpp")' in (PACKAGING / "localspec.spec").read_text()


def test_a_missing_build_tool_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(build_app.NEEDED, "no_such_module_for_the_bundle", "a tool the build needs")
    assert build_app.main(["--dist", "/nonexistent"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and "no_such_module_for_the_bundle (a tool the build needs)" in err
    )
    assert "pip install -e '.[gui,bundle]'" in err


def test_the_entry_point_runs_code_and_modules_like_python(tmp_path, monkeypatch):
    out = tmp_path / "out.txt"
    code = f"import sys; open({str(out)!r}, 'w').write(' '.join(sys.argv)); sys.exit(7)"
    with pytest.raises(SystemExit) as stop:
        bundle_main.run_like_python(["-c", code, "a", "b"])
    assert stop.value.code == 7 and out.read_text() == "-c a b"
    (tmp_path / "probe_mod.py").write_text(
        f"import sys\nopen({str(out)!r}, 'w').write(__name__ + ' ' + sys.argv[1])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", sys.argv[:])
    assert bundle_main.run_like_python(["-m", "probe_mod", "x"]) is True
    assert out.read_text() == "__main__ x"
    assert bundle_main.run_like_python(["--self-test"]) is False
    assert bundle_main.run_like_python([]) is False


@pytest.mark.real_pair
def test_the_self_test_answers_with_the_default_pair(qapp, real_pair_paths, capsys):
    pytest.importorskip("PySide6")
    from gui.self_test import run

    assert run(prompt="Say hi.", max_tokens=6, timeout_s=300) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[0].startswith("localspec-gui self-test: window shown at")
    assert "pair loaded at" in lines[1] and "qwen2.5-coder-1.5b" in lines[1]
    assert lines[-1].startswith("localspec-gui self-test: answered at") and "tokens" in lines[-1]
    assert any(line.strip() for line in lines[2:-1]), out


@pytest.mark.real_pair
def test_the_bundle_answers_from_a_shell_without_the_venv(tmp_path, real_pair_paths):
    assert build_app.main(["--dist", str(tmp_path / "dist")]) == 0
    app = tmp_path / "dist" / "localspec" / "localspec-gui"
    env = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen"}
    for key in ("XDG_CACHE_HOME", "LOCALSPEC_CACHE", "HF_HUB_CACHE"):
        if key in os.environ:
            env[key] = os.environ[key]
    done = subprocess.run(
        [str(app), "--self-test"], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "localspec-gui self-test: answered at" in done.stdout, done.stdout
