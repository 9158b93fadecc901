"""Which of the answers the reference gave deterministically become plus tests.

What it guarantees: ``shared`` keeps no answer a correct solution need not
give (an empty input's answer that is not ``natural``; an unsorted
sequence where every visible answer is sorted); ``choose`` keeps at most
``MAX_KEPT``, in candidate order, round-robin over distinct expected
values, while the reference's total trace events on them (``probe``'s
count, never a clock) stay within ``budget``: a function of the candidates
and their answers and counts only;
every line written is one fast-path assert with a literal expected value
(``fast_check``) that the reference passes under glyph's grader after the
visible tests (``confirm`` drops a line it fails).
"""

from __future__ import annotations

from typing import Any

from glyph.data.mbpp import MbppTask
from glyph.data.plus.mutate import Candidate
from glyph.data.plus.plain import literal
from glyph.grading import InvalidTests, ProbeCheck, compile_tests, grade, solution_bindings
from glyph.sandbox import Limits, Sandbox

MAX_KEPT = 50
PLUS_BUDGET_FACTOR = 2  # the kept tests may cost the reference this many times the visible tests' events ...
PLUS_BUDGET_FLOOR_OPS = 2_000_000  # ... or this many, whichever is more


def budget(seed_ops: list[int]) -> int:
    """The trace events the kept tests may cost the reference: scaled from its events on the visible tests."""
    return max(PLUS_BUDGET_FLOOR_OPS, PLUS_BUDGET_FACTOR * sum(seed_ops))


def natural(v) -> bool:
    """An answer to an empty input that any implementation would give: None,
    a bool, zero, an empty value, or a sequence of such. (The reference's
    ``-100000`` for the maximum row sum of no rows is its own choice, a
    correct solution may raise instead: no test should demand it.)"""
    if v is None or type(v) is bool:
        return True
    if type(v) in (int, float, complex, str, bytes, dict, set):
        return not v
    if type(v) in (list, tuple):
        return all(natural(x) for x in v)
    return False


def _is_sorted(v) -> bool:
    try:
        return list(v) == sorted(v)
    except TypeError:
        return False


def _sorted_outputs(checks: list[ProbeCheck]) -> bool:
    """Every visible answer that is a sequence of several distinct items is
    sorted: then the order may be an accident (a set's iteration order), and
    a plus answer that is not sorted would fail a solution that sorts."""
    seqs = [c.expected for c in checks if c.expected_expr is None and type(c.expected) in (list, tuple)
            and len(set(map(repr, c.expected))) > 1]
    return bool(seqs) and all(_is_sorted(v) for v in seqs)


def shared(alive: list[int], cands: list[Candidate], values: list, checks: list[ProbeCheck], why: dict
           ) -> list[int]:
    """The indexes in ``alive`` whose answers (``values[i]``, to ``cands[i]``)
    a correct solution must share: not an empty input's answer that is not
    ``natural``, not an unsorted sequence where every visible answer is
    sorted. Counts what it drops in ``why``."""
    odd = [i for i in alive if cands[i].empty and not natural(values[i])]
    if odd:
        why["empty input, answer not natural"] = len(odd)
        alive = [i for i in alive if i not in set(odd)]
    if _sorted_outputs(checks):
        unsorted = [i for i in alive if type(values[i]) in (list, tuple) and not _is_sorted(values[i])]
        if unsorted:
            why["unsorted, where every visible answer is sorted"] = len(unsorted)
            alive = [i for i in alive if i not in set(unsorted)]
    return alive


def choose(kept: list[tuple[Candidate, Any, int]], budget_ops: int, limit: int = MAX_KEPT
           ) -> list[tuple[Candidate, Any, int]]:
    """Round-robin over distinct expected values, each in candidate order,
    while the reference's total trace events on the chosen stay within ``budget_ops``."""
    groups: dict[str, list] = {}
    for item in kept:
        groups.setdefault(literal(item[1]), []).append(item)
    queues = list(groups.values())
    out: list = []
    spent = 0
    while len(out) < limit and queues:
        for q in list(queues):
            if len(out) >= limit:
                break
            item = q.pop(0)
            if spent + item[2] <= budget_ops:
                out.append(item)
                spent += item[2]
            if not q:
                queues.remove(q)
    order = {id(item[0]): i for i, item in enumerate(kept)}
    return sorted(out, key=lambda item: order[id(item[0])])


def fast_check(line: str, task: MbppTask) -> bool:
    """The line compiles to one fast-path check with a literal expected value."""
    try:
        suite = compile_tests(task.test_setup_code, line, solution_bindings(task.code))
    except InvalidTests:
        return False
    return suite.program is None and len(suite.checks) == 1 and suite.checks[0].expected_expr is None


def confirm(task: MbppTask, lines: list[str], sandbox: Sandbox | None) -> tuple[list[str], int]:
    """Grade the reference on the visible tests + ``lines`` with glyph's
    grader; drop a line it fails (a few rounds), or all if it keeps failing."""
    dropped = 0
    base = len(task.test_list)
    for _ in range(3):
        if not lines:
            return lines, dropped
        g = grade(task.code, task.test_setup_code, "\n".join(list(task.test_list) + lines), sandbox=sandbox,
                  limits=Limits(cpu_s=60, wall_s=180))  # generous: no clock decides
        if g.passed:
            return lines, dropped
        bad = next((c.index for c in g.checks if c.outcome is not None and not c.passed), None)
        if bad is None or bad < base:
            return [], dropped + len(lines)
        del lines[bad - base]
        dropped += 1
    return [], dropped + len(lines)
