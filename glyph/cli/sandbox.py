"""``glyph sandbox ...``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from glyph.cli.common import App, console

app = App(no_args_is_help=True, help="The sandbox that runs model-written code.")


@app.command("info")
def sandbox_info(as_json: Annotated[bool, typer.Option("--json", help="print the mode, each protection and "
                                                                     "the failed attempts as JSON")] = False
                 ) -> None:
    """Which sandbox mode starts on this machine, and each protection: on or
    off, how, and what off means; then, for every mode, what separates
    concurrent runs, what a later run finds of an earlier one, and what runs
    still share (and why no verdict rides on it). The mode
    is $GLYPH_SANDBOX_MODE, else auto (the strongest that starts; never
    bare unless asked for)."""
    from rich.table import Table

    from glyph.sandbox import get_sandbox
    from glyph.sandbox.runtime.isolation import NO_CARRYOVER, NO_VERDICT, RUN_SEPARATION, STILL_SHARED

    info = get_sandbox().protections()
    if as_json:
        print(json.dumps(info.to_json(), indent=2))
        return
    protections = info.to_json()["protections"]
    any_off = not all(p["on"] for p in protections.values())
    table = Table(title=f"glyph sandbox: {info.mode} mode")
    table.add_column("protection")
    table.add_column("on")
    table.add_column("how / why not")
    if any_off:
        table.add_column("what off means")
    for name, p in protections.items():
        cells = [name, "[green]yes[/]" if p["on"] else "[red]no[/]", p["how"]]
        table.add_row(*cells, *([] if not any_off else ["" if p["on"] else p["if_off"]]))
    console.print(table)
    modes = Table(title="what separates concurrent runs, what a later run finds, and what runs still share, "
                        "per mode", caption=NO_VERDICT)
    modes.add_column("mode")
    modes.add_column("concurrent runs (run_separation)")
    modes.add_column("a later run (no_carryover)")
    modes.add_column("still shared (no verdict rides on it)")
    for mode, separation in RUN_SEPARATION.items():
        modes.add_row(f"[bold]{mode}[/]" if mode == info.mode else mode, separation, NO_CARRYOVER[mode],
                      STILL_SHARED[mode])
    console.print(modes)
    for line in info.attempts:
        console.print(f"[yellow]not available:[/] {line}", highlight=False)
