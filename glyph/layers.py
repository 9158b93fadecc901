"""glyph's floor plan, declared once: its rooms in layers, lowest first, and
the shipped set that follows from them.

A module may import from its own layer and the layers below it, never from
one above (``tests/test_layers.py`` builds the import graph from the source,
function-level imports included, and fails on an upward import or a cycle).

The bottom ``SHIPPED_LAYERS`` layers are the runtime's: the agent program
(``glyph.agent``) with everything it may import, stdlib only. They are
shipped into a rollout's runtime whole (``shipped_files``), so the grammar,
the tools, the grader and the sandbox the program runs are glyph's own.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

LAYERS: tuple[tuple[str, ...], ...] = (
    ("outcomes", "sandbox", "text", "errors"),  # the ground floor: imports nothing from glyph
    ("semantics", "grading"),  # the trusted grader and how it reads a run (glyph's or the study's)
    ("agent",),  # the agent program, its protocol and tools
    ("layers", "pins", "record", "localhttp", "vfcompat", "render", "render_study", "redteam", "recipe",
     "export"),
    ("data",),  # MBPP, conventions, SFT traces, plus tests, gold check, prepare
    ("profiles",),  # the protocol profiles' trusted halves (their agent halves: glyph.agent.profiles)
    ("policies", "predict", "report"),
    ("envs",),  # the verifiers v1 environments
    ("credit", "flywheel"),
    ("demo",),
    ("cli",),
)
SHIPPED_LAYERS = 3
"""The layers copied into the runtime: stdlib only."""


def layer_of(module: str) -> int:
    """The layer of a dotted module name under ``glyph`` (``glyph`` itself: 0)."""
    parts = module.split(".")
    if parts[0] != "glyph":
        raise ValueError(f"{module} is not a glyph module")
    if len(parts) == 1:
        return 0
    for i, rooms in enumerate(LAYERS):
        if parts[1] in rooms:
            return i
    raise LookupError(f"{module}: its room {parts[1]!r} is in no layer of glyph.layers.LAYERS")


@lru_cache(maxsize=1)
def shipped_files() -> dict[str, Path]:
    """What goes into the runtime, as ``{"glyph/agent/program.py": source path}``:
    ``glyph/__init__.py`` and every Python file of the shipped layers' rooms."""
    out = {"glyph/__init__.py": PACKAGE / "__init__.py"}
    for rooms in LAYERS[:SHIPPED_LAYERS]:
        for room in rooms:
            single = PACKAGE / f"{room}.py"
            files = [single] if single.is_file() else sorted((PACKAGE / room).rglob("*.py"))
            if not files:
                raise FileNotFoundError(f"glyph.layers: no module or package {room!r} under {PACKAGE}")
            for f in files:
                out["glyph/" + f.relative_to(PACKAGE).as_posix()] = f
    return out
