"""Environment overhead through ``vf-eval``: the marginal CPU one more
glyph-mbpp rollout costs, from the whole process tree, per component, for
the warm agent program (``--env.agent.harness.start warm``, the default),
the cold start (``cold``: the shipped files, with their bytecode, written
into every rollout as one file and a fresh ``python3``, what a container
gets) and the baseline, side by side
in one run. The baseline is today's cost: ``--baseline-python``, the Python
of another checkout (e.g. a copy of main with its own ``uv sync``), runs
vf-eval with that checkout's glyph and its defaults (``--baseline-start``:
started cold or warm instead, to compare one start with itself); without it
the baseline is this checkout's ``cold``.

Each cell is ``vf-eval glyph-mbpp -m mix --env.taskset.arm b -c C`` against
the reference-policy server (in this process, so its CPU is not counted), at
``--small`` and at ``--large`` rollouts, ``--reps`` times, the starts
interleaved. Marginal CPU per rollout = (CPU at large - CPU at small) /
(large - small), so the interpreter start and the imports of vf-eval, which
every run pays once, drop out. CPU is user + system, from the kernel:

* ``tree``: the whole vf-eval process tree (``RUSAGE_CHILDREN`` of this
  process around the run: every process of the tree is reaped by its parent);
* ``env``: the vf-eval process itself, which runs the rollouts in-process
  (verifiers' interception server, glyph's harness, test service and
  finalize): ``os.times()`` at its exit, and of that its main thread (the
  event loop: ``time.thread_time()``) and its other threads (the test
  service's HTTP threads, ``asyncio.to_thread`` file I/O and ``rmtree``);
* ``agent``: warm, measured: the children's CPU the fork server reports
  (the harness record's ``program["cpu_s"]``, from ``wait4``) plus the
  server's own; cold and baseline, by difference: ``tree`` less ``env``
  less warm's ``sandbox`` (the gradings are the same work in every cell);
* ``sandbox``: warm's ``tree`` less its ``env`` and ``agent``: the sandbox
  server and its workers (and any other process the env process started).

``--profile`` adds two warm runs, at ``--small`` and ``--large``, under
``cProfile`` (the env process's main thread only) and prints the share of
the profiled time one more rollout adds by where the code lives: glyph,
verifiers, pydantic, the HTTP stack, asyncio, the stdlib, other libraries (a
C builtin's time is charged to its caller's area); profiling inflates the
total, so only the shares are read.

Prints a table (a column per cell), the errors and rollouts rewarded as
their policy should be, the capacity that follows from warm's ``tree``
(rollouts/s per core = 1000 / ms; cores for a batch at 60 s a step), and
last ``env_cpu_ms_per_rollout=<warm tree> baseline=<baseline tree>
ratio=<baseline/warm>``. Not a test: it takes about ten minutes.

    uv run python benchmarks/env.py [--small 16] [--large 64] [--reps 3] [--profile] [--mbpp-path PATH]
        [--baseline-python ../main-copy/.venv/bin/python [--baseline-start cold|warm]]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import statistics
import subprocess
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from glyph.data import mbpp
from glyph.demo import read_rollouts, vf_eval_command
from glyph.policies.policies import Planner
from glyph.policies.server import PolicyServer
from glyph.record import HarnessRecord, harness_record

CELLS = ("baseline", "cold", "warm")
MEASURE = r"""
import atexit, json, os, sys, time
_out = os.environ.pop("GLYPH_BENCH_TIMES")
_prof = None
if os.environ.pop("GLYPH_BENCH_PROFILE", ""):
    import cProfile
    _prof = cProfile.Profile()
    _prof.enable()
def _dump():
    if _prof is not None:
        _prof.disable()
        _prof.dump_stats(_out + ".prof")
    t = os.times()
    with open(_out, "w") as f:
        json.dump({"self": t.user + t.system, "main_thread": time.thread_time(),
                   "children": t.children_user + t.children_system}, f)
