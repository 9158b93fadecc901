"""``glyph grade``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import MbppPath, console, fail


def _read_solution(path: Path) -> bytes:
    if not path.exists():
        fail(f"{path}: no such file")
    if not path.is_file():
        fail(f"{path}: not a regular file")
    with path.open("rb") as f:
        from glyph.grading import MAX_SOLUTION_BYTES
        return f.read(MAX_SOLUTION_BYTES + 1)


def grade(
    solution: Annotated[Path, typer.Option("--solution", help="the Python file to grade")],
    task: Annotated[Optional[str], typer.Option("--task", help="an MBPP task id, e.g. mbpp_11")] = None,
    tests: Annotated[Optional[Path], typer.Option("--tests", help="a Python file of hidden tests")] = None,
    challenge: Annotated[bool, typer.Option(help="with --task: grade MBPP's challenge tests")] = False,
    plus: Annotated[bool, typer.Option("--plus", help="with --task: the visible tests, then the task's plus "
                                                      "tests (`glyph data plus`)")] = False,
    plus_path: Annotated[Optional[Path], typer.Option("--plus-path", help="folder of plus tests (default: "
                                                      "$GLYPH_PLUS_PATH, else artifacts/plus)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the grade as JSON")] = False,
    mbpp_path: MbppPath = None,
) -> None:
    """Grade a solution in the sandbox against hidden tests."""
    from rich.markup import escape

    from glyph.grading import grade as run_grade
    from glyph.outcomes import Outcome
    from glyph.text import printable

    if (task is None) == (tests is None):
        fail("give exactly one of --task or --tests")
    if plus and (task is None or challenge):
        fail("--plus goes with --task, without --challenge")
    source = _read_solution(solution)
    if task is not None:
        from glyph.data import mbpp
        row = mbpp.get_task(task, mbpp_path)
        if challenge and not row.challenge_test_list:
            fail(f"{task} has no challenge tests")
        setup, program, filename = row.test_setup_code, row.tests(challenge), f"<{task} tests>"
        if plus:
            from glyph.data import plus as plus_tests
            extra = plus_tests.load_tests(plus_path, row)
            program, filename = "\n".join([program, *extra]), f"<{task} tests + {len(extra)} plus tests>"
    else:
        try:
            program = tests.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # an unreadable --tests file: one line naming it
            fail(f"{tests}: cannot read the tests: {exc}")
        setup, filename = "", str(tests)
    result = run_grade(source, setup, program, filename=filename)
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        colour = "green" if result.passed else "red"
        console.print(f"[bold {colour}]{result.outcome}[/] in {result.seconds * 1000:.1f} ms"
                      f" ({result.path} path)", highlight=False)
        for c in result.checks:
            mark = {None: "[dim]·[/]", Outcome.PASS: "[green]✓[/]"}.get(c.outcome, "[red]✗[/]")
            console.print(f"  {mark} {escape(printable(c.source.splitlines()[0][:100]))}", highlight=False)
            if c.detail:  # text model code controls: no markup, no terminal controls
                console.print(f"      {printable(c.detail)}", style="dim", highlight=False, markup=False)
        if result.detail and not any(c.detail for c in result.checks):
            console.print(f"  {printable(result.detail)}", style="dim", highlight=False, markup=False)
    raise typer.Exit(0 if result.passed else 1)
