"""Conventions tasks: each spec is underspecified on one point, and a hidden
test enforces one convention a model cannot infer from it (empty input ->
None, "unique" -> sorted, inclusive ranges, ...).

A row is ``{id, mode, split, spec, hidden_test, reference_broken,
reference_fixed}``. ``hidden_test`` imports the solution (``from solution
import solve``) and asserts; ``reference_broken`` is what a competent
programmer writes cold, ``reference_fixed`` is correct. So a grader is
validated offline at no model cost: every broken reference must fail and
every fixed one pass (``validate``, ``glyph conventions validate``).

Grading is glyph's grader (``glyph.grading.grade``): the hidden test is
compiled on the trusted side and never enters the solution's process.

What this module guarantees: ``read_tasks`` never raises on a bad row; it
returns every good row and one ``FILE:LINE: why`` line per bad one.
``load_tasks`` raises ``glyph.errors.DataError`` listing them all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

from glyph.agent.single_turn import extract_code  # noqa: F401  (re-exported: one extractor, shipped to the runtime)
from glyph.errors import DataError
from glyph.sandbox import Limits

SPLITS = ("train", "holdout")
FIELDS = ("id", "mode", "split", "spec", "hidden_test", "reference_broken", "reference_fixed")
DATA_FILE = Path(__file__).resolve().parent / "conventions.jsonl"
GRADE_LIMITS = Limits(cpu_s=5, wall_s=10)
"""The limits one conventions grading runs under (every task is a small pure function)."""

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Write the module solution.py that implements the "
    "specification. Answer with one ```python code block holding the whole file and nothing else.")


MODE_LESSONS: dict[str, str] = {
    "empty_none": "When the input is empty, return None instead of raising or returning a default.",
    "unique_sorted": "When asked for unique or distinct values, return each once, sorted in ascending order "
                     "(not in order of first appearance).",
    "inclusive_range": "A range 'from lo to hi' (values, indexes or multiples) includes both ends: lo and hi "
                       "themselves count.",
    "one_indexed": "Positions, line numbers and n-th element are 1-based: the first item is position 1 "
                   "(unless the spec explicitly says 0-based).",
    "case_insensitive": "Compare, match and count text case-insensitively ('The' equals 'the'), and return "
                        "matched items unchanged.",
    "iso_date": "Return dates as ISO 8601 strings 'YYYY-MM-DD', whatever format the input dates use.",
    "parse_none": "When the input cannot be parsed (bad number, missing separator), return None instead of "
                  "raising.",
    "round_2dp": "Round every float result to 2 decimal places with round(x, 2) before returning it.",
    "index_none": "When an index or row/column is out of range, return None instead of raising IndexError.",
    "range_guard": "An index is valid only when 0 <= i < len: return None for a negative index (never count "
                   "from the end as Python's xs[-1] does) and for one past the end.",
    "first_wins": "On duplicate keys or ids, keep the first occurrence: a later duplicate never overwrites "
                  "an earlier one.",
    "strip_whitespace": "Strip leading and trailing whitespace from strings (names, fields, keys, values) "
                        "before comparing or returning them.",
    "negatives_allowed": "Numbers may be negative: accept and keep a leading minus sign when parsing, "
                         "matching or taking digits.",
    "sorted_keys": "Return dicts with their keys in sorted (ascending) order, e.g. dict(sorted(d.items())).",
    "overlapping": "Count and find substring occurrences including overlapping ones ('aa' occurs 3 times "
                   "in 'aaaa'); str.count and re.finditer miss them.",
    "round_half_up": "Round halves up (2.5 -> 3, 0.5 -> 1), not to even as Python's round() does: use "
                     "math.floor(x + 0.5).",
}
"""Each mode of glyph's data file and the one-line lesson that states its
convention: what the reference lesson writer distils from a cluster of that
mode's failures (and what the reference agent recognises in its context)."""


@dataclass(frozen=True)
class ConventionTask:
    id: str
    mode: str
    split: Literal["train", "holdout"]
    spec: str
    hidden_test: str
    reference_broken: str
    reference_fixed: str


