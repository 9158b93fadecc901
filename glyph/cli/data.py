"""``glyph data ...``."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from glyph.cli.common import App, MbppPath, console, err, fail
from glyph.data import SEED

app = App(no_args_is_help=True, help="Task data.")

Out = Annotated[Path, typer.Option("--out", help="folder of the generated data")]
Jobs = Annotated[int | None, typer.Option(min=1, show_default=False,
                                             help="tasks in parallel (default: 2, or fewer CPUs)")]


@app.command("list")
def data_list(mbpp_path: MbppPath = None) -> None:
    """List the MBPP task ids."""
    from glyph.data import mbpp

    for task_id, t in mbpp.load(mbpp_path).items():
        print(f"{task_id}\t{t.text[:80]}")


@app.command("check-gold")
def check_gold(
    mbpp_path: MbppPath = None,
    jobs: Annotated[int | None, typer.Option(min=1, show_default=False,
                                                help="gradings in parallel (default: one per CPU)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the counts and every failure as JSON, "
                                                         "no progress bar")] = False,
) -> None:
    """Grade every MBPP reference solution (tests, and challenge tests
    separately) and print the counts per outcome."""
    from rich.table import Table

    from glyph.data.gold import check_gold as run_check
    from glyph.outcomes import Outcome

    report = run_check(mbpp_path, jobs=jobs or None, progress=not as_json)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        table = Table(title="MBPP reference solutions under glyph's grader")
        table.add_column("outcome")
        table.add_column("tests", justify="right")
        table.add_column("challenge tests", justify="right")
        for o in Outcome:
            table.add_row(o.value, *[str(report[k]["counts"].get(o.value, 0)) for k in ("tests", "challenge")])
        table.add_row("CPU-side seconds", *[f"{report[k]['seconds']:.1f}" for k in ("tests", "challenge")])
        console.print(table)
        for kind in ("tests", "challenge"):
            for f in report[kind]["failures"]:
                console.print(f"[red]{kind} {f['task']}[/] {f['outcome']}: {f['detail']}", highlight=False)
    ok = all(not report[k]["failures"] for k in ("tests", "challenge"))
    raise typer.Exit(0 if ok else 1)


class Profile(str, Enum):
    glyph = "glyph"
    study = "study"


class Key(str, Enum):
    study = "study"
    glyph = "glyph"


@app.command("prepare")
def data_prepare(out: Out = Path("artifacts"), seed: Annotated[int, typer.Option(help="split and trace seed")] = SEED,
                 mbpp_path: MbppPath = None,
                 plus: Annotated[Optional[bool], typer.Option(
                     "--plus/--no-plus", help="also generate the plus tests (resumable; as `glyph data plus`); "
                     "glyph profile only, where it defaults to on")] = None,
                 jobs: Jobs = None,
                 profile: Annotated[Profile, typer.Option(help="study: the PREDICT study's files as it wrote "
                                                          "them (check with `glyph study check`); glyph: "
                                                          "glyph's layout and traces (tasks/, sft/, plus/)")]
                 = Profile.study,
                 split_key: Annotated[Key, typer.Option(help="study profile: the split draw, the study's SHA-256 "
                                                        "order or glyph's random.Random(seed)")] = Key.study,
                 recovery: Annotated[Key, typer.Option(help="study profile: the recovery mutations, the study's "
                                                       "(first failing in source order, any non-PASS) or glyph's "
                                                       "(seeded swaps, TIMEOUT/OTHER passed over)")] = Key.study,
                 ) -> None:
    """Build the splits, task rows, SFT traces (and, glyph profile, plus tests) and manifest
    (official MBPP download, or --mbpp-path / $GLYPH_MBPP_PATH offline)."""
    from glyph.data.prepare import prepare

    if profile is Profile.study:
        if plus is not None:
            fail("--plus/--no-plus: the study profile writes no plus tests (`glyph data plus` makes them)")
        _prepare_study(out, seed, mbpp_path, split_key.value, recovery.value)
        return
    if split_key is not Key.study or recovery is not Key.study:
        fail("--split-key/--recovery: switches of the study profile (the glyph profile has glyph's)")
    plus = True if plus is None else plus

    m = prepare(out, mbpp_path, seed, plus_tasks=plus, jobs=jobs or None)
    table = _split_table(f"glyph data prepare → {out} ({m['seconds']} s)", m["counts"])
    for arm, kinds in m["sft"]["kinds"].items():
        for kind, n in kinds.items():
            table.add_row(f"arm {arm} {kind} traces", str(n))
    notes = m["sft"]["notes"]
    table.add_row("tasks left out (too long)", str(sum(1 for n in notes if n["kept"] is None)))
    table.add_row("tasks passed over for recovery (no failing mutation)", str(sum(1 for n in notes if n["kept"])))
    r = m["sft"]["renderer"]
    for arm, longest in m["sft"]["longest"].items():
        table.add_row(f"arm {arm} longest trace (tokens, {r['name']} renderer, limit {m['sft']['max_tokens']})",
                      f"{longest['tokens']} (task {longest['task_id']})")
    if "plus" in m:
        _plus_rows(table, m["plus"])
    console.print(table)


def _split_table(title: str, counts: dict[str, int]):
    """A what/count table, opening with the tasks of each split."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("what")
    table.add_column("count", justify="right")
    for split, n in counts.items():
        table.add_row(f"{split} tasks", str(n))
    return table