atexit.register(_dump)  # first registered, so it runs last: after glyph's servers are stopped and reaped
"""
"""Run in the vf-eval process before its CLI: its own CPU at exit (``atexit`` hooks run last-in first-out)."""
AREAS = (("glyph", "/glyph/"), ("verifiers", "/verifiers/"), ("pydantic", "/pydantic"),
         ("http (httpx, httpcore, openai, aiohttp, h11, anyio)", ("/httpx/", "/httpcore/", "/openai/", "/aiohttp/",
                                                                  "/h11/", "/anyio/")),
         ("asyncio", "/asyncio/"))


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_run(base_url: str, cell: str, n: int, concurrency: int, data_path: str | None, work: Path,
            profile: bool = False, python: str | None = None, baseline_start: str | None = None) -> dict:
    """One vf-eval run of ``cell``: ``cold`` or ``warm`` here, or ``baseline`` (``python``'s checkout, as it
    is, or started ``baseline_start``)."""
    out = Path(tempfile.mkdtemp(dir=work))
    times = out / "times.json"
    how = baseline_start if cell == "baseline" else cell
    start = ["--env.agent.harness.start", how] if how else []
    cmd = vf_eval_command(base_url, "mix", "b", n, out / "eval", data_path, ["-c", str(min(n, concurrency)), *start])
    cmd[2] = MEASURE + cmd[2]  # vfcompat.eval_command: [python, "-c", "from ... import main; main()", ...]
    if cell == "baseline":
        cmd[0] = python
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", GLYPH_BENCH_TIMES=str(times))
    if profile:
        env["GLYPH_BENCH_PROFILE"] = "1"
    before = children_cpu()
    # cwd: a folder of its own, so ``python -c`` imports each cell's installed glyph, not one found in cwd
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=out)
    tree = children_cpu() - before
    if proc.returncode != 0:
        raise RuntimeError(f"vf-eval ({cell}, {n}) exited {proc.returncode}: {proc.stderr[-3000:]}")
    own = json.loads(times.read_text())
    programs = [(harness_record(t["info"]) or HarnessRecord()).program or {} for t in traces(out / "eval")]
    warm = [p for p in programs if p.get("start") == "warm" and p.get("cpu_s") is not None]
    agent = (sum(p["cpu_s"] for p in warm) + max(p["server_cpu_s"] for p in warm)) if warm else None
    return {"cell": cell, "n": n, "tree": tree, "env": own["self"], "main": own["main_thread"],
            "threads": own["self"] - own["main_thread"], "agent": agent,
            "starts": sorted({str(p.get("start")) for p in programs}), "rows": read_rollouts(out / "eval"),
            "profile": Path(str(times) + ".prof") if profile else None}


def traces(out: Path) -> list[dict]:
    rows = []
    for path in out.rglob("traces.jsonl"):
        for line in path.read_text().splitlines():
            rows.extend(json.loads(line)["traces"])
    return rows


def marginal(small: dict, large: dict, key: str) -> float | None:
    if small[key] is None or large[key] is None:
        return None
    return (large[key] - small[key]) / (large["n"] - small["n"]) * 1000


def area_of(file: str) -> str | None:
    """Where a profiled function lives (None: a C builtin, charged to its caller)."""
    if file.startswith("~"):
        return None
    for name, marks in AREAS:
        if any(m in file for m in ((marks,) if isinstance(marks, str) else marks)):
            return name
    return "other libraries" if "site-packages" in file else "stdlib (json, socket, selectors, ...)"


def profile_areas(path: Path) -> dict[str, float]:
    """Profiled seconds by ``area_of``; a C builtin's time is charged to the area of each caller that
    called it (pstats records the time per caller)."""
    totals: dict[str, float] = {}
    for (file, _, _), (_, _, tottime, _, callers) in pstats.Stats(str(path)).stats.items():
        area = area_of(file)
        if area is not None:
            totals[area] = totals.get(area, 0.0) + tottime
            continue
        for (caller_file, _, _), (_, _, from_caller, _) in callers.items():
            caller = area_of(caller_file) or "stdlib (json, socket, selectors, ...)"
            totals[caller] = totals.get(caller, 0.0) + from_caller
    return totals


def glyph_inclusive(path: Path) -> float:
    """Profiled seconds in glyph's code and everything it calls: the cumulative time of each glyph
    function as called from code that is not glyph's (a coroutine's counts only while it runs)."""
    total = 0.0
    for (file, _, _), (_, _, _, _, callers) in pstats.Stats(str(path)).stats.items():
        if area_of(file) == "glyph":
            total += sum(ct for (caller_file, _, _), (_, _, _, ct) in callers.items() if area_of(caller_file) != "glyph")
    return total


def profile_shares(small: Path, large: Path) -> list[tuple[str, float]]:
    """The share of each area in the profiled time one more rollout adds (large run less small run:
    the imports and the start drop out)."""
    a, b = profile_areas(small), profile_areas(large)
    extra = {k: max(b.get(k, 0.0) - a.get(k, 0.0), 0.0) for k in set(a) | set(b)}
    whole = sum(extra.values()) or 1.0
    shares = sorted(((k, v / whole) for k, v in extra.items()), key=lambda kv: -kv[1])
    inclusive = max(glyph_inclusive(large) - glyph_inclusive(small), 0.0) / whole
    return [*shares, ("glyph, with what it calls (harness, test service client, finalize)", inclusive)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mbpp-path")
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--large", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--baseline-python", help="the Python of the checkout whose glyph is the baseline "
                                              "(default: this checkout, start cold)")
    ap.add_argument("--baseline-start", choices=("cold", "warm"),
                    help="how the baseline checkout starts the agent program (default: its own default)")
    args = ap.parse_args()
    data_path = args.mbpp_path or os.environ.get(mbpp.ENV_VAR)
    tasks = {t.id: t for t in mbpp.load_source(data_path).tasks}
    planner = Planner(tasks)
    console = Console()
    runs: list[dict] = []
    with PolicyServer(tasks) as server, tempfile.TemporaryDirectory() as tmp:
        # no other checkout: the baseline is this one's cold start, run once as ``cold``
        cells = CELLS if args.baseline_python else tuple(c for c in CELLS if c != "baseline")
        for rep in range(args.reps):
            for cell in cells:
                for n in (args.small, args.large):
                    run = one_run(server.base_url, cell, n, args.concurrency, data_path, Path(tmp),
                                  python=args.baseline_python, baseline_start=args.baseline_start)
                    agent = f", agent {run['agent']:.2f} s" if run["agent"] is not None else ""
                    console.print(f"rep {rep + 1} {cell:8} n={n:3}: tree {run['tree']:.2f} s CPU, "
                                  f"env {run['env']:.2f} s{agent}", highlight=False)
                    runs.append(run)
        shares = None
        if args.profile:
            small, large = (one_run(server.base_url, "warm", n, args.concurrency, data_path, Path(tmp),
                                    profile=True)["profile"] for n in (args.small, args.large))
            shares = profile_shares(small, large)

    keys = ("tree", "env", "main", "threads", "agent")
    per: dict[str, dict[str, list[float]]] = {s: {k: [] for k in keys} for s in CELLS}
    for i in range(0, len(runs), 2):
        small, large = runs[i], runs[i + 1]
        for k in keys:
            m = marginal(small, large, k)
            if m is not None:
                per[small["cell"]][k].append(m)
    med = {s: {k: statistics.median(v) if v else None for k, v in per[s].items()} for s in CELLS}
    if not args.baseline_python:
        med["baseline"] = med["cold"]
    sandbox = med["warm"]["tree"] - med["warm"]["env"] - med["warm"]["agent"]
    med["warm"]["sandbox"] = sandbox
    for cell in ("baseline", "cold"):
        med[cell]["sandbox"] = sandbox
        med[cell]["agent"] = med[cell]["tree"] - med[cell]["env"] - sandbox

    table = Table(title=f"marginal CPU per rollout, ms (median of {args.reps} reps; "
                        f"{args.large} vs {args.small} rollouts, -c {args.concurrency})")
    table.add_column("component")
    for s in CELLS:
        table.add_column(s, justify="right")
    table.add_column("spread (warm, min-max)", justify="right")
    labels = {"tree": "whole tree", "env": "env process", "main": "  its event loop thread",
              "threads": "  its other threads", "agent": "agent program", "sandbox": "sandbox (grading)"}
    for k, label in labels.items():
        note = {"agent": " (cold, baseline: by difference)", "sandbox": " (warm's, by difference)"}.get(k, "")
        spread = per["warm"].get(k)
        table.add_row(label + note, *(f"{med[s][k]:.1f}" for s in CELLS),
                      f"{min(spread):.1f}-{max(spread):.1f}" if spread else "")
    console.print(table)
    if shares:
        t = Table(title=f"env process main thread, cProfile (warm, {args.large} less {args.small} rollouts): "
                        "share of the profiled time a rollout adds")
        t.add_column("code")
        t.add_column("share", justify="right")
        for area, share in shares:
            t.add_row(area, f"{share:.0%}")
        console.print(t)

    errors = expected = total = 0
    for run in runs:
        for r in run["rows"]:
            total += 1
            errors += not r["ok"]
            policy = planner.resolve("mix", tasks[r["task"]])
            expected += r["ok"] and r["reward"] == (0.0 if policy == "hack" else 1.0)
    starts = {run["cell"]: run["starts"] for run in runs}
    print(f"{total} rollouts in {len(runs)} vf-eval runs: {errors} errors, {expected} rewarded as their policy "
          f"should be; starts recorded: {starts}")
    warm_ms, cold_ms = med["warm"]["tree"], med["baseline"]["tree"]
    per_core = 1000 / warm_ms
    print(f"rollouts/s per core (warm): {per_core:.1f}; cores for 64, 1024, 4096 rollouts a 60 s step: "
          + ", ".join(f"{b / 60 / per_core:.2f}" for b in (64, 1024, 4096)))
    print(f"env_cpu_ms_per_rollout={warm_ms:.1f} baseline={cold_ms:.1f} ratio={cold_ms / warm_ms:.2f}")


if __name__ == "__main__":
    main()
