"""``glyph report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import console, err, fail

FORMAT_ALIASES = {"md": "markdown"}
"""``--format md``: the file ``--out`` writes is ``report.md``."""


def report(
    runs: Annotated[list[Path], typer.Argument(help="eval run directories: vf-eval / eval output (one run, or a folder "
                                                    "of runs), or a PRIME-RL output directory (its eval rollouts)",
                                               metavar="RUN_DIR", show_default=False)],
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="arm=a|b,seed=S,ckpt=C,echo=on|off for the RUN_DIR in the same position (once per "
                        "RUN_DIR, '' for none; or once for all); overrides what the runs record; echo (trained "
                        "with ECHO's observation CE) makes the four-cell tables")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="write report.json, report.md and report.html here")] = None,
    fmt: Annotated[str, typer.Option("--format", metavar="<table|markdown|md|json|none>",
                                     help="what to print: table, markdown (or md, as report.md), json or "
                                          "none")
                   ] = "table",
    k: Annotated[str, typer.Option("--pass-at", help="pass@k for these k, comma-separated (default: 1, 2, 5, "
                                                     "10, ... up to the most samples a task has)")] = "",
    k_old: Annotated[str, typer.Option("--k", hidden=True, help="the former --pass-at")] = "",
    baseline: Annotated[str, typer.Option(help="the checkpoint the SFT-vs-RL comparisons start from")] = "sft",
    resamples: Annotated[int, typer.Option(help="bootstrap resamples")] = 2000,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    strict: Annotated[bool, typer.Option("--strict", help="exit 1 if any rollout errored, timed out or was tampered")] = False,
    convention: Annotated[str, typer.Option(metavar="<study|glyph>", help="the REVISE split's count of errored, timed-out or traceless "
                                                 "rollouts: study (in never revised, as failures: the study's "
                                                 "409 + 91 = 500) or glyph (apart)")] = "study",
) -> None:
    """The study's tables (pass@k, first patch and recovery, REVISE split, gate, tool calls, confusion, paired
    tests) with 95% intervals; each rollout's metrics by its protocol profile's definitions (study or glyph)."""
    from rich.markup import escape

    from glyph.report import Options, build, load, parse_label, write
    from glyph.report.tables import markdown, tables
    from glyph.report.terminal import render

    k = k or k_old  # `--k` was this option's name; `--K` is the flywheel's rollouts per task
    fmt = FORMAT_ALIASES.get(fmt, fmt)
    if fmt not in ("table", "markdown", "json", "none"):
        fail(f"--format {fmt}: expected table, markdown (or md), json or none")
    try:
        ks = tuple(sorted({int(x) for x in k.split(",") if x.strip()})) or None
    except ValueError:  # not integers: the same message as for non-positive ones
        ks = (0,)
    if ks is not None and min(ks) < 1:
        fail(f"--pass-at {k}: expected positive integers, e.g. 1,5,10")
    from glyph.report.analysis import CONVENTIONS

    if convention not in CONVENTIONS:
        fail(f"--convention {convention}: expected {' or '.join(CONVENTIONS)}")
    if resamples < 100:
        fail(f"--resamples {resamples}: use at least 100")
    specs = label or []
    if len(specs) not in (0, 1, len(runs)):
        fail(f"{len(specs)} --label for {len(runs)} RUN_DIR: give one per RUN_DIR ('' for none), "
             f"or one for all")
    labels = [parse_label(s) for s in (specs * len(runs) if len(specs) == 1 else specs)] or None
    with err.status(f"reading {len(runs)} run folder(s)") as status:  # stderr, and only on a terminal
        found, rollouts, notes = load(runs, labels)
        status.update(f"building the report: {len(rollouts)} rollouts, {resamples} bootstrap resamples")
        doc = build(found, rollouts, Options(ks=ks, baseline=baseline, resamples=resamples, seed=seed,
                                             convention=convention), notes)
    tabs = tables(doc)
    if fmt == "table":
        for t in tabs:
            console.print(render(t))  # laid out for the terminal's width: no cell wraps, no header cut
        for note in doc["notes"]:
            console.print(f"[dim]note:[/] {note}", highlight=False)
    elif fmt == "markdown":
        print(markdown(doc, tabs))
    elif fmt == "json":
        print(json.dumps(doc, indent=1))
    if out is not None:
        with err.status(f"writing report.json, report.md and report.html (the figures) to {escape(str(out))}"):
            paths = write(doc, out)
        err.print("wrote " + ", ".join(str(p) for p in paths.values()), highlight=False, soft_wrap=True)
    if strict and doc["incidents"]:
        err.print(f"[red]--strict:[/red] {len(doc['incidents'])} rollout(s) errored, timed out or were "
                  f"tampered "
                  f"(listed under Incidents)", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
