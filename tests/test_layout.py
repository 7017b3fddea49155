"""The layout's rules, read from the source (docs/architecture.md): only ``localspec/llama``
imports llama_cpp, imports point one way down the layers (and down gui/'s own), no import cycle,
no oversized file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("localspec", "gui")

# Lower layers never import higher ones.  The front ends (cli, bench, gui) sit on the server
# and the API; the server on the API; the API on decoding; decoding on llama.cpp's adapter;
# the adapter on the model files' package; everything on errors and the hardware facts.
LAYERS = [
    ("localspec.errors", "localspec.machine"),
    ("localspec.models",),
    ("localspec.llama",),
    ("localspec.decoding",),
    ("localspec.api", "localspec"),
    ("localspec.server",),
    ("localspec.cli", "localspec.bench"),
    ("gui",),
]
# `localspec gui` launches the desktop app: the one edge from a front end to another.
LAUNCHER_EDGES = {("localspec.cli.commands", "gui.app"), ("localspec.cli.commands", "gui.qt_check")}

# Inside gui/ the same rule: the subpackages by what they show, then the window that wires
# them, then what drives or starts it.  A module imports its own subpackage and the ranks
# before its own; two names in one rank do not import each other.
GUI_LAYERS = [
    ("gui", "gui.qt_check", "gui.markdown", "gui.settings", "gui.server"),
    ("gui.chat",),
    ("gui.models",),
    ("gui.side_panel", "gui.shortcuts"),
    ("gui.window",),
    ("gui.drive",),
    ("gui.self_test", "gui.screenshot"),
    ("gui.app",),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports, at top level or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _layer(module: str) -> int | None:
    best = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + ".") and prefix != "localspec":
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix))
    return None if best is None else best[0]


def _gui_place(module: str) -> tuple[int, str] | None:
    """``module``'s rank in GUI_LAYERS and the name that placed it (its subpackage)."""
    for rank, names in enumerate(GUI_LAYERS):
        for name in names:
            if module == name or module.startswith(name + ".") and name != "gui":
                return rank, name
    return None


def test_only_the_llama_package_imports_llama_cpp():
    importers = sorted(
        m
        for m, deps in _graph().items()
        if any(d == "llama_cpp" or d.startswith("llama_cpp.") for d in deps)
    )
    assert importers and all(m.startswith("localspec.llama.") for m in importers), importers


def test_imports_point_down_the_layers():
    upward = []
    for module, deps in _graph().items():
        for dep in deps:
            here, there = _layer(module), _layer(dep)
            if (
                here is not None
                and there is not None
                and there > here
                and (module, dep) not in LAUNCHER_EDGES
            ):
                upward.append(f"{module} -> {dep}")
    assert upward == []


def test_gui_imports_point_down_its_layers():
    wrong = []
    for module, deps in _graph().items():
        if (here := _gui_place(module)) is None:
            continue
        for dep in deps:
            there = _gui_place(dep)
            if there is not None and there[1] != here[1] and there[0] >= here[0]:
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def test_no_import_cycle():
    graph = {m: {d for d in deps if d in _modules()} for m, deps in _graph().items()}
    graph = {m: deps - {m} for m, deps in graph.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert cycles == []


@pytest.mark.parametrize("package, limit", [("localspec", 450), ("gui", 450)])
def test_no_file_is_too_long(package, limit):
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > limit
    }
    assert long == {}


def test_the_layer_rules_see_every_module():
    assert all(_layer(m) is not None for m in _modules())
    assert _layer("localspec.decoding.drafters.suffix") == 3 and _layer("localspec") == 4
    gui = [m for m in _modules() if m == "gui" or m.startswith("gui.")]
    assert gui and all(_gui_place(m) is not None for m in gui)
    assert _gui_place("gui.chat.store") == (1, "gui.chat") and _gui_place("gui") == (0, "gui")
