"""``glyph study ...``: the PREDICT study's experiment, checked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import App, console

app = App(no_args_is_help=True, help="The PREDICT study's experiment, rebuilt and checked.")


@app.command("check")
def study_check(
    folder: Annotated[Path, typer.Argument(help="a folder `glyph data prepare --profile study` wrote")],
    facts: Annotated[Optional[Path], typer.Option("--facts", help="the study facts file "
                                                  "(default: $GLYPH_STUDY_FACTS)")] = None,
) -> None:
    """Compare FOLDER with the facts of the study's published data: split ids,
    each SFT row's labels and messages digest, each task row's prompt and
    test_code digests. Exit 1 unless all four parts are equal."""
    from glyph.data import study_check as check

    parts = check.check(folder, facts)
    for p in parts:
        console.print(p.line(), highlight=False, soft_wrap=True)
    console.print(check.artifacts(folder, facts).line() + " (byte-identical files; reported, not required)",
                  highlight=False, soft_wrap=True)
    console.print(check.summary_line(parts), highlight=False, soft_wrap=True)
    raise typer.Exit(0 if all(p.ok for p in parts) else 1)
