"""The trusted side as a whole, under the answers and sources that cost it most: peak memory, wall time and
the verdict of each case, before and after.

Cases (each graded in a fresh grader process, under an address-space limit, ``--memory`` GiB, and a
timeout, ``--timeout`` s; its peak RSS over the process's own after one honest grading):

``sets_at_the_old_bounds``
    ``--copies`` gradings at once of an answer of empty sets just under the wire's old bounds (131,062
    sets: 1.2 MB on the wire, about 30 MB decoded); 64 such gradings held 1.4-1.9 GB.
``sets_at_the_cap``
    ``--copies`` gradings at once of ``wire_cap_sets`` (``glyph.redteam``): each answer just under the
    answer cap (``glyph.grading.ANSWER_BYTES``), the most the trusted side now reads of one.
``zero_lines_2mib``, ``zero_lines_8mib``
    ``million_zero_lines``: a solution of a million (four million) ``0`` lines whose tests read a builtin
    it names, so that the grader looks for its rebinding; the grader's own parse of the 2 MiB one took
    1.6 GB and 4 s.

BEFORE is the glyph package at ``--before`` (a git ref, exported with ``git archive``; default 340a5f2,
the grader before verdict blindness); AFTER is this checkout. The attack sources are this checkout's on
both sides. Prints one table: seconds, peak MiB and the verdicts (their counts, and one detail).

    uv run python benchmarks/trusted.py [--before REF] [--copies 64] [--timeout 300] [--memory 8]
        [--only CASE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bombs import REPO, export, git, high_water_kb
from rich.console import Console
from rich.table import Table

from glyph.redteam import attack, wire_bomb

OLD_BOUNDS = wire_bomb('return [{"s": []}] * 131_062')  # under the old MAX_NODES (1 << 17) and MAX_TOKENS
ZERO_LINES = attack("million_zero_lines")
CASES = {  # name: (source, tests, copies graded at once: None for --copies)
    "sets_at_the_old_bounds": (OLD_BOUNDS, None, None),
    "sets_at_the_cap": (attack("wire_cap_sets").source, None, None),
    "zero_lines_2mib": (ZERO_LINES.source, ZERO_LINES.tests, 1),
    "zero_lines_8mib": (ZERO_LINES.source.replace("0\n" * 1_000_000, "0\n" * 4_190_000), ZERO_LINES.tests, 1),
}

CHILD = r'''
import json, os, resource, sys, threading, time
root, path, copies, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.path.insert(0, root)
import glyph
assert os.path.realpath(glyph.__file__).startswith(os.path.realpath(root)), glyph.__file__
from glyph.grading import grade
from glyph.redteam import DEMO_TESTS
from glyph.sandbox import Limits, Sandbox

def rss():  # this process's high-water RSS since its exec
    return next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))

case = json.load(open(path))
sb = Sandbox(pool=0)
sb.protections()
grade("def remove_first_last(s, ch): return s", "", DEMO_TESTS, sandbox=sb)
print(json.dumps({"base_kb": rss()}), flush=True)
results = [None] * copies
def one(i):
    try:
        g = grade(case["source"], "", case["tests"] or DEMO_TESTS, limits=Limits(cpu_s=20, wall_s=60),
                  sandbox=sb)
        results[i] = f"{g.outcome.value}: {g.detail[:80]}"
    except MemoryError:
        results[i] = "MemoryError in the grader"
t0 = time.perf_counter()
threads = [threading.Thread(target=one, args=(i,)) for i in range(copies)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_kb": rss(), "results": results}), flush=True)
sb.close()
'''


def measure(root: Path, path: Path, copies: int, timeout: float, memory_gib: float) -> dict:
    """One fresh grader process: {"seconds", "peak_mib", "results"}; past ``timeout`` it is killed
    with its sandbox server (its own session) and its high-water RSS read first."""
    argv = [sys.executable, "-c", CHILD, str(root), str(path), str(copies), str(int(memory_gib * (1 << 30)))]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        killed_at = None
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            killed_at = high_water_kb(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    reports = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    base = reports[0]["base_kb"] if reports else 0
    if killed_at is not None or len(reports) < 2:
        why = f"timeout ({timeout:g} s)" if killed_at is not None else \
            (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {"seconds": None, "peak_mib": None if killed_at is None else max(killed_at - base, 0) / 1024,
                "results": [why]}
    done = reports[1]
    return {"seconds": done["seconds"], "peak_mib": (done["peak_kb"] - base) / 1024,
            "results": done["results"]}


def cells(m: dict) -> list[str]:
    secs = "-" if m["seconds"] is None else f"{m['seconds']:.1f}"
    peak = "-" if m["peak_mib"] is None else f"{m['peak_mib']:.0f}"
    counts = collections.Counter(r.split(":")[0] for r in m["results"])
    verdicts = ", ".join(f"{n} {what}" for what, n in counts.most_common())
    return [secs, peak, f"{verdicts}\n{m['results'][0][:90]}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="340a5f2", help="git ref of the grader to compare with")
    ap.add_argument("--copies", type=int, default=64, help="gradings at once, for the answer cases")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a measurement may take")
    ap.add_argument("--memory", type=float, default=8.0, help="address-space limit of a grader process, GiB")
    ap.add_argument("--only", action="append", help="measure only this case (repeatable)")
    args = ap.parse_args()
    before = git("rev-parse", "--short", args.before).strip()
    table = Table(title=f"the trusted side: before ({before}) and after "
                        f"(this checkout); timeout {args.timeout:g} s, address space {args.memory:g} GiB")
    for col in ("case", "gradings", "before s", "before MiB", "before: verdicts", "after s", "after MiB",
                "after: verdicts"):
        table.add_column(col, justify="right" if col.endswith((" s", "MiB", "gradings")) else "left",
                         overflow="fold")
    with tempfile.TemporaryDirectory(prefix="glyph-trusted-") as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        export(args.before, old)
        for name, (source, tests, copies) in CASES.items():
            if args.only and name not in args.only:
                continue
            copies = copies or args.copies
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps({"source": source, "tests": tests}))
            row = []
            for side, root in (("before", old), ("after", REPO)):
                m = measure(root, path, copies, args.timeout, args.memory)
                print(f"{name} {side}: {m['seconds']} s, {m['peak_mib']} MiB, {m['results'][:2]}",
                      file=sys.stderr)
                row += cells(m)
            table.add_row(name, str(copies), *row)
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
