"""Build the desktop app as one folder that runs without Python or a venv:

    .venv/bin/pip install -e '.[gui,bundle]' && .venv/bin/python packaging/build_app.py

Linux: ``dist/localspec/`` (the executable ``localspec-gui``, llama.cpp's libraries under
``_internal/llama_cpp/lib/``), with ``localspec.desktop`` and the icon beside it; macOS:
``dist/localspec.app``; Windows: ``dist/localspec/localspec-gui.exe``.  ``--tarball``
also packs the folder (``dist/localspec-<system>-<machine>.tar.gz``).  The recipe is
``packaging/localspec.spec`` (PyInstaller); the llama.cpp backend is whichever
llama-cpp-python this Python has (CPU, CUDA, Metal).

Exit status 0, or 2 with one line on stderr naming what is missing or what failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "localspec.spec"
ICON_SVG = ROOT / "packaging" / "localspec.svg"
DESKTOP_TEMPLATE = ROOT / "packaging" / "localspec.desktop"
ICON_PNG = (
    ROOT / "build" / "icon" / "localspec.png"
)  # the spec gives it to macOS and Windows builds
INSTALL_HINT = "install the build's extras: .venv/bin/pip install -e '.[gui,bundle]'"
# module -> what it brings; each must import in the building Python
NEEDED = {
    "PyInstaller": "the bundler",
    "PySide6": "the window",
    "pygments": "the code colours",
    "openai": "chatting with a server",
    "llama_cpp": "llama-cpp-python, the engine",
}
LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")


class BuildError(Exception):
    """Something the user can fix; the message is one line."""


def missing_modules() -> list[str]:
    """What of :data:`NEEDED` this Python lacks, as "name (what it brings)"."""
    return [f"{m} ({why})" for m, why in NEEDED.items() if importlib.util.find_spec(m) is None]


def llama_libraries() -> list[Path]:
    """llama.cpp's shared libraries in the installed llama_cpp package (``llama_cpp/lib``).
    Raises BuildError when there are none (a broken llama-cpp-python install)."""
    spec = importlib.util.find_spec("llama_cpp")
    lib = Path(spec.origin).parent / "lib" if spec and spec.origin else None
    found = sorted(p for p in lib.iterdir() if _is_library(p)) if lib and lib.is_dir() else []
    if not found:
        raise BuildError(
            f"llama-cpp-python has no shared libraries in {lib}: reinstall it (pip install -e .)"
        )
    return found


def _is_library(path: Path) -> bool:
    return path.is_file() and any(s in path.name for s in LIBRARY_SUFFIXES)


def unversioned(name: str) -> str:
    """A library's name without its version parts: "libggml-base.so.0.25.3" ->
    "libggml-base.so", "libllama.0.dylib" -> "libllama.dylib" (the name llama_cpp opens)."""
    return ".".join(part for part in name.split(".") if not part.isdigit())


def bundle_problems(bundle_lib: Path, libraries: list[Path]) -> list[str]:
    """The libraries of ``libraries`` (by unversioned name, as llama_cpp opens them) that
    the built bundle's llama_cpp/lib folder ``bundle_lib`` lacks, sorted."""
    present = (
        {unversioned(p.name) for p in bundle_lib.iterdir() if p.is_file()}
        if bundle_lib.is_dir()
        else set()
    )
    return sorted({unversioned(p.name) for p in libraries} - present)


def desktop_entry(executable: Path, icon: Path, template: Path = DESKTOP_TEMPLATE) -> str:
    """The .desktop file's text with ``Exec`` and ``Icon`` set to absolute paths (the
    template names the bare command and icon, for a system-wide install)."""
    lines = []
    for line in template.read_text().splitlines():
        if line.startswith("Exec="):
            line = f"Exec={_desktop_quote(executable)}"
        elif line.startswith("Icon="):
            line = f"Icon={icon}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _desktop_quote(path: Path) -> str:
    """``path`` as an Exec argument (quoted when it has spaces or reserved characters)."""
    text = str(path)
    if any(c in text for c in " \t\"'\\><~|&;$*?#()`"):
        return (
            '"'
            + text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
            + '"'
        )
    return text


