"""Plus tests: how long generation takes, whether they are right, and what
they catch that the visible tests miss. Not a test (minutes, all 974 tasks).

    uv run python benchmarks/plus.py [--out DIR] [--fresh] [--jobs 2] [--only generate,gold,suites,mutants,finalize]
        [--burners 2]

1. ``generate``: ``glyph data plus`` into DIR/plus for every task, timed
   (``--fresh`` starts from an empty folder), then again (the resume: every
   file reused). Prints the share of tasks with at least one plus test and
   the mean kept per task.
2. ``gold``: every reference solution graded on its visible tests followed
   by its plus tests, in this process (a hash seed the generator never saw).
3. ``suites``: the plausible wrong solutions and the correct rewrites of
   ``testkit.plus_suites``, and for every task a solution hard-coding
   the visible answers (else ``None``; else the first answer): the share
   each suite fails (catches) under ``base`` and under ``plus``.
4. ``mutants``: the SFT mutants (``sft.find_mutant``: failing single-token
   mutations of the reference, as ``glyph data prepare`` picks them, for
   every task), and a wider pool, up to ``--mutants`` single-token mutations
   of each reference (``sft._mutations``, seeded): the share base and plus
   catch, and of the mutants base misses, the share plus catches.
5. ``finalize``: one oracle episode per task (both arms) against the
   reference policies, then ``verify`` (finalize's work) timed side by side
   on the same traces: without plus tests (as before), ``hidden=base`` with
   the plus metric, ``hidden=plus``; prints median ms and ``ratio=``.
6. ``repeat`` (not run unless named in ``--only``): generates every task's
   plus tests again, from scratch, into a temporary folder while
   ``--burners`` CPU-bound processes load the machine, and compares each
   file byte for byte with DIR/plus: the selection depends on no clock.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.progress import track

from glyph.data import mbpp, plus, prepare, sft
from glyph.data.plus.generate import generate as generate_plus
from glyph.data.plus.selection import MAX_KEPT
from glyph.grading import grade
from glyph.sandbox import Limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root (testkit/)
from testkit import plus_suites  # noqa: E402

console = Console()
LIMITS = Limits(cpu_s=5, wall_s=10)


def generate(out: Path, source: mbpp.Source, jobs: int, fresh: bool) -> dict:
    folder = out / prepare.PLUS_DIR
    if fresh and folder.exists():
        shutil.rmtree(folder)
    t0 = time.perf_counter()
    summary = generate_plus(source.tasks, folder, jobs=jobs, progress=True)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = generate_plus(source.tasks, folder, jobs=jobs, progress=False)
    resumed = time.perf_counter() - t0
    n = summary["tasks"]
    console.print(f"generate: {n} tasks in {first:.1f} s with {jobs} jobs ({summary['generated']} generated, "
                  f"{summary['reused']} reused); again: {resumed:.1f} s ({again['reused']} reused)")
    console.print(f"  tasks with >= 1 plus test: {summary['with_tests']}/{n} = {summary['with_tests'] / n:.1%}; "
                  f"kept {summary['tests']}, mean {summary['mean_kept']}, median "
                  f"{statistics.median(summary['kept'].values())} per task (max {MAX_KEPT})")
    for task_id, note in sorted(summary["notes"].items()):
        console.print(f"  [dim]{task_id}: {note}[/]")
    return summary


def repeat(out: Path, source: mbpp.Source, jobs: int, burners: int) -> None:
    """Generate again from scratch under load; compare every file with DIR/plus."""
    folder = out / prepare.PLUS_DIR
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            generate_plus(source.tasks, Path(tmp), jobs=jobs, progress=True)
            seconds = time.perf_counter() - t0
            names = [plus.file_name(t.task_id) for t in source.tasks]
            differ = [n for n in names if (Path(tmp) / n).read_bytes() != (folder / n).read_bytes()]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    console.print(f"repeat: {len(names)} tasks again from scratch in {seconds:.1f} s with {jobs} jobs and "
                  f"{burners} CPU burners; identical files {len(names) - len(differ)}/{len(names)}"
                  + (f"; differ: {', '.join(differ[:20])}" if differ else ""))


def plus_lines(out: Path, tasks) -> dict[str, list[str]]:
    folder = out / prepare.PLUS_DIR
    return {t.id: plus.current(folder, t) or [] for t in tasks}


def suite(task: mbpp.MbppTask, lines: list[str], which: str) -> str:
    return "\n".join(list(task.test_list) + (lines if which == "plus" else []))


def grade_both(task, lines, source: str) -> tuple[bool, bool]:
    """(caught by base, caught by plus); plus is graded only when base passes
    (it starts with base's checks: a base failure is a plus failure)."""
    base = grade(source, task.test_setup_code, suite(task, lines, "base"), limits=LIMITS)
    if not base.passed:
        return True, True
    p = grade(source, task.test_setup_code, suite(task, lines, "plus"), limits=LIMITS)
    return False, not p.passed


def gold(tasks, lines, jobs: int) -> None:
    def one(t):
        g = grade(t.code, t.test_setup_code, suite(t, lines[t.id], "plus"), limits=Limits(cpu_s=20, wall_s=40))
        return t.id, g

    fails = []
    with ThreadPoolExecutor(jobs) as pool:
        for task_id, g in track(pool.map(one, tasks), total=len(tasks), description="gold on plus"):
            if not g.passed:
                fails.append((task_id, g.outcome.value, g.detail))
    console.print(f"gold: {len(tasks) - len(fails)}/{len(tasks)} reference solutions pass all their plus tests")
    for f in fails:
        console.print(f"  [red]{f}[/]")


def rate(rows: list[tuple[bool, bool]]) -> str:
    n = len(rows)
    b = sum(r[0] for r in rows)
    p = sum(r[1] for r in rows)
    return f"n={n}: base catches {b}/{n} = {b / max(n, 1):.1%}, plus catches {p}/{n} = {p / max(n, 1):.1%}"


def suites(tasks_by_id, lines, jobs: int) -> None:
    def run(items):
        with ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(lambda it: grade_both(tasks_by_id[it[0]], lines[it[0]], it[1]), items))

    by_kind: dict[str, list] = {}
    wrong = run([(t, src) for t, _, src in plus_suites.WRONG])
    for (t, kind, _), r in zip(plus_suites.WRONG, wrong):
        by_kind.setdefault(kind, []).append(r)
        if not r[1]:
            console.print(f"  [yellow]plus misses wrong {t} ({kind})[/]")
    console.print(f"wrong solutions, all: {rate(wrong)}")
    for kind, rows in by_kind.items():
        console.print(f"  {kind}: {rate(rows)}")
    correct = run([(t, src) for t, src in plus_suites.CORRECT])
    for (t, _), r in zip(plus_suites.CORRECT, correct):
        if r[1]:
            console.print(f"  [red]correct rewrite {t} fails {'base' if r[0] else 'plus'}[/]")
    console.print(f"correct rewrites (a catch is a false alarm): {rate(correct)}")
    for fallback in ("none", "first"):
        items = [(t.id, plus_suites.hardcoded(t, fallback)) for t in tasks_by_id.values()]
        items = [(i, s) for i, s in items if s is not None]
        rows = run(items)
        with_plus = [r for (i, _), r in zip(items, rows) if lines[i]]
        console.print(f"hard-coded visible answers (else {fallback}): {rate(rows)}; on tasks with plus tests: "
                      f"{rate(with_plus)}")


