"""``glyph study ...``: the PREDICT study's experiment, checked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import App, MbppPath, console

app = App(no_args_is_help=True, help="The PREDICT study's experiment, rebuilt and checked.")


@app.command("check")
def study_check(
    folder: Annotated[Path, typer.Argument(metavar="FOLDER", help="a folder `glyph data prepare --profile study` wrote")],
    facts: Annotated[Optional[Path], typer.Option("--facts", help="the study facts file "
                                                  "(default: $GLYPH_STUDY_FACTS)")] = None,
) -> None:
    """Compare FOLDER with the facts of the study's published data: split ids,
    each SFT row's labels and messages digest, each task row's prompt and
    test_code digests. Exit 1 unless all four parts are equal."""
    from glyph.data import study_check as check

    loaded = check.load_facts(facts)
    parts = check.check(folder, loaded)
    for p in parts:
        console.print(p.line(), highlight=False, soft_wrap=True)
    console.print(check.artifacts(folder, loaded).line() + " (byte-identical files; reported, not required)",
                  highlight=False, soft_wrap=True)
    console.print(check.summary_line(parts), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if all(p.ok for p in parts) else 1)


@app.command("replay")
def study_replay(
    sft: Annotated[Path, typer.Argument(metavar="SFT", help="an SFT JSONL file of either profile (the study's, or "
                                             "`glyph data prepare`'s sft/arm_X/...jsonl)")],
    arm: Annotated[Optional[str], typer.Option("--arm", metavar="<a|b>", help="a or b (default: each row's own arm)")] = None,
    mbpp_path: MbppPath = None,
) -> None:
    """Replay each trace's assistant turns through its profile's episode (the profile whose
    opening messages it starts with) against glyph's sandbox and grader; check every observation
    equals the recorded one. A trace that does not carry its tests (glyph's) is graded on the MBPP
    data's. Exit 1 unless every trace reproduces."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from glyph import profiles
    from glyph.cli.common import err, fail
    from glyph.data import mbpp, replay

    if arm not in (None, "a", "b"):
        fail(f"--arm is {arm!r}, not a or b")
    rows = replay.read_rows(sft)
    tasks = None
    results = []
    with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        bar = progress.add_task("replay", total=len(rows))
        for n, row in enumerate(rows):
            found = profiles.of_conversation(row["messages"])
            if found is None:
                r = replay.Replay(n, row.get("task_id"), False, 0, row["messages"][:1],
                                  "no profile's opening messages")
            else:
                if tasks is None and "test_code" not in row:
                    tasks = {t.task_id: t for t in mbpp.load_source(mbpp_path).tasks}
                profile, opened = found
                r = profile.replay_sft(n, row, arm or row.get("arm") or opened, tasks)
            if not r.ok:
                progress.console.print(r.line(), highlight=False, soft_wrap=True, markup=False)
            results.append(r)
            progress.advance(bar)
    console.print(replay.summary_line(results), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)
