"""Plus tests: differential tests generated from MBPP's reference solutions;
``generate`` makes them for many tasks, ``generate_task`` for one.

MBPP shows each task's three asserts to the agent and grades the same three,
so special-casing the shown inputs is rewarded and a bug they miss passes.
Like EvalPlus, this package derives more tests from the reference solution:

1. **Seeds** (``seeds``). Each visible assert ``assert P == E`` (compiled by
   ``glyph.grading``) has a *target call* inside its probe ``P``: the
   outermost call of a function the reference (or the test setup) defines.
   Its literal arguments are the seeds; a non-literal argument
   (``Pair(5, 24)``, ``1.0 / 3``) is kept as written.
2. **Type-aware mutation** (``mutate``). Per argument position a ``Profile``
   of the seed values (types, int range and sign, string alphabet and
   character classes, lengths, records, sorted or rectangular containers)
   drives mutations: ints, floats, strings, lists, tuples, dicts, sets and
   nested values; sizes and edge values (empty, one element, negatives
   inside containers, duplicates, unicode letters). Each seed's edge values
   come first, then random stacked mutations, up to ``MAX_CANDIDATES``
   distinct probes. What the seeds hold fixed stays fixed, so that a test
   stays inside the task's contract: a scalar's sign (all seeds > 0: it
   stays >= 1), a one-character string, an int equal to (or below) another
   argument's length, two int arguments in strict order in every seed, a
   record's arity (a short or mixed-type tuple), a matrix's shape, and a
   sorted input where the task's text says "sorted".
3. **Keep only what the reference answers deterministically** (``probe``,
   then ``generate_task``). Every candidate probe runs against the reference
   solution in glyph's sandbox (never in this process), under ``SEEDS``
   sandbox servers, each started with its own random hash seed (checked
   distinct), in a different order in each (so state kept between calls
   shows). What a probe costs is counted, not timed: the trace events
   (calls, lines, returns) of the reference's own code, and a probe is
   stopped past a cap scaled from the reference's count on the visible
   tests (``probe.ops_cap``). Two backstops stop what the count cannot
   see, work between trace events (a C-level operation on a huge list):
   ``probe.CPU_S`` of CPU time and ``probe.WALL_S`` of wall clock; a probe
   stopped by either is the same outcome as one stopped by the count. A
   candidate is kept only if every run returns plain data (the sandbox's
   wire types) that a Python literal reproduces, equal (same types) across
   all runs, within the cap, without raising. A task whose reference
   answers any candidate differently between runs keeps no plus test at all:
   its outputs depend on hash order, state or chance, and a seed not tried
   could reorder a kept one. Two more rules drop answers a correct solution
   need not share: an empty argument's answer unless it is natural
   (``selection.natural``: None, a bool, zero, empty), and an unsorted
   sequence where every visible answer is a sorted one (the order may be a
   set's, which a solution that sorts would not reproduce).
4. **At most ``MAX_KEPT`` per task** (``selection``), deduplicated by their
   probe, chosen round-robin over distinct expected values (so a predicate's
   tests are not all ``False``) while the reference's total count on them
   stays within ``PLUS_BUDGET_FACTOR`` times its count on the visible tests
   (or ``PLUS_BUDGET_FLOOR_OPS``), so grading with them costs about what
   grading the visible tests does. Which are kept is thus a function of the
   task, the seed, ``MAX_KEPT`` and the reference's answers and counts
   (under the three hash seeds), never of the machine's speed or load: the
   same files, byte for byte, on every machine. They are written as ordinary
   ``assert P' == LITERAL`` lines: the grader's fast path grades them, the
   literal read on the trusted side. Before a task's file is written, glyph's grader
   grades the reference on the visible tests followed by the plus tests
   under yet another hash seed; a line it fails is dropped (none does in
   practice; the count is recorded).

Resumable (``store``): one file per task (``mbpp_<id>.py`` in the output
folder), written atomically, whose header records the generator version, the
seed and a hash of the task's reference, setup and tests; a file whose
header matches is reused. Candidates are drawn from
``random.Random(f"{seed}:{task_id}")``, so a rerun generates the same
candidates, and keeps the same ones; a set, in a probe or an answer, is
written in one canonical order (``plain.literal``), not this process's hash
order. The header records the counts that decided (``ops_cap``,
``ops_budget``) and no time.

Where a rerun could still differ: the hash seeds are the sandbox servers'
own, random (checked distinct), so a reference whose answers, or whose
count near a cap, depend on hash order only for rare inputs may be judged
differently by other seeds; and a probe that finishes within its count but
spends close to ``CPU_S`` of CPU time between trace events may fall on
either side of it on another machine (CPU time moves little with load, but
does with the processor), or past ``WALL_S`` under extreme load. README
gives what a full regeneration under load measured.

What it does not do: there is no written contract per task (EvalPlus wrote
one for each), so a precondition neither the seeds, the rules in 2. nor the
reference shows can still be crossed, and the test then demands the
reference's answer outside the task's contract. Float results are compared
exactly, as MBPP's own asserts compare them. Arguments that are not literals
are never mutated.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from glyph.data.mbpp import MbppTask
from glyph.data.plus.mutate import candidates, says_sorted
from glyph.data.plus.plain import literal, same
from glyph.data.plus.probe import OPS_CEIL, SEEDS, Runner, SeedSandboxes, ops_cap
from glyph.data.plus.seeds import seeds_of
from glyph.data.plus.selection import MAX_KEPT, budget, choose, confirm, fast_check, shared
from glyph.data.plus.store import GENERATOR, TaskResult, current, file_name, read_file, write_file
from glyph.errors import DataError
from glyph.grading import InvalidTests
from glyph.sandbox import Sandbox


def generate_task(task: MbppTask, seed: int, runners: list[Runner], grade_sandbox: Sandbox | None = None
                  ) -> TaskResult:
    """One task's plus tests and the stats its file's header records (not
    written): its candidates, answered by the reference under each of
    ``runners`` (their sandboxes' hash seeds differ), kept and chosen as 3.
    and 4. say, graded last in ``grade_sandbox``."""
    t0 = time.perf_counter()
    stats: dict = {"candidates": 0, "kept": 0}
    try:
        seeds, checks, setup = seeds_of(task)
    except InvalidTests as exc:
        stats["note"] = f"invalid tests: {exc}"
        return TaskResult(task.task_id, [], stats)
    if not seeds:
        stats["note"] = "no visible test calls a function the reference defines with literal arguments"
        return TaskResult(task.task_id, [], stats)
    cands = candidates(seeds, f"{seed}:{task.task_id}", sorted_inputs=says_sorted(task.text))
    stats["candidates"] = len(cands)
    if not cands:
        stats["note"] = "no literal argument to mutate"
        return TaskResult(task.task_id, [], stats)
    over: list[str] = []  # the probes over their limit, shared by the task's batches
    # The reference's trace events on the visible probes scale the cap and the budget (counts, not times).
    calib = runners[0].evaluate(task.code, setup, [s.probe for s in seeds], OPS_CEIL, over)
    cap = ops_cap([a.ops for a in calib])
    budget_ops = budget([a.ops for a in calib])
    stats["ops_cap"], stats["ops_budget"] = cap, budget_ops
    probes = [c.probe for c in cands]
    first = runners[0].evaluate(task.code, setup, probes, cap, over)
    alive = [i for i, a in enumerate(first) if a.ok]
    why = {}
    for a in first:
        if not a.ok:
            why[a.why] = why.get(a.why, 0) + 1
    hash_sensitive = False
    rng = random.Random(f"{seed}:{task.task_id}:order")
    for k, runner in enumerate(runners[1:]):
        order = alive[::-1] if k == 0 else rng.sample(alive, len(alive))
        again = runner.evaluate(task.code, setup, [probes[i] for i in order], cap, over)
        survivors = set()
        for i, a in zip(order, again):
            if not a.ok:
                why[a.why] = why.get(a.why, 0) + 1
            elif not same(a.value, first[i].value):
                hash_sensitive = True
                why["differs between runs"] = why.get("differs between runs", 0) + 1
            else:
                survivors.add(i)
        alive = [i for i in alive if i in survivors]
    if hash_sensitive:
        stats["note"] = "the reference's answers differ between runs (hash order or state): no plus tests"
        alive = []
    alive = shared(alive, cands, [a.value for a in first], checks, why)
    stats["dropped"] = dict(sorted(why.items()))
    chosen = choose([(cands[i], first[i].value, first[i].ops) for i in alive], budget_ops)
    lines = [f"assert {c.probe} == {literal(v)}" for c, v, _ in chosen]
    lines = [ln for ln in lines if fast_check(ln, task)]
    lines, dropped = confirm(task, lines, grade_sandbox)
    if dropped:
        stats["failed_final_grade"] = dropped
    stats["kept"] = len(lines)
    if not lines and "note" not in stats:
        stats["note"] = "no candidate kept (see dropped)"
    stats["edge"] = sum(1 for c, _, _ in chosen if c.edge and f"assert {c.probe} == " in "\n".join(lines))
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return TaskResult(task.task_id, lines, stats)


def generate(tasks: Iterable[MbppTask], folder: Path, seed: int = 42, jobs: int | None = None,
             progress: bool = True, sandbox_mode: str | None = None) -> dict:
    """Generate (or reuse) the plus tests of ``tasks`` into ``folder``; return a summary."""
    from rich.progress import track

    tasks = list(tasks)
    jobs = jobs or min(2, os.cpu_count() or 1)
    t0 = time.perf_counter()
    todo = [t for t in tasks if current(folder, t, seed) is None]
    results: dict[int, dict] = {}
    if todo:
        seeds = SeedSandboxes(SEEDS, pool=jobs, mode=sandbox_mode)
        grader = Sandbox(mode=sandbox_mode, pool=jobs)
        try:
            runners = [Runner(sb) for sb in seeds.sandboxes]

            def one(task: MbppTask) -> dict:
                result = generate_task(task, seed, runners, grader)
                write_file(folder, task, seed, result)
                return result.stats

            with ThreadPoolExecutor(jobs) as pool:
                for task, stats in track(zip(todo, pool.map(one, todo)), total=len(todo),
                                         description="generating plus tests", disable=not progress):
                    results[task.task_id] = stats
        finally:
            grader.close()
            seeds.close()
    return summarize(folder, tasks, seed, generated=len(todo), seconds=time.perf_counter() - t0)


def summarize(folder: Path, tasks: list[MbppTask], seed: int, generated: int = 0, seconds: float = 0.0) -> dict:
    """Counts over ``tasks``' current plus files (``DataError`` if one is missing or stale)."""
    kept, notes = {}, {}
    for t in tasks:
        lines = current(folder, t, seed)
        if lines is None:
            raise DataError(f"{folder / file_name(t.task_id)}: missing, or generated for another task "
                            f"version, generator or seed")
        kept[t.id] = len(lines)
        meta, _ = read_file(folder / file_name(t.task_id))
        if meta.get("note"):
            notes[t.id] = meta["note"]
    n = len(kept)
    return {"generator": GENERATOR, "seed": seed, "tasks": n, "generated": generated,
            "reused": n - generated, "with_tests": sum(1 for v in kept.values() if v),
            "tests": sum(kept.values()), "mean_kept": round(sum(kept.values()) / n, 2) if n else 0.0,
            "max_kept": MAX_KEPT, "hash_seeds": SEEDS, "kept": kept, "notes": notes,
            "seconds": round(seconds, 1)}