def mutants(tasks, lines, jobs: int, per_task: int, seed: int = 42) -> None:
    def sft_one(t):
        m = sft.find_mutant(t, random.Random(f"{seed}:{t.task_id}"))
        return None if m is None else grade_both(t, lines[t.id], m.source)

    with ThreadPoolExecutor(jobs) as pool:
        rows = [r for r in track(pool.map(sft_one, tasks), total=len(tasks), description="SFT mutants")
                if r is not None]
    console.print(f"SFT mutants (one failing mutation per task, as prepare picks them): {rate(rows)}")

    def pool_one(t):
        options = list(sft._mutations(t.code))
        random.Random(f"{seed}:{t.task_id}:pool").shuffle(options)
        return [grade_both(t, lines[t.id], src) for _, _, _, src in options[:per_task]]

    with ThreadPoolExecutor(jobs) as pool:
        rows = [r for rs in track(pool.map(pool_one, tasks), total=len(tasks), description="mutation pool")
                for r in rs]
    missed = [r for r in rows if not r[0]]
    console.print(f"single-token mutants (up to {per_task} a task): {rate(rows)}; of the {len(missed)} base "
                  f"misses, plus catches {sum(r[1] for r in missed)} = "
                  f"{sum(r[1] for r in missed) / max(len(missed), 1):.1%} (some mutants are equivalent: "
                  f"no test can catch them)")


