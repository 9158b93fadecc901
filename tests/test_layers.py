"""glyph's floor plan (``glyph.layers``) holds against the code: no module
imports from a layer above its own, the import graph has no cycle, and the
shipped set is stdlib only and imports on its own."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from glyph import layers

PACKAGE = layers.PACKAGE


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every glyph module ``path`` imports, at any depth of the file (function-level
    imports count: they run too). ``from glyph.x import y`` counts as
    ``glyph.x.y`` when that is a module, else as ``glyph.x``."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "glyph"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] != "glyph":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else base)
    return out


FILES = sorted(p for p in PACKAGE.rglob("*.py"))
MODULES = {module_name(p): p for p in FILES}
GRAPH = {m: imports_of(p) for m, p in MODULES.items()}


def test_every_room_is_in_a_layer():
    rooms = {m.split(".")[1] for m in MODULES if m.count(".")}
    placed = {r for layer in layers.LAYERS for r in layer}
    assert rooms - placed == set(), "rooms with no layer in glyph.layers.LAYERS"
    assert placed - rooms == set(), "layers name rooms that do not exist"


def test_no_module_imports_from_a_higher_layer():
    upward = [f"{m} (layer {layers.layer_of(m)}) imports {d} (layer {layers.layer_of(d)})"
              for m, deps in GRAPH.items() for d in sorted(deps) if layers.layer_of(d) > layers.layer_of(m)]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    """A package's ``__init__`` counts as imported by its modules (Python runs it first)."""
    graph = {m: {d for d in deps if d in GRAPH and d != m} for m, deps in GRAPH.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join(path[path.index(d):] + [d]))
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_shipped_set_is_stdlib_only():
    shipped = {module_name(p) for p in layers.shipped_files().values()}
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for m in sorted(shipped):
        tree = ast.parse(MODULES[m].read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            for name in names:
                top = name.split(".")[0]
                # the sandbox's runtime scripts import their siblings by file name
                sibling = (MODULES[m].parent / f"{top}.py").is_file()
                if top not in stdlib and top != "glyph" and not sibling and top != "__future__":
                    bad.append(f"{m} imports {name}")
                elif top == "glyph" and name not in shipped and name.rpartition(".")[0] not in shipped:
                    bad.append(f"{m} imports {name}, which is not shipped")
    assert bad == []


def test_the_shipped_set_is_the_bottom_layers_whole():
    files = layers.shipped_files()
    rooms = {t.split("/")[1].removesuffix(".py") for t in files if t != "glyph/__init__.py"}
    assert rooms == {r for layer in layers.LAYERS[: layers.SHIPPED_LAYERS] for r in layer}
    for room in rooms:
        folder = PACKAGE / room
        if folder.is_dir():  # every module of a shipped package goes
            assert {p for p in folder.rglob("*.py")} <= set(files.values())


def test_the_shipped_set_imports_alone(tmp_path):
    """Copied alone into an empty directory, every shipped module imports under
    ``python -I -S`` (no site-packages, not even glyph's own), from the copy, each
    in a fresh interpreter (no module relies on another having run first)."""
    for target, source in layers.shipped_files().items():
        (tmp_path / target).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / target).write_bytes(source.read_bytes())
    names = sorted(module_name(p) for p in layers.shipped_files().values())
    probe = ("import importlib, sys, os\nsys.path.insert(0, sys.argv[1])\n"
             "m = importlib.import_module(sys.argv[2])\n"
             "assert os.path.abspath(m.__file__).startswith(sys.argv[1] + os.sep), m.__file__\n")
    failed = {}
    for name in names:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(tmp_path), name],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode:
            failed[name] = proc.stderr.strip().splitlines()[-1:]
    assert failed == {}
    assert len(names) >= 10


@pytest.mark.parametrize("module", ["glyph.agent.program", "glyph.grading", "glyph.sandbox.client"])
def test_layer_of_names_the_room(module):
    assert layers.layer_of(module) < layers.SHIPPED_LAYERS
    with pytest.raises(LookupError):
        layers.layer_of("glyph.nowhere")
