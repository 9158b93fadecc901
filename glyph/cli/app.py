"""The ``glyph`` command: the Typer app, with each module's commands and groups
registered on it. Command modules never import this one."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from glyph.cli import conventions, data, flywheel, grade, prime_rl, report, run, sandbox, study
from glyph.cli.common import App

app = App(add_completion=False, no_args_is_help=True,
          help="glyph: sandboxed grading, the glyph-mbpp environment, PREDICT and the flywheel.")


def _version(value: bool) -> None:
    """glyph's distribution and version, and the verifiers it runs with (installed metadata only)."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        def of(dist: str) -> str:
            try:
                return version(dist)
            except PackageNotFoundError:
                return "not installed"

        print(f"glyph-rl {of('glyph-rl')} (verifiers {of('verifiers')})")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print glyph's version (and verifiers') and exit")] = False) -> None:
    """glyph: sandboxed grading, the glyph-mbpp environment, PREDICT and the flywheel."""


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
