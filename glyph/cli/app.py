"""The ``glyph`` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from glyph.outcomes import Outcome
from glyph.data.mbpp import DataError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="glyph: sandboxed grading, the glyph-mbpp environment, PREDICT and the flywheel.")
sandbox_app = typer.Typer(no_args_is_help=True, help="The sandbox that runs model-written code.")
data_app = typer.Typer(no_args_is_help=True, help="Task data.")
prime_rl_app = typer.Typer(no_args_is_help=True, help="PRIME-RL at glyph's pin, and glyph's patches to it.")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(data_app, name="data")
app.add_typer(prime_rl_app, name="prime-rl")
from glyph.cli.flywheel import conventions_app, flywheel_app  # noqa: E402 (light: commands import lazily)
app.add_typer(conventions_app, name="conventions")
app.add_typer(flywheel_app, name="flywheel")

console = Console()
err = Console(stderr=True)

MbppPath = Annotated[Optional[Path], typer.Option("--mbpp-path", help="MBPP JSONL (default: $GLYPH_MBPP_PATH)")]


def fail(message: str) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _read_solution(path: Path) -> bytes:
    if not path.exists():
        fail(f"{path}: no such file")
    if not path.is_file():
        fail(f"{path}: not a regular file")
    with path.open("rb") as f:
        from glyph.grading import MAX_SOLUTION_BYTES
        return f.read(MAX_SOLUTION_BYTES + 1)


@app.command()
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
    from glyph.grading import InvalidTests
    from glyph.grading import grade as run_grade

    if (task is None) == (tests is None):
        fail("give exactly one of --task or --tests")
    if plus and (task is None or challenge):
        fail("--plus goes with --task, without --challenge")
    source = _read_solution(solution)
    if task is not None:
        from glyph.data import mbpp
        try:
            row = mbpp.get_task(task, mbpp_path)
        except DataError as exc:
            fail(str(exc))
        if challenge and not row.challenge_test_list:
            fail(f"{task} has no challenge tests")
        setup, program, filename = row.test_setup_code, row.tests(challenge), f"<{task} tests>"
        if plus:
            from glyph.data import plus as plus_tests
            try:
                extra = plus_tests.load_tests(plus_path, row)
            except DataError as exc:
                fail(str(exc))
            program, filename = "\n".join([program, *extra]), f"<{task} tests + {len(extra)} plus tests>"
    else:
        try:
            program = tests.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"{tests}: cannot read the tests: {exc}")
        setup, filename = "", str(tests)
    from glyph.sandbox import SandboxUnavailable
    try:
        result = run_grade(source, setup, program, filename=filename)
    except (InvalidTests, SandboxUnavailable) as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        colour = "green" if result.passed else "red"
        console.print(f"[bold {colour}]{result.outcome}[/] in {result.seconds * 1000:.1f} ms"
                      f" ({result.path} path)", highlight=False)
        for c in result.checks:
            mark = {None: "[dim]·[/]", Outcome.PASS: "[green]✓[/]"}.get(c.outcome, "[red]✗[/]")
            console.print(f"  {mark} {c.source.splitlines()[0][:100]}", highlight=False)
            if c.detail:
                console.print(f"      {c.detail}", style="dim", highlight=False)
        if result.detail and not any(c.detail for c in result.checks):
            console.print(f"  {result.detail}", style="dim", highlight=False)
    raise typer.Exit(0 if result.passed else 1)


@sandbox_app.command("info")
def sandbox_info(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Which sandbox mode starts on this machine, and each protection: on or
    off, how, and what off means. The mode is $GLYPH_SANDBOX_MODE, else auto
    (the strongest that starts; never bare unless asked for)."""
    from glyph.sandbox import SandboxUnavailable, get_sandbox

    try:
        info = get_sandbox().protections()
    except SandboxUnavailable as exc:
        fail(str(exc))
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
    for line in info.attempts:
        console.print(f"[yellow]not available:[/] {line}", highlight=False)


@data_app.command("list")
def data_list(mbpp_path: MbppPath = None) -> None:
    """List the MBPP task ids."""
    from glyph.data import mbpp
    try:
        tasks = mbpp.load(mbpp_path)
    except DataError as exc:
        fail(str(exc))
    for task_id, t in tasks.items():
        print(f"{task_id}\t{t.text[:80]}")