def _prepare_study(out: Path, seed: int, mbpp_path, split_key: str, recovery: str) -> None:
    from glyph.data import study

    m = study.prepare(out, mbpp_path, seed, split_key=split_key, recovery=recovery)
    switched = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in m["switches"].items()
                         if v != Key.study.value)  # each switch set away from its default
    title = f"glyph data prepare --profile study{' (' + switched + ')' if switched else ''} → {out}"
    table = _split_table(f"{title} ({m['seconds']} s)", m["counts"])
    for kind, n in m["sft"]["composition"].items():
        table.add_row(f"SFT traces per arm: {kind}", str(n))
    for outcome, n in m["sft"]["recovery_outcomes"].items():
        table.add_row(f"recovery candidates: {outcome}", str(n))
    s = m["sft"]
    table.add_row("SFT tasks visited for recoveries", str(s["tasks_visited"]))
    table.add_row(f"mutations graded ({s['test_limit_s']} s limit, seconds)", f"{s['gradings']} ({s['grading_seconds']})")
    table.add_row(f"recoveries passed over (over {s['max_tokens']} tokens)", str(len(s["too_long"])))
    console.print(table)


def _plus_rows(table, p: dict) -> None:
    table.add_row("plus tests: tasks (generated now / reused)", f"{p['tasks']} ({p['generated']} / {p['reused']})")
    table.add_row("plus tests: tasks with at least one", f"{p['with_tests']} ({p['with_tests'] / max(p['tasks'], 1):.1%})")
    table.add_row(f"plus tests: kept (mean per task, at most {p['max_kept']})", f"{p['tests']} ({p['mean_kept']})")


@app.command("plus")
def data_plus(out: Out = Path("artifacts"), mbpp_path: MbppPath = None,
              seed: Annotated[Optional[int], typer.Option(help="candidate seed (default: the prepared "
                                                               f"folder's, else {SEED})")] = None,
              task: Annotated[Optional[list[str]], typer.Option("--task", help="only these task ids "
                                                                "(repeatable)")] = None,
              jobs: Jobs = None) -> None:
    """Generate the plus tests (differential tests from each reference
    solution) into OUT/plus, resumably; on a prepared folder, also into its
    task rows and manifest."""
    from rich.table import Table

    from glyph.data.prepare import add_plus

    p = add_plus(out, mbpp_path, seed, task, jobs or None)
    table = Table(title=f"glyph data plus → {out / 'plus'} ({p['seconds']} s)")
    table.add_column("what")
    table.add_column("count", justify="right")
    _plus_rows(table, p)
    console.print(table)


@app.command("validate")
def data_validate(out: Out = Path("artifacts"), mbpp_path: MbppPath = None) -> None:
    """Re-check everything prepare wrote: hashes, splits, gold solutions, trace replays."""
    from glyph.data.prepare import ValidationFailed, validate

    _refuse_study_folder(out, "validate")
    try:
        summary = validate(out, mbpp_path)
    except ValidationFailed as exc:  # a list of problems, exit 1: not a one-line error
        for p in exc.problems[:50]:
            err.print(f"[red]✗[/] {p}", highlight=False, soft_wrap=True)
        if len(exc.problems) > 50:
            err.print(f"... and {len(exc.problems) - 50} more", soft_wrap=True)
        raise typer.Exit(1)
    longest = ", ".join(f"arm {arm} {v['tokens']} (task {v['task_id']})" for arm, v in summary["longest"].items())
    plus = summary["plus"]
    console.print(f"[green]valid:[/] {summary['tasks']} tasks, {summary['traces']} traces replayed and "
                  f"measured; longest trace in tokens: {longest}; {plus['tests']} plus tests of "
                  f"{plus['tasks']} tasks, every reference passing them", highlight=False)


def _refuse_study_folder(out: Path, command: str) -> None:
    """A folder written by ``glyph data prepare`` under another profile than glyph's has that
    profile's layout, which ``glyph data {command}`` does not read: one line saying what does."""
    from glyph.data.prepare import glyph_layout

    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return
    if isinstance(manifest, dict) and not glyph_layout(manifest):
        fail(f"{out} holds the {manifest['profile']} profile's data (`glyph data prepare`'s default); "
             f"`glyph data {command}` reads the glyph profile's: check it with `glyph study check {out}` and "
             f"`glyph study replay {out}/sft/arm_a/train.jsonl`, or prepare with --profile glyph")
