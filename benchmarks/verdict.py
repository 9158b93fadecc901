"""What verdict blindness costs: CPU per grading of a passing and of a failing solution, before and after,
on the trivial task and on MBPP's reference solutions with their plus tests.

A run is now asked every probe of its suite at once and judged after it is gone, so a failing solution
answers every probe (before, the grader stopped at its first wrong answer). Workloads, each a list of
gradings:

* ``trivial``: ``add(1, 2) == 3``, graded ``--trivial`` times: ``pass`` the right ``add``, ``fail`` one
  that subtracts;
* ``gold+plus``: every task (``--limit N``: the first N) graded on its visible tests then its plus
  tests (``--plus DIR``, ``glyph data plus``): ``pass`` the reference solution, ``fail`` the reference
  wrapped so that its function answers ``[value, "wrong"]``: wrong from the first check, with all the
  reference's work on every probe it is asked (the most blindness can cost).

Each cell is graded in a fresh process (``--before REF``, exported with ``git archive``, default
340a5f2; or this checkout) that imports that side's glyph first on its path, warms its sandbox with one
grading and measures ``grader.CpuMeter`` around the gradings only (this process, its children, the
sandbox server's schedstat, the runs' ``wait4``). The workloads are cut into ``--blocks`` blocks; in
each block the four cells of a workload run in a rotated order, so the load of this shared machine hits
all alike. Prints CPU ms per grading per cell and the ratios after/before; the last line is
``trivial_cpu_ms before= after= ratio=`` (the passing trivial grading).

    uv run python benchmarks/verdict.py [--plus DIR] [--limit N] [--trivial 300] [--blocks 3]
        [--before REF] [--mbpp-path PATH]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bombs import REPO, git
from rich.console import Console
from rich.table import Table

from glyph.data import mbpp
from glyph.data.plus.store import file_name, read_file
from glyph.grading import compile_tests

TRIVIAL_TESTS = "assert add(1, 2) == 3\n"
TRIVIAL = {"pass": "def add(a, b):\n    return a + b\n", "fail": "def add(a, b):\n    return a - b\n"}

CHILD = r'''
import collections, json, os, sys
root = sys.argv[3]
sys.path[:0] = [root, sys.argv[1]]  # that side's glyph first; benchmarks/: grader.CpuMeter
import glyph
assert os.path.realpath(glyph.__file__).startswith(os.path.realpath(root)), glyph.__file__
from glyph.grading import grade
from glyph.sandbox import Limits, get_sandbox
from grader import CpuMeter
work = json.load(open(sys.argv[2]))
limits = Limits(cpu_s=5, wall_s=10)
grade("def f():\n    return 1\n", "", "assert f() == 1\n", limits=limits)  # the server started and warm
cpu = CpuMeter()
start = cpu()
outcomes = collections.Counter(grade(s, setup, tests, limits=limits).outcome.value
                               for s, setup, tests in work)
print(json.dumps({"cpu_s": cpu() - start, "n": len(work), "outcomes": outcomes}))
get_sandbox().close()
'''


def wrong(task: mbpp.MbppTask, tests: str) -> str | None:
    """The reference, its tested function wrapped to answer ``[value, "wrong"]``; None when the first
    check does not call a function by name."""
    suite = compile_tests(task.test_setup_code, tests)
    if not suite.checks:
        return None
    call = ast.parse(suite.checks[0].probe, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return None
    name = call.func.id
    return (f"{task.code}\n\n_glyph_wrapped = {name}\n\n\ndef {name}(*args, **kwargs):\n"
            f"    return [_glyph_wrapped(*args, **kwargs), 'wrong']\n")


def gold_plus(tasks: dict, plus: Path, limit: int | None) -> dict[str, list]:
    work: dict[str, list] = {"pass": [], "fail": []}
    for task in list(tasks.values())[:limit]:
        path = plus / file_name(task.task_id)
        if not path.exists():
            continue
        tests = "\n".join(list(task.test_list) + read_file(path)[1]) + "\n"
        try:
            source = wrong(task, tests)
        except Exception:  # the suite is not the fast path's, or does not compile: left out
            continue
        if source is not None:
            work["pass"].append([task.code, task.test_setup_code, tests])
            work["fail"].append([source, task.test_setup_code, tests])
    return work


def export(ref: str, into: Path) -> None:
    """glyph and configs/ (its pins) at ``ref``: what ``grader.py`` imports."""
    archive = subprocess.run(["git", "archive", ref, "glyph", "configs"], cwd=REPO, capture_output=True,
                             check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)


def measure(root: Path, path: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "benchmarks"), str(path), str(root)],
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{root}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="340a5f2", help="git ref of the grader to compare with")
    ap.add_argument("--plus", help="the plus tests' folder (glyph data plus); without it, the trivial task")
    ap.add_argument("--limit", type=int, help="only the first N tasks")
    ap.add_argument("--trivial", type=int, default=300, help="trivial gradings a cell, per block")
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--mbpp-path", default=os.environ.get("GLYPH_MBPP_PATH"))
    args = ap.parse_args()
    work = {"trivial": {side: [[src, "", TRIVIAL_TESTS]] * args.trivial for side, src in TRIVIAL.items()}}
    if args.plus:
        work["gold+plus"] = gold_plus(mbpp.load(args.mbpp_path), Path(args.plus), args.limit)
    totals: dict = {}
    with tempfile.TemporaryDirectory(prefix="glyph-verdict-") as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        export(args.before, old)
        roots = {"before": old, "after": REPO}
        cells = [(load, kind, side) for load in work for kind in ("pass", "fail") for side in roots]
        for block in range(args.blocks):
            for i in range(len(cells)):
                load, kind, side = cells[(i + block) % len(cells)]
                items = work[load][kind]
                if load != "trivial":
                    items = items[block::args.blocks]
                path = Path(tmp) / "work.json"
                path.write_text(json.dumps(items))
                m = measure(roots[side], path)
                t = totals.setdefault((load, kind, side), {"cpu_s": 0.0, "n": 0, "outcomes": {}})
                t["cpu_s"] += m["cpu_s"]
                t["n"] += m["n"]
                for k, v in m["outcomes"].items():
                    t["outcomes"][k] = t["outcomes"].get(k, 0) + v
                per = m["cpu_s"] / m["n"] * 1000
                print(f"block {block} {load} {kind} {side}: {per:.2f} ms over {m['n']}", file=sys.stderr)
    ms = {key: t["cpu_s"] / t["n"] * 1000 for key, t in totals.items()}
    before = git("rev-parse", "--short", args.before).strip()
    table = Table(title=f"CPU ms per grading: before ({before}) and "
                        f"after (this checkout), {args.blocks} interleaved blocks")
    columns = ("workload", "solution", "gradings", "before ms", "after ms", "after/before", "outcomes after")
    for col in columns:
        left = col in ("workload", "solution", "outcomes after")
        table.add_column(col, justify="left" if left else "right")
    for load in work:
        for kind in ("pass", "fail"):
            b, a = ms[(load, kind, "before")], ms[(load, kind, "after")]
            outcomes = ", ".join(f"{n} {k}" for k, n in totals[(load, kind, "after")]["outcomes"].items())
            table.add_row(load, kind, str(totals[(load, kind, "after")]["n"]), f"{b:.2f}", f"{a:.2f}",
                          f"{a / b:.2f}", outcomes)
    Console(width=160).print(table)
    b, a = ms[("trivial", "pass", "before")], ms[("trivial", "pass", "after")]
    print(f"trivial_cpu_ms before={b:.2f} after={a:.2f} ratio={a / b:.2f}")


if __name__ == "__main__":
    main()
