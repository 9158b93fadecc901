"""``glyph grade``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import MbppPath, console, fail

PATHS = {"fast": "fast path: each assert compared outside the solution",
         "referee": "referee path: the tests ran apart from the solution"}
"""What each grading path is (``glyph.grading``'s docstring), for the one-line summary."""

_WORKER_NAME = re.compile(r'(?<=[("])solution\.py(?=[",])')
"""The name the sandbox compiles every solution under (``sandbox/runtime/worker.py``), as it
appears in a SyntaxError's ``(solution.py, line 1)`` and a traceback's ``File "solution.py"``."""


def _check_file(option: str, path: Path) -> None:
    """One wording for a missing or odd input file, naming the option."""
    if not path.exists():
        fail(f"{option} {path}: no such file")
    if not path.is_file():
        fail(f"{option} {path}: not a regular file")


def _read_solution(path: Path) -> tuple[bytes, int]:
    """The solution's bytes, read up to one past the grader's limit (a bigger file is not read whole),
    and the file's own size."""
    import os

    from glyph.grading import MAX_SOLUTION_BYTES

    try:
        with path.open("rb") as f:
            return f.read(MAX_SOLUTION_BYTES + 1), os.fstat(f.fileno()).st_size
    except OSError as exc:
        fail(f"--solution {path}: cannot read it ({exc.strerror or exc})")


def _too_big(path: Path, size: int):
    """The grade of a solution over the grader's size limit, naming the file's own size (the grader,
    given only what was read, would name the read cap): OTHER, nothing run."""
    from glyph.grading import MAX_SOLUTION_BYTES, Grade
    from glyph.outcomes import Outcome

    why = (f"{path.name} is {size:,} bytes ({size / (1 << 20):.1f} MiB), over the grader's "
           f"{MAX_SOLUTION_BYTES:,}-byte limit; nothing was run")
    return Grade(Outcome.OTHER, [], 0.0, why, path="not run")


def _read_tests(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"--tests {path}: cannot read it ({exc.strerror or exc})")
    except UnicodeDecodeError as exc:
        fail(f"--tests {path}: not UTF-8 text ({exc.reason} at byte {exc.start})")


def _task_id(task: str) -> str:
    """``task`` when it looks like an MBPP id; a bare number is refused with the id it means."""
    if task.isdigit():
        fail(f"--task {task}: task ids look like mbpp_{task} (try --task mbpp_{task})")
    return task


def grade(
    solution: Annotated[Path, typer.Option("--solution", help="the Python file to grade")],
    task: Annotated[Optional[str], typer.Option("--task", help="an MBPP task id, e.g. mbpp_11")] = None,
    tests: Annotated[Optional[Path], typer.Option("--tests", help="a Python file of hidden tests")] = None,
    challenge: Annotated[bool, typer.Option("--challenge", help="with --task: grade MBPP's challenge tests")] = False,
    plus: Annotated[bool, typer.Option("--plus", help="with --task: the visible tests, then the task's plus "
                                                      "tests (`glyph data plus`)")] = False,
    plus_path: Annotated[Optional[Path], typer.Option("--plus-path", help="folder of plus tests (default: "
                                                      "$GLYPH_PLUS_PATH, else artifacts/plus)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the grade as JSON (outcome, each check, "
                                                          "seconds, path, sandbox)")] = False,
    mbpp_path: MbppPath = None,
    profile: Annotated[str, typer.Option("--profile", help="grade as this profile's env does: its task "
                                         "rows, limits and grading semantics (study: the study's "
                                         "classifier's verdicts; glyph: glyph's)")] = "study",
) -> None:
    """Grade a solution in the sandbox against hidden tests, as a profile's env grades a python_test."""
    from rich.markup import escape

    from glyph import profiles
    from glyph.grading import grade as run_grade
    from glyph.outcomes import Outcome
    from glyph.text import printable

    if (task is None) == (tests is None):
        fail("give exactly one of --task or --tests")
    if profile not in profiles.names():
        fail(f"--profile {profile}: no such profile (use one of {', '.join(profiles.names())})")
    prof = profiles.get(profile)
    limits, semantics = prof.grading()
    if plus and (task is None or challenge):
        fail("--plus goes with --task, without --challenge")
    _check_file("--solution", solution)
    if tests is not None:
        _check_file("--tests", tests)
    if task is not None:
        _task_id(task)
    source, size = _read_solution(solution)
    if task is not None:
        from glyph.data import mbpp
        known = mbpp.load(mbpp_path)
        if task not in known:
            import difflib
            close = difflib.get_close_matches(task, list(known), n=3)
            fail(f"--task {task}: no such MBPP task" + (f" (did you mean {', '.join(close)}?)" if close else "")
                 + "; list the ids with `glyph data list`")
        row = known[task]
        if challenge and not row.challenge_test_list:
            fail(f"{task} has no challenge tests")
        rows = prof.row(row)
        program = "\n".join(rows.challenge if challenge else rows.tests)
        setup, filename = rows.setup, f"<{task} tests>"
        if plus:
            from glyph.data import plus as plus_tests
            extra = plus_tests.load_tests(plus_path, row)
            program, filename = "\n".join([program, *extra]), f"<{task} tests + {len(extra)} plus tests>"
    else:
        program, setup, filename = _read_tests(tests), "", str(tests)
    from glyph.grading import MAX_SOLUTION_BYTES

    too_big = len(source) > MAX_SOLUTION_BYTES
    result = (_too_big(solution, size) if too_big else
              run_grade(source, setup, program, filename=filename, limits=limits, semantics=semantics))
    ours = lambda text: _WORKER_NAME.sub(solution.name, text)  # the user's file, by its name
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        colour = "green" if result.passed else "red"
        console.print(f"[bold {colour}]{result.outcome}[/] {escape(str(solution))} in "
                      f"{result.seconds * 1000:.1f} ms ({PATHS.get(result.path, result.path)})", highlight=False)
        for c in result.checks:
            mark = {None: "[dim]·[/]", Outcome.PASS: "[green]✓[/]"}.get(c.outcome, "[red]✗[/]")
            console.print(f"  {mark} {escape(printable(c.source.splitlines()[0][:100]))}", highlight=False)
            if c.detail:  # text model code controls: no markup, no terminal controls
                console.print(f"      {printable(ours(c.detail))}", style="dim", highlight=False, markup=False)
        if result.detail and not any(c.detail for c in result.checks):
            console.print(f"  {printable(ours(result.detail))}", style="dim", highlight=False, markup=False)
    raise typer.Exit(0 if result.passed else 1)
