"""The ``glyph`` command: the Typer app, with each module's commands and groups
registered on it. Command modules never import this one."""

from __future__ import annotations

import sys

from glyph.cli import conventions, data, flywheel, grade, prime_rl, report, run, sandbox, study
from glyph.cli.common import App

app = App(add_completion=False, no_args_is_help=True,
          help="glyph: sandboxed grading, the glyph-mbpp environment, PREDICT and the flywheel.")
app.command()(grade.grade)
app.command()(run.demo)
app.command()(run.serve)
app.command()(report.report)
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(data.app, name="data")
app.add_typer(prime_rl.app, name="prime-rl")
app.add_typer(conventions.app, name="conventions")
app.add_typer(flywheel.app, name="flywheel")
app.add_typer(study.app, name="study")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