def finalize(tasks, lines, n_tasks: int, reps: int) -> None:
    import tempfile

    from glyph.envs.mbpp.finalize import TaskTests, verify
    from glyph.envs.mbpp.harness import GlyphHarnessConfig
    from testkit.rollout import Rollouts

    harness = GlyphHarnessConfig(profile="glyph")  # glyph's harness: budget 8, tool_timeout 10
    limits = harness.limits()
    chosen = [t for t in tasks if lines[t.id]][:n_tasks]
    episodes = []
    with Rollouts({t.id: t for t in tasks}, harness) as rollouts, tempfile.TemporaryDirectory() as root:
        for t in track(chosen, description="oracle episodes"):
            for arm in ("a", "b"):
                played = rollouts.play(t, arm, "recover" if arm == "a" else "revise", Path(tempfile.mkdtemp(dir=root)))
                final = (played.workspace / "solution.py").read_bytes().decode("utf-8", "surrogateescape")
                episodes.append((t, json.loads(json.dumps(played.trace)), final, played.service, played.replies))
    modes = {"before": lambda t: TaskTests(t.test_setup_code, tuple(t.test_list), tuple(t.test_list)),
             "base+plus metric": lambda t: TaskTests(t.test_setup_code, tuple(t.test_list), tuple(t.test_list),
                                                     tuple(lines[t.id]), "base"),
             "hidden=plus": lambda t: TaskTests(t.test_setup_code, tuple(t.test_list), tuple(t.test_list),
                                                tuple(lines[t.id]), "plus")}
    times: dict[str, list[float]] = {m: [] for m in modes}
    rewarded = {m: 0 for m in modes}
    for _ in range(reps):
        for t, trace, final, service, replies in episodes:
            for m, make in modes.items():  # interleaved: the same load for each mode
                t0 = time.perf_counter()
                info = verify(trace, final, make(t), limits, service["log"], service_end=service["end"],
                              replies=replies, profile="glyph")
                times[m].append(time.perf_counter() - t0)
                rewarded[m] += info.reward == 1.0
    base = statistics.median(times["before"])
    for m, ts in times.items():
        ts = sorted(ts)
        console.print(f"finalize {m:>17}: median {statistics.median(ts) * 1000:.1f} ms, p95 "
                      f"{ts[int(0.95 * (len(ts) - 1))] * 1000:.1f} ms, rewarded {rewarded[m]}/{len(ts)}; "
                      f"ratio={statistics.median(ts) / base:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("artifacts"))
    ap.add_argument("--mbpp-path")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--mutants", type=int, default=8, help="single-token mutants per task in the pool")
    ap.add_argument("--finalize-tasks", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="generate,gold,suites,mutants,finalize",
                    help="steps, comma-separated; also repeat")
    ap.add_argument("--burners", type=int, default=2, help="CPU-bound processes running during repeat")
    args = ap.parse_args()
    only = set(args.only.split(","))
    source = mbpp.load_source(args.mbpp_path)
    tasks = list(source.tasks)
    if "generate" in only:
        generate(args.out, source, args.jobs, args.fresh)
    lines = plus_lines(args.out, tasks)
    if not any(lines.values()):
        sys.exit(f"no plus tests under {args.out / prepare.PLUS_DIR}: run with --only generate first")
    if "gold" in only:
        gold(tasks, lines, args.jobs)
    if "suites" in only:
        suites({t.id: t for t in tasks}, lines, args.jobs)
    if "mutants" in only:
        mutants(tasks, lines, args.jobs, args.mutants)
    if "finalize" in only:
        finalize(tasks, lines, args.finalize_tasks, args.reps)
    if "repeat" in only:
        repeat(args.out, source, args.jobs, args.burners)


if __name__ == "__main__":
    main()
