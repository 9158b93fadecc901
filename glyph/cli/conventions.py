"""``glyph conventions ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import App, err, fail

app = App(no_args_is_help=True, help="The conventions tasks (glyph-conventions).")


@app.command("validate")
def conventions_validate(
    tasks: Annotated[Optional[Path], typer.Option(
        "--tasks", help="a conventions JSONL file (default: glyph's own data file)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Grade every row's reference_broken (must fail) and reference_fixed (must
    pass) with glyph's grader. One `FILE:LINE: why` per bad row, then a table.
    Exit 0 when every row is good, 1 otherwise, 2 when the file is unreadable."""
    import json
    import time
    from collections import Counter

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from glyph.data import conventions

    path = tasks or conventions.DATA_FILE
    try:
        path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # say that the file itself is unreadable
        fail(f"{path}: cannot read ({exc})")
    located, read_errors = conventions.read_tasks_located(path)

    def line_of(text: str) -> int:  # read_tasks' lines start with "FILE:LINE:"
        head = text[len(str(path)) + 1:].split(":", 1)[0]
        return int(head) if head.isdigit() else 0

    problems = [(line_of(e), e) for e in read_errors]
    results = []
    start = time.perf_counter()
    with Progress(TextColumn("validating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=err, transient=True,
                  disable=not located) as progress:
        bar = progress.add_task("", total=len(located))
        for line, task in located:
            progress.update(bar, description=task.id)
            v = conventions.validate_task(task)
            results.append((line, v))
            if not v.ok:
                problems.append((line, f"{path}:{line}: {task.id}: {v.problem()}"))
            progress.advance(bar)
    seconds = time.perf_counter() - start
    problems.sort(key=lambda p: p[0])

    modes: dict[str, Counter] = {}
    for _, v in results:
        c = modes.setdefault(v.task.mode, Counter())
        c[v.task.split] += 1
        c["broken_failing"] += bool(v.broken) and v.broken != "PASS" and not v.invalid
        c["fixed_passing"] += v.fixed == "PASS" and not v.invalid
    n = len(results)
    broken_failing = sum(c["broken_failing"] for c in modes.values())
    fixed_passing = sum(c["fixed_passing"] for c in modes.values())

    def covered(c: Counter) -> bool:
        return c["train"] >= 1 and c["holdout"] >= 2

    if as_json:
        print(json.dumps({
            "file": str(path), "ok": not problems, "tasks": n, "modes": len(modes),
            "broken_failing": broken_failing, "fixed_passing": fixed_passing, "bad_rows": len(problems),
            "seconds": round(seconds, 3), "problems": [p for _, p in problems],
            "per_mode": {m: {"train": c["train"], "holdout": c["holdout"], "covered": covered(c),
                             "broken_failing": c["broken_failing"], "fixed_passing": c["fixed_passing"]}
                         for m, c in modes.items()},
            "rows": [{"id": v.task.id, "line": line, "mode": v.task.mode, "split": v.task.split,
                      "broken": v.broken, "fixed": v.fixed, "ok": v.ok, "problem": v.problem()}
                     for line, v in results],
        }, indent=2))
    else:
        out = Console(highlight=False, soft_wrap=True)
        for _, p in problems:
            out.print(p, markup=False)
        table = Table(title=f"{path.name}: {n} tasks, {len(modes)} modes, graded in {seconds:.1f} s",
                      caption="coverage: ok when a mode has >= 1 train and >= 2 holdout tasks")
        table.add_column("mode", no_wrap=True)
        for col in ("train", "holdout", "coverage", "broken fail", "fixed pass"):
            table.add_column(col, justify="right", no_wrap=True)
        for m, c in sorted(modes.items()):
            total = c["train"] + c["holdout"]
            table.add_row(m or "(no mode)", str(c["train"]), str(c["holdout"]),
                          "[green]ok[/]" if covered(c) else "[yellow]short[/]",
                          f"{c['broken_failing']}/{total}", f"{c['fixed_passing']}/{total}")
        table.add_section()
        table.add_row("all", str(sum(c["train"] for c in modes.values())),
                      str(sum(c["holdout"] for c in modes.values())),
                      f"{sum(map(covered, modes.values()))}/{len(modes)} modes",
                      f"{broken_failing}/{n}", f"{fixed_passing}/{n}")
        out.print(table)
        colour, plural = ("red" if problems else "green"), ("" if len(problems) == 1 else "s")
        out.print(f"[{colour}]{len(problems)} bad row{plural}[/]: {n} tasks graded, "
                  f"{broken_failing}/{n} broken references fail, {fixed_passing}/{n} fixed references pass")
    raise typer.Exit(1 if problems else 0)