def render_icon(out: Path, size: int = 256) -> Path:
    """Draw ``packaging/localspec.svg`` as a ``size``-pixel PNG at ``out`` (Qt's SVG renderer)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(["build_app"])  # noqa: F841 (kept alive while drawing)
    image = QImage(size, size, QImage.Format_ARGB32)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(ICON_SVG)).render(painter)
    painter.end()
    out.parent.mkdir(parents=True, exist_ok=True)
    if not image.save(str(out), "PNG"):
        raise BuildError(f"could not write the icon {out}")
    return out


def run_pyinstaller(dist: Path, work: Path) -> None:
    """Run PyInstaller on the spec; its log goes to ``work/pyinstaller.log``.  Raises
    BuildError naming the log and its last line when it fails."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "pyinstaller.log"
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN"]
    command += ["--distpath", str(dist), "--workpath", str(work), str(SPEC)]
    with log.open("w") as out:
        done = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        last = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"PyInstaller failed (exit {done.returncode}; log {log}): {last}")


def finish_linux(folder: Path, icon_png: Path) -> None:
    """Put the icons and a .desktop file with this folder's absolute paths into ``folder``."""
    shutil.copy2(ICON_SVG, folder / "localspec.svg")
    shutil.copy2(icon_png, folder / "localspec.png")
    entry = desktop_entry(folder.resolve() / "localspec-gui", folder.resolve() / "localspec.png")
    (folder / "localspec.desktop").write_text(entry)


def tarball(folder: Path) -> Path:
    """Pack ``folder`` as ``<folder>-<system>-<machine>.tar.gz`` beside it."""
    base = folder.parent / f"{folder.name}-{platform.system().lower()}-{platform.machine().lower()}"
    return Path(
        shutil.make_archive(str(base), "gztar", root_dir=folder.parent, base_dir=folder.name)
    )


def size_mib(path: Path) -> float:
    files = (
        [path]
        if path.is_file()
        else [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    )
    return sum(p.stat().st_size for p in files) / 2**20


def build(dist: Path, work: Path, pack: bool) -> Path:
    """The whole build; returns the app's folder (or the .app).  Raises BuildError."""
    missing = missing_modules()
    if missing:
        raise BuildError(f"missing {', '.join(missing)}: {INSTALL_HINT}")
    libraries = llama_libraries()
    icon_png = render_icon(ICON_PNG)
    run_pyinstaller(dist, work)
    folder = dist / "localspec"
    lost = bundle_problems(folder / "_internal" / "llama_cpp" / "lib", libraries)
    if lost:
        raise BuildError(
            f"the bundle lacks llama.cpp's {', '.join(lost)} (see packaging/localspec.spec)"
        )
    if sys.platform == "linux":
        finish_linux(folder, icon_png)
    if pack:
        print(f"packed {tarball(folder)}")
    return dist / "localspec.app" if sys.platform == "darwin" else folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="packaging/build_app.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--dist", type=Path, default=ROOT / "dist", help="where the app goes (default dist/)"
    )
    parser.add_argument("--tarball", action="store_true", help="also pack the folder as a .tar.gz")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        app = build(args.dist, ROOT / "build" / "pyinstaller", args.tarball)
    except BuildError as exc:
        print(f"build_app: error: {exc}", file=sys.stderr)
        return 2
    took = time.perf_counter() - started
    print(f"built {app} ({size_mib(app):.0f} MiB) in {took / 60:.1f} min")
    if sys.platform == "linux":
        entry = app / "localspec.desktop"
        print(
            f"start it: {app / 'localspec-gui'}; "
            f"menu entry: cp {entry} ~/.local/share/applications/"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
