"""Before Qt starts: can it open a window here?  One line naming what is missing and the
command that installs it, instead of Qt's own "Could not load the Qt platform plugin
"xcb"… Reinstalling the application may fix this problem" and an abort.

Linux only (the wheels carry everything on macOS and Windows).  Reads the PySide6 wheel's
own xcb plugin with ``ldd``: the libraries it reports "not found" are exactly the ones
Qt would fail on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# Shared library -> Debian / Ubuntu package.
DEBIAN_PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xinput.so.0": "libxcb-xinput0",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb.so.1": "libxcb1",
    "libX11.so.6": "libx11-6",
    "libSM.so.6": "libsm6",
    "libICE.so.6": "libice6",
    "libfontconfig.so.1": "libfontconfig1",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libfreetype.so.6": "libfreetype6",
    "libOpenGL.so.0": "libopengl0",
}
NO_DISPLAY_NEEDED = ("offscreen", "minimal", "minimalegl", "vnc", "eglfs", "linuxfb")
OTHER_SYSTEMS = (
    "Fedora: sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms libxkbcommon-x11; "
    "Arch: sudo pacman -S xcb-util-cursor xcb-util-wm xcb-util-keysyms"
)


def install_line(libraries: list[str]) -> str:
    """The install command for known libraries; a library not in the table is named for
    the user to find (guessing a package name would give a command that fails)."""
    known = sorted({DEBIAN_PACKAGES[lib] for lib in libraries if lib in DEBIAN_PACKAGES})
    unknown = sorted({lib for lib in libraries if lib not in DEBIAN_PACKAGES})
    parts = []
    if known:
        parts.append(f"sudo apt-get install {' '.join(known)} (Debian/Ubuntu; {OTHER_SYSTEMS})")
    if unknown:
        parts.append(f"install the system package that provides {', '.join(unknown)}")
    return "; ".join(parts)


def missing_libraries(files: list[Path]) -> list[str]:
    """Shared libraries ``ldd`` reports "not found" for any of ``files``, sorted."""
    missing = set()
    for f in files:
        if not f.exists():
            continue
        try:
            out = subprocess.run(
                ["ldd", str(f)], capture_output=True, text=True, errors="replace", timeout=10
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        missing.update(m.group(1) for m in re.finditer(r"^\s*(\S+)\s*=>\s*not found", out, re.M))
    return sorted(missing)


def xcb_plugin_files() -> list[Path]:
    """The PySide6 wheel's xcb platform plugin and the Qt library behind it."""
    import PySide6

    qt = Path(PySide6.__file__).parent / "Qt"
    return [
        qt / "plugins" / "platforms" / "libqxcb.so",
        *sorted((qt / "lib").glob("libQt6XcbQpa.so*"))[:1],
    ]


def platform_problem(environ=os.environ, command: str = "localspec gui") -> str | None:
    """Why Qt could not open a window on this machine, in one line with the fix (naming
    ``command`` for the xvfb-run hint); None when it can (or when this is not Linux, or
    Qt was told to draw offscreen)."""
    if sys.platform != "linux":
        return None
    wanted = [
        p.split(":")[0].strip() for p in environ.get("QT_QPA_PLATFORM", "").split(";") if p.strip()
    ]
    if any(p in NO_DISPLAY_NEEDED for p in wanted):  # Qt tries the list in order
        return None
    x11, wayland = environ.get("DISPLAY", "").strip(), environ.get("WAYLAND_DISPLAY", "").strip()
    if not (x11 or wayland) or (wanted and wanted[0] == "xcb" and not x11):
        return (
            "there is no display (neither DISPLAY nor WAYLAND_DISPLAY is set): run it from a "
            "desktop session, "
            f"or under a virtual one: xvfb-run -a {command} (Debian/Ubuntu: sudo apt-get install "
            "xvfb)"
        )
    if (wanted and wanted[0].startswith("wayland")) or (not x11 and wayland):
        return None
    missing = missing_libraries(xcb_plugin_files())
    if missing:
        return (
            f"Qt's X11 (xcb) plugin needs {', '.join(missing)}, which this system lacks: "
            f"{install_line(missing)}"
        )
    return None


def import_problem(exc: ImportError) -> str:
    """The line for PySide6 failing to import because a system library is missing."""
    found = list(dict.fromkeys(re.findall(r"(lib[\w.+-]+\.so(?:\.\d+)*)", str(exc))))
    if found and "cannot open shared object" in str(exc):
        return f"Qt cannot load {', '.join(found)}: {install_line(found)}"
    return f"PySide6 cannot load Qt: {exc}"


def startup_problem() -> str | None:
    """The one line to print instead of starting Qt (PySide6 cannot load its libraries,
    or :func:`platform_problem`, naming this process's own command), or None when Qt can start."""
    import shlex

    try:
        from PySide6 import QtWidgets  # noqa: F401
    except ImportError as exc:
        return import_problem(exc)
    command = shlex.join(sys.argv) if sys.argv and sys.argv[0] else "localspec gui"
    return platform_problem(os.environ, command)
