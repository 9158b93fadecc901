"""The cold start's program side: CPU of a fresh ``python3 -I -S -B`` that
imports what a container episode imports (the program, the study profile,
the grader), started three ways, interleaved, in fresh folders:

- ``files``: the shipped files written beforehand, one by one (as the
  harness did before ``glyph.envs.bundle``; the writes are not counted,
  they were the env process's), compiled at import;
- ``bundle``: ``UNPACK`` on the bundle (its writes counted), importing
  from its pycs;
- ``bundle, other Python``: the same bundle with its pycs named for another
  Python version (a container whose ``python3`` is not this one): the
  sources alone are written, and compiled.

CPU is the child's user + system (``RUSAGE_CHILDREN``). Last line
``bundle_cpu_ms=<x> files_cpu_ms=<y> ratio=<y/x>``. Not a test.

    uv run python benchmarks/cold.py [--runs 25]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from env import children_cpu
from rich.console import Console
from rich.table import Table

from glyph.envs import bundle
from glyph.envs.mbpp.harness import BUNDLE, PROGRAM_DIR, SHIPPED

IMPORTS = "import glyph.agent.program, glyph.agent.profiles.study, glyph.grading\n"
FILES = f"import os, sys\nsys.path.insert(0, os.path.abspath({PROGRAM_DIR!r}))\n"


def one(way: str, data: dict[str, bytes]) -> float:
    folder = Path(tempfile.mkdtemp(prefix="glyph-cold-"))
    try:
        if way == "files":
            for target, source in SHIPPED.items():
                dest = folder / PROGRAM_DIR / target
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(source.read_bytes())
            argv = [sys.executable, "-I", "-S", "-B", "-c", FILES + IMPORTS]
        else:
            (folder / BUNDLE).parent.mkdir(parents=True)
            (folder / BUNDLE).write_bytes(data[way])
            argv = [sys.executable, "-I", "-S", "-B", "-c", bundle.UNPACK + IMPORTS, BUNDLE, PROGRAM_DIR]
        before = children_cpu()
        subprocess.run(argv, cwd=folder, check=True)
        return children_cpu() - before
    finally:
        shutil.rmtree(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=25)
    args = ap.parse_args()
    ours = bundle.build()
    tag = f".{sys.implementation.cache_tag}.pyc"
    other = bundle.pack({name.replace(tag, ".cpython-399.pyc"): blob
                         for name, blob in bundle.unpack(ours).items()})
    data = {"bundle": ours, "bundle, other Python": other}
    ways = ("files", "bundle", "bundle, other Python")
    cpu: dict[str, list[float]] = {w: [] for w in ways}
    for _ in range(args.runs):
        for way in ways:
            cpu[way].append(one(way, data))
    med = {w: statistics.median(v) * 1000 for w, v in cpu.items()}
    table = Table(title=f"cold start, program side: CPU ms (median of {args.runs}, interleaved)")
    for col in ("start", "median", "min", "max"):
        table.add_column(col, justify="left" if col == "start" else "right")
    for way in ways:
        table.add_row(way, f"{med[way]:.1f}", f"{min(cpu[way]) * 1000:.1f}", f"{max(cpu[way]) * 1000:.1f}")
    Console().print(table)
    print(f"bundle_cpu_ms={med['bundle']:.1f} files_cpu_ms={med['files']:.1f} "
          f"ratio={med['files'] / med['bundle']:.2f}")


if __name__ == "__main__":
    main()