@data_app.command("check-gold")
def check_gold(
    mbpp_path: MbppPath = None,
    jobs: Annotated[int, typer.Option(help="gradings in parallel (default: CPU count)")] = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Grade every MBPP reference solution (tests, and challenge tests
    separately) and print the counts per outcome."""
    from glyph.data.gold import check_gold as run_check

    try:
        report = run_check(mbpp_path, jobs=jobs or None, progress=not as_json)
    except DataError as exc:
        fail(str(exc))
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


Out = Annotated[Path, typer.Option("--out", help="folder of the generated data")]


Jobs = Annotated[int, typer.Option(help="tasks in parallel (default: 2, or fewer CPUs)")]


@data_app.command("prepare")
def data_prepare(out: Out = Path("artifacts"), seed: Annotated[int, typer.Option(help="split and trace seed")] = 42,
                 mbpp_path: MbppPath = None,
                 plus: Annotated[bool, typer.Option("--plus/--no-plus", help="also generate the plus tests "
                                                    "(resumable; as `glyph data plus`)")] = True,
                 jobs: Jobs = 0) -> None:
    """Build the splits, task rows, SFT traces, plus tests and manifest
    (official MBPP download, or --mbpp-path / $GLYPH_MBPP_PATH offline)."""
    from glyph.data.prepare import prepare

    try:
        m = prepare(out, mbpp_path, seed, plus_tasks=plus, jobs=jobs or None)
    except DataError as exc:
        fail(str(exc))
    table = Table(title=f"glyph data prepare → {out} ({m['seconds']} s)")
    table.add_column("what")
    table.add_column("count", justify="right")
    for split, n in m["counts"].items():
        table.add_row(f"{split} tasks", str(n))
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


def _plus_rows(table: Table, p: dict) -> None:
    table.add_row("plus tests: tasks (generated now / reused)", f"{p['tasks']} ({p['generated']} / {p['reused']})")
    table.add_row("plus tests: tasks with at least one", f"{p['with_tests']} ({p['with_tests'] / max(p['tasks'], 1):.1%})")
    table.add_row(f"plus tests: kept (mean per task, at most {p['max_kept']})", f"{p['tests']} ({p['mean_kept']})")


@data_app.command("plus")
def data_plus(out: Out = Path("artifacts"), mbpp_path: MbppPath = None,
              seed: Annotated[Optional[int], typer.Option(help="candidate seed (default: the prepared "
                                                               "folder's, else 42)")] = None,
              task: Annotated[Optional[list[str]], typer.Option("--task", help="only these task ids "
                                                                "(repeatable)")] = None,
              jobs: Jobs = 0) -> None:
    """Generate the plus tests (differential tests from each reference
    solution) into OUT/plus, resumably; on a prepared folder, also into its
    task rows and manifest."""
    from glyph.data.prepare import add_plus

    try:
        p = add_plus(out, mbpp_path, seed, task, jobs or None)
    except DataError as exc:
        fail(str(exc))
    table = Table(title=f"glyph data plus → {out / 'plus'} ({p['seconds']} s)")
    table.add_column("what")
    table.add_column("count", justify="right")
    _plus_rows(table, p)
    console.print(table)


@data_app.command("validate")
def data_validate(out: Out = Path("artifacts"), mbpp_path: MbppPath = None) -> None:
    """Re-check everything prepare wrote: hashes, splits, gold solutions, trace replays."""
    from glyph.data.prepare import ValidationFailed, validate

    try:
        summary = validate(out, mbpp_path)
    except DataError as exc:
        fail(str(exc))
    except ValidationFailed as exc:
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


@app.command()
def demo(
    tasks: Annotated[int, typer.Option(min=1, help="tasks per arm")] = 6,
    attacks: Annotated[bool, typer.Option(help="also grade the red-team solutions directly")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="where the eval runs are kept (default: a new "
                                                               "folder under the system's temp dir)")] = None,
    mbpp_path: MbppPath = None,
) -> None:
    """Run vf-eval glyph-mbpp against the reference policies, both arms, and summarize."""
    from glyph.demo import run_attack_demo, run_env_demo

    try:
        code = run_attack_demo(console) if attacks else 0
        code |= run_env_demo(console, tasks, str(mbpp_path) if mbpp_path else None, out)
    except DataError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command()
def serve(
    policy: Annotated[Optional[str], typer.Option(help="oracle, recover, revise, hack or mix (default: the "
                                                       "request's model name)")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="port on 127.0.0.1 (0: any free one)")] = 8000,
    mbpp_path: MbppPath = None,
) -> None:
    """Serve a reference policy as an OpenAI-compatible endpoint on 127.0.0.1."""
    import time

    from glyph.policies.server import PolicyServer
    from glyph.data import mbpp

    try:
        tasks = {t.id: t for t in mbpp.load_source(mbpp_path).tasks}
    except DataError as exc:
        fail(str(exc))
    try:
        server = PolicyServer(tasks, policy, port).start()
    except ValueError as exc:  # an unknown policy
        fail(f"--policy: {exc}")
    except OSError as exc:  # the port is taken or not ours to bind
        fail(f"--port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror or exc}); pick another, "
             "or 0 for any free one")
    console.print(f"serving {policy or 'the requested model'} at {server.base_url} (Ctrl-C to stop)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="eval run directories: vf-eval / eval output (one run, or a folder "
                                                    "of runs), or a PRIME-RL output directory (its eval rollouts)",
                                               metavar="RUN_DIR", show_default=False)],
    label: Annotated[Optional[list[str]], typer.Option(
        "--label", help="arm=a|b,seed=S,ckpt=C for the RUN_DIR in the same position (once per RUN_DIR, '' for none; "
                        "or once for all); overrides what the runs record")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="write report.json, report.md and report.html here")] = None,
    fmt: Annotated[str, typer.Option("--format", help="what to print: table, markdown, json or none")] = "table",
    k: Annotated[str, typer.Option("--k", help="pass@k for these k, comma-separated (default: 1, 2, 5, 10, "
                                               "... up to the most samples a task has)")] = "",
    baseline: Annotated[str, typer.Option(help="the checkpoint the SFT-vs-RL comparisons start from")] = "sft",
    resamples: Annotated[int, typer.Option(help="bootstrap resamples")] = 2000,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    strict: Annotated[bool, typer.Option(help="exit 1 if any rollout errored, timed out or was tampered")] = False,
) -> None:
    """The study's tables (pass@k, REVISE split, gate, tool calls, confusion, paired tests) with 95% intervals."""
    from glyph.report import Options, ReportError, parse_label, write
    from glyph.report import report as build_report
    from glyph.report.tables import markdown, rich_table, tables

    if fmt not in ("table", "markdown", "json", "none"):
        fail(f"--format {fmt}: expected table, markdown, json or none")
    try:
        ks = tuple(sorted({int(x) for x in k.split(",") if x.strip()})) or None
    except ValueError:
        ks = (0,)
    if ks is not None and min(ks) < 1:
        fail(f"--k {k}: expected positive integers, e.g. 1,5,10")
    if resamples < 100:
        fail(f"--resamples {resamples}: use at least 100")
    specs = label or []
    if len(specs) not in (0, 1, len(runs)):
        fail(f"{len(specs)} --label for {len(runs)} RUN_DIR: give one per RUN_DIR ('' for none), "
             f"or one for all")
    try:
        labels = [parse_label(s) for s in (specs * len(runs) if len(specs) == 1 else specs)] or None
        doc = build_report(runs, labels, Options(ks=ks, baseline=baseline, resamples=resamples, seed=seed))
    except ReportError as exc:
        fail(str(exc))
    tabs = tables(doc)
    if fmt == "table":
        for t in tabs:
            console.print(rich_table(t))
        for note in doc["notes"]:
            console.print(f"[dim]note:[/] {note}", highlight=False)
    elif fmt == "markdown":
        print(markdown(doc, tabs))
    elif fmt == "json":
        print(json.dumps(doc, indent=1))
    if out is not None:
        paths = write(doc, out)
        err.print("wrote " + ", ".join(str(p) for p in paths.values()), highlight=False, soft_wrap=True)
    if strict and doc["incidents"]:
        err.print(f"[red]--strict:[/red] {len(doc['incidents'])} rollout(s) errored, timed out or were "
                  f"tampered "
                  f"(listed under Incidents)", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@prime_rl_app.command("check")
def prime_rl_check(
    path: Annotated[Path, typer.Argument(help="a PRIME-RL checkout (or source tree)")],
    apply: Annotated[bool, typer.Option("--apply", help="apply the patches not yet applied")] = False,
) -> None:
    """Whether a PRIME-RL checkout is at glyph's pin and glyph's patches apply (exit 0 when ready)."""
    from glyph.predict import pin

    try:
        report = pin.apply_patches(path) if apply else pin.check(path)
    except (pin.PatchError, FileNotFoundError) as exc:
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


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
