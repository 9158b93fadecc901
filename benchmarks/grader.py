"""Grading throughput: glyph's sandboxed grader against the naive one.

The naive baseline is the study's grader: solution + setup + asserts + a
printed marker in one temporary file, run by a fresh interpreter (this same
``sys.executable``), passed when it exits 0 and prints the marker. It has none
of glyph's protections.

Both grade all 974 MBPP reference solutions in one run, interleaved task by
task (this machine is noisy), one grading at a time, then a trivial task
``--trivial`` times each. Prints gradings/s and p50/p95 latency for each, and
last ``ratio=<glyph gradings/s / naive gradings/s>``.

    uv run python benchmarks/grader.py [--mbpp-path PATH] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from rich.console import Console
from rich.progress import track
from rich.table import Table

from glyph.data import mbpp
from glyph.grading import grade
from glyph.sandbox import get_sandbox


def naive_grade(code: str, setup: str, tests: str, timeout: float = 20.0) -> bool:
    marker = uuid.uuid4().hex
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(f"{code}\n{setup}\n{tests}\nprint({marker!r})\n")
    try:
        p = subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout)
        return p.returncode == 0 and marker.encode() in p.stdout
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(f.name)


def summary(name: str, latencies: list[float], passed: int) -> tuple:
    q = statistics.quantiles(latencies, n=20)
    return (name, len(latencies), passed, len(latencies) / sum(latencies), statistics.median(latencies) * 1000,
            q[18] * 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mbpp-path")
    ap.add_argument("--limit", type=int, default=0, help="grade only the first N tasks")
    ap.add_argument("--trivial", type=int, default=200)
    args = ap.parse_args()
    tasks = list(mbpp.load(args.mbpp_path).values())[: args.limit or None]
    get_sandbox().protections()  # start the server outside the timings
    glyph_lat, naive_lat, glyph_ok, naive_ok = [], [], 0, 0
    for t in track(tasks, description="grading gold solutions (glyph, naive)"):
        t0 = time.perf_counter()
        glyph_ok += grade(t.code, t.test_setup_code, t.tests()).passed
        glyph_lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        naive_ok += naive_grade(t.code, t.test_setup_code, t.tests())
        naive_lat.append(time.perf_counter() - t0)
    code, tests = "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\n"
    triv_g, triv_n = [], []
    for _ in range(args.trivial):
        t0 = time.perf_counter()
        grade(code, "", tests)
        triv_g.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        naive_grade(code, "", tests)
        triv_n.append(time.perf_counter() - t0)
    info = get_sandbox().protections()
    table = Table(title=f"grading throughput ({info.mode} mode, one grading at a time, {os.cpu_count()} CPUs)")
    for col in ("grader", "gradings", "passed", "gradings/s", "p50 ms", "p95 ms"):
        table.add_column(col, justify="left" if col == "grader" else "right")
    rows = [summary("glyph (gold)", glyph_lat, glyph_ok), summary("naive (gold)", naive_lat, naive_ok),
            summary("glyph (trivial)", triv_g, len(triv_g)), summary("naive (trivial)", triv_n, len(triv_n))]
    for name, n, ok, rate, p50, p95 in rows:
        table.add_row(name, str(n), str(ok), f"{rate:.1f}", f"{p50:.2f}", f"{p95:.2f}")
    Console().print(table)
    active = [k for k, v in info.protections.items() if v["on"]]
    print(f"protections on: {', '.join(active)}")
    print(f"trivial p50: glyph {rows[2][4]:.2f} ms, naive {rows[3][4]:.2f} ms")
    print(f"ratio={rows[0][3] / rows[1][3]:.2f}")


if __name__ == "__main__":
    main()
