"""Grade every MBPP reference solution: the grader's own acceptance test.

Under the study's grader all 974 reference solutions pass their tests (and
the 11 tasks with challenge tests pass those), so anything less here is a bug
in glyph's grader to fix or explain.
"""

from __future__ import annotations

import collections
import os
import time
from concurrent.futures import ThreadPoolExecutor

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from glyph.data import mbpp
from glyph.grading import Grade, InvalidTests, grade
from glyph.outcomes import Outcome


def check_gold(path=None, jobs: int | None = None, progress: bool = True) -> dict:
    tasks = list(mbpp.load(path).values())
    jobs = jobs or os.cpu_count() or 1
    work = [("tests", t) for t in tasks] + [("challenge", t) for t in tasks if t.challenge_test_list]

    def one(item) -> tuple[str, str, Grade]:
        kind, t = item
        try:
            return kind, t.id, grade(t.code, t.test_setup_code, t.tests(kind == "challenge"),
                                     filename=f"<{t.id} {kind}>")
        except InvalidTests as exc:  # a broken task is a finding of this check, not a crash
            return kind, t.id, Grade(Outcome.OTHER, [], 0.0, f"invalid tests: {exc}")

    report = {k: {"counts": collections.Counter(), "failures": [], "seconds": 0.0, "n": 0}
              for k in ("tests", "challenge")}
    t0 = time.perf_counter()
    columns = (TextColumn("grading gold solutions"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not progress) as bar, ThreadPoolExecutor(jobs) as pool:
        job = bar.add_task("gold", total=len(work))
        for kind, task_id, g in pool.map(one, work):
            r = report[kind]
            r["n"] += 1
            r["counts"][g.outcome.value] += 1
            r["seconds"] += g.seconds
            if not g.passed:
                r["failures"].append({"task": task_id, "outcome": g.outcome.value, "detail": g.detail})
            bar.advance(job)
    for r in report.values():
        r["counts"] = dict(r["counts"])
    report["wall_seconds"] = time.perf_counter() - t0
    report["jobs"] = jobs
    return report