def read_tasks(path: str | Path) -> tuple[list[ConventionTask], list[str]]:
    """Every good row of the JSONL file at ``path``, and one ``FILE:LINE: why``
    per bad row (a blank line is skipped)."""
    located, errors = read_tasks_located(path)
    return [task for _, task in located], errors


def read_tasks_located(path: str | Path) -> tuple[list[tuple[int, ConventionTask]], list[str]]:
    """``read_tasks`` keeping each good row's 1-based line number, so that a
    later check (``validate_task``) can report ``FILE:LINE: id: why``."""
    path = Path(path)
    tasks: list[tuple[int, ConventionTask]] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"{path}: cannot read ({exc})"]
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            errors.append(f"{where}: not JSON ({exc})")
            continue
        if not isinstance(row, dict):
            errors.append(f"{where}: not a JSON object")
            continue
        missing = [f for f in FIELDS if f not in row]
        if missing:
            errors.append(f"{where}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
            continue
        # mode may be "" (the flywheel then clusters that task's failures by outcome and exception)
        bad = [f for f in FIELDS if not isinstance(row[f], str) or (f != "mode" and not row[f].strip())]
        if bad:
            errors.append(f"{where}: field {bad[0]!r} should be a non-empty string")
            continue
        if row["split"] not in SPLITS:
            errors.append(f"{where}: unknown split {row['split']!r} (expected train or holdout)")
            continue
        if row["id"] in seen:
            errors.append(f"{where}: id {row['id']!r} repeats line {seen[row['id']]}")
            continue
        seen[row["id"]] = n
        tasks.append((n, ConventionTask(**{f: row[f] for f in FIELDS})))
    if not tasks and not errors:
        errors.append(f"{path}: no tasks")
    return tasks, errors


def load_tasks(path: str | Path | None = None) -> list[ConventionTask]:
    """The tasks at ``path`` (default: glyph's own data file); raises on any bad row."""
    tasks, errors = read_tasks(path or DATA_FILE)
    if errors:
        raise DataError("\n".join(errors))
    return tasks


def split(tasks: Iterable[ConventionTask], name: str) -> list[ConventionTask]:
    return [t for t in tasks if t.split == name]


def grade(task: ConventionTask, code: str, limits: Limits = GRADE_LIMITS):
    """Grade ``code`` (the whole solution.py) on the task's hidden test."""
    from glyph.grading import grade as grade_solution
    return grade_solution(code, "", task.hidden_test, limits=limits, filename=f"<{task.id} hidden test>")


def user_prompt(task: ConventionTask, lessons: Iterable[str] = ()) -> str:
    """The task as the agent sees it: the spec, then the lessons in context
    (the only thing the flywheel changes)."""
    lessons = [x.strip() for x in lessons if x.strip()]
    text = task.spec.strip()
    if lessons:
        text += "\n\nLessons learned from earlier graded attempts:\n" + "\n".join(f"- {x}" for x in lessons)
    return text + "\n\nWrite solution.py."


def messages(task: ConventionTask, lessons: Iterable[str] = ()) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_prompt(task, lessons)}]


@dataclass(frozen=True)
class Validation:
    task: ConventionTask
    broken: str
    """The broken reference's outcome (must not be PASS)."""
    fixed: str
    """The fixed reference's outcome (must be PASS)."""
    fixed_detail: str = ""
    invalid: str = ""
    """Why the hidden test itself is unusable (``InvalidTests``); empty when it compiles."""

    @property
    def ok(self) -> bool:
        return not self.invalid and self.broken != "PASS" and self.fixed == "PASS"

    def problem(self) -> str:
        if self.invalid:
            return f"hidden_test is unusable: {self.invalid}"
        if self.broken == "PASS":
            return "reference_broken passes the hidden test (the test does not enforce the convention)"
        if self.fixed != "PASS":
            return f"reference_fixed fails the hidden test: {self.fixed} {self.fixed_detail}".strip()
        return ""


def validate_task(task: ConventionTask) -> Validation:
    from glyph.grading import InvalidTests
    try:
        broken, fixed = grade(task, task.reference_broken), grade(task, task.reference_fixed)
    except (InvalidTests, SyntaxError) as exc:
        return Validation(task, "", "", invalid=str(exc))
    return Validation(task, broken.outcome.value, fixed.outcome.value, fixed.detail)
