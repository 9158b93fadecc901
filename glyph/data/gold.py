"""Grade every MBPP reference solution: the grader's own acceptance test.

Under the study's grader all 974 reference solutions pass their tests (and
the 11 tasks with challenge tests pass those), so anything less here is a bug
in glyph's grader to fix or explain.

A grading that does not pass in the parallel pass gets a second look, alone,
with ``ALONE_WALL_STRETCH`` times the wall-clock limit and the same CPU limit
(``second_look``; ``glyph data validate`` does the same, AGAIN_ALONE in
``glyph.data.prepare``): gold ``mbpp_123`` needs 3.7 s of CPU, and a loaded CI
machine once stopped it at its 20 s wall limit after 3.47 s of CPU. The
counts are the second look's; ``second_looks`` says how many there were.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from glyph.data import mbpp
from glyph.grading import Grade, InvalidTests, grade
from glyph.outcomes import Outcome
from glyph.sandbox import Limits

GOLD_LIMITS = Limits()  # grading.grade's default: 10 s of CPU, 20 s of wall clock
ALONE_WALL_STRETCH = 10  # a second look: gold 20 s -> 200 s, an SFT trace 6 s -> 60 s of wall clock


def second_look(limits: Limits) -> Limits:
    """The limits of a grading's second look, alone: the same CPU limit, a longer wall clock. A wrong
    answer or an error does not hang on time, and a solution that loops still meets the CPU limit."""
    return dataclasses.replace(limits, wall_s=limits.wall_s * ALONE_WALL_STRETCH)


def check_gold(path=None, jobs: int | None = None, progress: bool = True) -> dict:
    tasks = list(mbpp.load(path).values())
    jobs = jobs or os.cpu_count() or 1
    work = [("tests", t) for t in tasks] + [("challenge", t) for t in tasks if t.challenge_test_list]

    def one(item, limits: Limits = GOLD_LIMITS) -> tuple[str, str, Grade]:
        kind, t = item
        try:
            return kind, t.id, grade(t.code, t.test_setup_code, t.tests(kind == "challenge"),
                                     filename=f"<{t.id} {kind}>", limits=limits)
        except InvalidTests as exc:  # a broken task is a finding of this check, not a crash
            return kind, t.id, Grade(Outcome.OTHER, [], 0.0, f"invalid tests: {exc}")

    report = {k: {"counts": collections.Counter(), "failures": [], "seconds": 0.0, "n": 0}
              for k in ("tests", "challenge")}
    t0 = time.perf_counter()
    columns = (TextColumn("grading gold solutions"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress) as bar, ThreadPoolExecutor(jobs) as pool:
        job = bar.add_task("gold", total=len(work))
        graded = []
        for g in pool.map(one, work):
            graded.append(g)
            bar.advance(job)
    again = [i for i, (_, _, g) in enumerate(graded) if not g.passed]
    for i in again:
        graded[i] = one(work[i], second_look(GOLD_LIMITS))
    for kind, task_id, g in graded:
        r = report[kind]
        r["n"] += 1
        r["counts"][g.outcome.value] += 1
        r["seconds"] += g.seconds
        if not g.passed:
            r["failures"].append({"task": task_id, "outcome": g.outcome.value, "detail": g.detail})
    for r in report.values():
        r["counts"] = dict(r["counts"])
    report["wall_seconds"] = time.perf_counter() - t0
    report["jobs"] = jobs
    report["second_looks"] = len(again)
    return report
