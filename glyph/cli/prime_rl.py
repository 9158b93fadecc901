"""``glyph prime-rl ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from glyph.cli.common import App, console, err, fail

app = App(no_args_is_help=True, help="PRIME-RL at glyph's pin, and glyph's patches to it.")


@app.command("check")
def prime_rl_check(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="a PRIME-RL checkout (or source tree)")],
    apply: Annotated[bool, typer.Option("--apply", help="apply the patches not yet applied")] = False,
) -> None:
    """Whether a PRIME-RL checkout is at glyph's pin and glyph's patches apply (exit 0 when ready)."""
    from rich.table import Table

    from glyph.predict import pin

    try:
        report = pin.apply_patches(path) if apply else pin.check(path)
    except FileNotFoundError as exc:  # glyph's own pins or patches are missing: not a named error
        fail(str(exc))
    if report.commit is not None:
        where = f"commit {report.commit}" + ("" if report.at_pin else f" (the pin is {pin.PRIME_RL_COMMIT})")
    else:
        where = "no git metadata; " + ("its patched files match the pin's" if report.files_at_pin
                                       else "its files differ from the pin's")
    console.print(f"PRIME-RL at {report.root}: {where}", highlight=False)
    table = Table("patch", "state")
    for state in report.patches:
        table.add_row(state.name, state.state + (f": {state.detail}" if state.detail else ""))
    console.print(table)
    if not report.at_pin:
        err.print(f"[yellow]warning:[/yellow] glyph is tested against PRIME-RL {pin.PRIME_RL_COMMIT} only")
    if not report.ok:
        raise typer.Exit(1)
    if not report.applied:
        console.print("the patches apply: run again with --apply")
        raise typer.Exit(1)
    console.print(f"ready: `\\[orchestrator.algo] type = \"predict\"` once glyph is installed into PRIME-RL's "
                  f"environment (its verifiers must stay {pin.VERIFIERS_VERSION})", highlight=False)
