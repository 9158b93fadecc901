"""``glyph flywheel run | aa | replicate | sweep | import | credit``."""

from __future__ import annotations

import functools
import inspect
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal, Optional, get_args, get_origin

import typer

from glyph.cli.common import App, MbppPath, console, err, fail
from glyph.flywheel.options import RunOptions, flag

app = App(no_args_is_help=True, help="The flywheel benchmark: lessons in context, gated by the noise band.")


# ---------------------------------------------------------------- glyph flywheel run | replicate | sweep

_FwOut = Annotated[Path, typer.Option("--out", help="output directory (an existing one with the same "
                                      "configuration is resumed; a different one is refused)")]
_SHORT_FLAGS = {"K": "-K"}


def _option(name: str, field) -> inspect.Parameter:
    """The typer option of ``RunOptions`` field ``name``: flag (``options.flag``),
    default, help and bounds from the field. A ``Literal`` becomes a ``str`` Enum
    (typer shows its choices; older typers take no ``Literal``)."""
    kind, default = field.annotation, field.default
    if get_origin(kind) is Literal:
        kind = Enum(f"{name}_choice", {v: v for v in get_args(kind)}, type=str)
        default = kind(default)
    bounds = {}
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            bounds["min"] = m.ge
        if getattr(m, "le", None) is not None:
            bounds["max"] = m.le
    flags = [flag(name)] + ([_SHORT_FLAGS[name]] if name in _SHORT_FLAGS else [])
    option = typer.Option(*flags, help=field.description, **bounds)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[kind, option])


def _with_run_options(*declared: str):
    """A typer command whose ``opts: RunOptions`` parameter is one option per
    ``RunOptions`` field (but the fields in ``declared``, which the command
    declares itself), after the command's own parameters: the signature typer
    reads (``inspect.signature(func, eval_str=True)``)."""

    def wrap(func):
        own = inspect.signature(func, eval_str=True)
        generated = [_option(n, f) for n, f in RunOptions.model_fields.items() if n not in declared]
        params = [p for p in own.parameters.values() if p.name != "opts"] + generated

        @functools.wraps(func)
        def command(**kw):
            values = {p.name: kw.pop(p.name) for p in generated}
            values = {n: v.value if isinstance(v, Enum) else v for n, v in values.items()}
            return func(opts=RunOptions(**values), **kw)

        command.__signature__ = own.replace(parameters=params)
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": own.return_annotation}
        del command.__wrapped__  # typer must read the signature above, not func's
        return command

    return wrap


def _run(opts: RunOptions, out: Path):
    """One run; Ctrl-C says how to resume it."""
    from glyph.flywheel.runner import run_one

    try:
        return run_one(opts, out, console=err)
    except KeyboardInterrupt:  # the finished rollouts are stored: say so, and how to go on
        err.print(f"[yellow]interrupted[/]: finished rollouts are stored in {out}; rerun the same "
                  "command to resume")
        raise typer.Exit(130)


def _fw_timing(doc: dict, fw) -> None:
    err.print(f"{fw.calls} agent call(s), {fw.reused} stored rollout(s) reused, {fw.grades.gradings} "
              f"grading(s), {fw.seconds:.1f} s; excluded rollouts: {doc['excluded']['rollouts']}")


@app.command("run")
@_with_run_options()
def flywheel_run(out: _FwOut, opts: RunOptions) -> None:
    """One flywheel run: baseline, then lesson rounds gated on the holdout.

    Baseline on the holdout, then rounds of: roll out the train tasks, cluster
    the failures, write one lesson, re-roll the holdout with it, keep it if the
    gate passes. Writes OUT/run.json, curve.png, curve.html, rollouts.jsonl."""
    from glyph.flywheel.outputs import gates_table, summary_table

    doc, fw = _run(opts, out)
    console.print(summary_table(doc))
    console.print(gates_table(doc))
    err.print(f"wrote {out / 'run.json'}, {out / 'curve.png'}, {out / 'curve.html'}")
    _fw_timing(doc, fw)


@app.command("aa")
@_with_run_options("gate", "aa_runs")
def flywheel_aa(
    out: _FwOut, opts: RunOptions,
    runs: Annotated[int, typer.Option("--runs", min=2, help="no-lesson re-rolls of the holdout (R; the "
                                      "band's spread between seeds falls from 28% at R=8 to 10% at R=50)")] = 20,
) -> None:
    """The measured noise floor: an A/A test on the sealed holdout.

    Re-rolls the holdout RUNS times with no lesson, and reports the 95%
    quantile of |rate_i - rate_j| over every pair of re-rolls beside the
    formula band 1.96*sqrt(0.25/(n*K)) and the two-rate band (sqrt(2)
    wider). Writes OUT/aa.json and aa.png; OUT is resumable, and `run --gate
    aa --aa-runs RUNS --out OUT` with the same options reuses its re-rolls."""
    from glyph.data import conventions
    from glyph.flywheel.aggregate import write_json
    from glyph.flywheel.loop import Flywheel
    from glyph.flywheel.noise import aa_png, aa_table
    from glyph.flywheel.runner import make_agent, make_writer

    opts = opts.replace(gate="aa", aa_runs=runs)
    config = opts.config()
    tasks = conventions.load_tasks(config.tasks)
    fw = Flywheel(config, out, make_agent(opts, config, tasks), make_writer(opts, config), tasks=tasks,
                  concurrency=opts.concurrency, progress=not opts.quiet, console=err,
                  retry_excluded=opts.retry_excluded)
    try:
        doc = fw.measure_aa(runs)
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: finished rollouts are stored in {out}; rerun the same command to resume")
        raise typer.Exit(130)
    write_json(out / "aa.json", doc)
    (out / "aa.png").write_bytes(aa_png(doc))
    console.print(aa_table(doc))
    err.print(f"wrote {out / 'aa.json'}, {out / 'aa.png'}; {fw.calls} agent call(s), {fw.reused} stored "
              f"rollout(s) reused, {fw.seconds:.1f} s; excluded rollouts: {doc['excluded']['rollouts']}")


@app.command("replicate")
@_with_run_options()
def flywheel_replicate(
    out: _FwOut, opts: RunOptions,
    runs: Annotated[int, typer.Option("--runs", min=1, help="runs, with seeds seed..seed+runs-1")] = 4,
) -> None:
    """Independent runs of one configuration, and how they compare.

    RUNS runs (OUT/run-<i>, each resumable), then OUT/replicate.json,
    replicate.png and replicate.html: per-run baseline/final/gain with their
    95% intervals and bands, min/max gain, how many climbed (final >
    baseline + band), keep rate per lesson mode; the curves overlaid, each
    with its per-round interval."""
    import time

    from glyph.flywheel import aggregate

    docs, dirs, t0 = [], [], time.perf_counter()
    for i in range(runs):
        err.rule(f"run-{i}: {i + 1} of {runs}, seed {opts.seed + i}")
        doc, fw = _run(opts.replace(seed=opts.seed + i), out / f"run-{i}")
        _fw_timing(doc, fw)
        docs.append(doc)
        dirs.append(f"run-{i}")
    rep = aggregate.replicate_doc(docs, dirs)
    aggregate.write_json(out / "replicate.json", rep)
    image = aggregate.replicate_png(docs)
    (out / "replicate.png").write_bytes(image)
    (out / "replicate.html").write_text(aggregate.replicate_html(rep, image), encoding="utf-8")
    g = rep["gain_pp"]
    console.print(aggregate.runs_table(
        f"replicate: {rep['climbed']}/{runs} climbed; gain {g['min']:+.1f} to {g['max']:+.1f} pp",
        rep["runs"]))
    err.print(f"wrote {out / 'replicate.json'}, {out / 'replicate.png'}, {out / 'replicate.html'} in "
              f"{time.perf_counter() - t0:.1f} s")


@app.command("sweep", context_settings={"allow_extra_args": True})
@_with_run_options("K")
def flywheel_sweep(
    ctx: typer.Context, out: _FwOut, opts: RunOptions,
    ks: Annotated[list[int], typer.Option("--K", "-K", help="the K values: --K 4 8 12 16 (or --K 4 --K 8 ...)")]
    = [4, 8, 12, 16],  # noqa: B006 (typer reads the default)
    runs: Annotated[int, typer.Option("--runs", min=1, help="runs per K, seeds seed..seed+runs-1")] = 1,
) -> None:
    """Runs over K (rollouts per task): final and band vs K.

    A run per K (and per seed) into OUT/K<k>/run-<i>, then OUT/sweep.json,
    sweep.png and sweep.html: final vs K (mean and spread), the bands vs K
    with the least-squares fit c/sqrt(K) to the measured A/A bands (with
    --gate aa; c, the largest relative residual and the c the two-rate
    formula predicts), keep rate per mode; every run's curve with its
    per-round interval."""
    import time

    from glyph.flywheel import aggregate

    values = list(ks)
    for extra in ctx.args:  # `--K 4 8 12 16`: click binds 4 to --K and leaves the rest as arguments
        if not extra.isdigit() or int(extra) < 1:
            fail(f"sweep: unexpected argument {extra!r} (K values are positive integers: --K 4 8 12 16)")
        values.append(int(extra))
    if min(values) < 1:
        fail(f"--K {min(values)}: K values are positive integers")
    values = sorted(set(values))
    by_k: dict[int, list] = {}
    t0 = time.perf_counter()
    for kv in values:
        for i in range(runs):
            where = f"K{kv}/run-{i}"
            err.rule(f"{where}: K={kv}, {i + 1} of {runs}, seed {opts.seed + i}")
            doc, fw = _run(opts.replace(K=kv, seed=opts.seed + i), out / where)
            _fw_timing(doc, fw)
            by_k.setdefault(kv, []).append((doc, where))
    sw = aggregate.sweep_doc(by_k)
    aggregate.write_json(out / "sweep.json", sw)
    image = aggregate.sweep_png(sw)
    (out / "sweep.png").write_bytes(image)
    (out / "sweep.html").write_text(aggregate.sweep_html(sw, image, aggregate.sweep_curves_png(by_k)),
                                    encoding="utf-8")
    console.print(aggregate.runs_table(f"sweep: {aggregate.fit_text(sw['band_fit'])}",
                                       [r for p in sw["per_K"] for r in p["runs"]]))
    err.print(f"wrote {out / 'sweep.json'}, {out / 'sweep.png'}, {out / 'sweep.html'} in "
              f"{time.perf_counter() - t0:.1f} s")


# ---------------------------------------------------------------- glyph flywheel import

@app.command("import")
def flywheel_import(
    files: Annotated[list[Path], typer.Argument(metavar="FILE", help="the original flywheel's result files "
                                                "(results/*.json: runs such as rep1.json, replication.json, "
                                                "credit-real.json)")],
    out: Annotated[Path, typer.Option("--out", help="output directory (one folder per file, plus bands.json "
                                      "and bands.png)")],
) -> None:
    """The original flywheel's results, read into glyph's documents and redrawn.

    A run file becomes OUT/<name>/run.json, curve.png, curve.html; a
    replication file OUT/<name>/replicate.json, replicate.png and .html (its runs
    matched to the run files given beside it); a credit report
    OUT/<name>/credit.json and credit.png (Wilson intervals per step); all
    runs' bands OUT/bands.json and bands.png. Fields a file does not hold are
    null and listed under imported.unknown; the paired gate is reported
    unavailable (no per-task rates)."""
    from rich.progress import track

    from glyph.flywheel import aggregate, original
    from glyph.flywheel.outputs import write_run
    from glyph.report.tables import Table
    from glyph.report.terminal import render

    parsed = []
    for f in files:
        if not f.is_file():
            fail(f"{f}: no such file")
        try:
            src, prov = original.load(f)
            parsed.append((f, src, prov, original.kind_of(src)))
        except original.OriginalFormatError as exc:
            fail(f"{f}: {exc}")
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict] = {}
    t = Table("import", "imported from the original flywheel",
              ["file", "kind", "K", "holdout", "baseline", "final", "gain (pp)", "band recorded", "formula",
               "two-rate", "kept", "checks"], keys=1, right_columns=tuple(range(2, 11)))
    from glyph.flywheel.outputs import pct
    num = aggregate._pp
    order = sorted(parsed, key=lambda p: {"run": 0, "replication": 1, "credit": 2}[p[3]])  # runs first: matched
    for f, src, prov, kind in track(order, description="importing", console=err, transient=True):
        where = out / f.stem
        where.mkdir(parents=True, exist_ok=True)
        if kind == "run":
            doc = original.run_doc(src, prov)
            write_run(where, doc)
            runs[f.name] = doc
            t.rows.append([f.name, kind, str(doc["K"]), str(doc["n_holdout"]), pct(doc["baseline"]),
                           pct(doc["final"]),
                           num(doc["gain_pp"], "{:+.1f}"), num(doc["imported"]["reported"]["noise_band_pp"]),
                           num(doc["bands"]["formula_pp"], "{:.2f}"),
                           num(doc["bands"]["two_rate_pp"], "{:.2f}"),
                           str(sum(x["kept"] for x in doc["lessons"])), str(len(doc["imported"]["checks"]))])
        elif kind == "replication":
            rep, docs, names = original.replicate_doc(src, prov, runs)
            aggregate.write_json(where / "replicate.json", rep)
            short = [n.split(" (")[0] for n in names]
            image = aggregate.replicate_png(
                docs, names=short,
                title=f"The original's replication: {rep['n_runs']} runs, mean final {pct(rep['final']['mean'])}")
            (where / "replicate.png").write_bytes(image)
            (where / "replicate.html").write_text(aggregate.replicate_html(
                rep, image, names, title="glyph flywheel import: the original's replication"), encoding="utf-8")
            g = rep["gain_pp"]
            t.rows.append([f.name, f"{kind} ({rep['n_runs']} runs)", str(rep["K"]), str(rep["n_holdout"]),
                           pct(rep["baseline"]["mean"]), f"mean {pct(rep['final']['mean'])}",
                           f"{g['min']:+.1f}..{g['max']:+.1f}", "-", "-", "-", "-",
                           str(len(rep["imported"]["checks"]))])
        else:
            doc = original.credit_doc(src, prov)
            aggregate.write_json(where / "credit.json", doc)
            (where / "credit.png").write_bytes(original.credit_png(doc))
            t.rows.append([f.name, kind, "-", "-", "-", "-", "-", "-", "-", "-", "-",
                           str(len(doc["imported"]["checks"]))])
    if runs:
        bands = original.bands_doc(runs)
        aggregate.write_json(out / "bands.json", bands)
        (out / "bands.png").write_bytes(original.bands_png(bands))
    t.caption = ("band recorded: the file's noise_band_pp; formula and two-rate: from its holdout and K (pp). "
                 "checks: disagreements between what a file reports and what its own fields give")
    console.print(render(t))
    err.print(f"wrote {out}")


# ---------------------------------------------------------------- glyph flywheel credit

DEFAULT_SLIP = 0.2
"""--slip where more than one fork is asked for and --slip is not given (``glyph.credit.replay.Repair``)."""


@app.command("credit")
def flywheel_credit(
    source: Annotated[Path, typer.Argument(metavar="SOURCE", help="a program trace (.glyph/trace.json) or an eval output "
                                           "directory (vf-eval, eval, PRIME-RL)")],
    task: Annotated[Optional[str], typer.Option("--task", help="the rollout's task, e.g. mbpp_11 (an eval "
                                                "output of several tasks: needed, to pick the rollout; a trace: "
                                                "default from its prompt)")] = None,
    index: Annotated[Optional[int], typer.Option("--index", min=0, help="the i-th rollout of --task in the "
                                                 "eval output, 0-based (default: the first that failed)")] = None,
    mbpp_path: MbppPath = None,
    budget: Annotated[Optional[int], typer.Option("--budget", min=1, help="the episode's tool budget "
                                                  "(default: as recorded)")] = None,
    test_cost: Annotated[Optional[int], typer.Option("--test-cost", min=1, help="budget units per python_test "
                                                     "(default: as recorded)")] = None,
    forks: Annotated[int, typer.Option("--forks", min=1, help="continuations per snapshot; the report gives each "
                                       "step's pass rate with its 95% Wilson interval")] = 1,
    threshold: Annotated[float, typer.Option("--threshold", min=0.0, max=1.0,
                                             help="the pass rate the verdict names the earliest step below")]
        = 0.5,
    slip: Annotated[float | None, typer.Option("--slip", min=0.0, max=1.0,
                                                  help="the repair policy's chance of a detour (a wasted "
                                                  "read_file) before each call (default: 0 with one fork, "
                                                  f"{DEFAULT_SLIP} with more)")] = None,
    seed: Annotated[int, typer.Option("--seed", help="seeds each fork's draws (the repair's detours; a model's "
                                      "sampling seed, seed + fork)")] = 0,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="continue with a model at this "
                                                    "OpenAI-compatible endpoint instead of the repair policy "
                                                    "(key: $OPENAI_API_KEY)")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="model name at --base-url")] = None,
    temperature: Annotated[float, typer.Option("--temperature", help="model sampling temperature")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="also save the JSON report here")] = None,
    png: Annotated[Path | None, typer.Option("--png", help="also draw the pass rate by step here (PNG)")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="also write a page of the report here (HTML, "
                                                 "the PNG embedded)")] = None,
) -> None:
    """Which step of a failed glyph-mbpp trajectory made success unreachable.

    Replays the trajectory's steps in a scratch workspace (a snapshot before
    the first and after each), continues --forks times from every snapshot
    with a fixed policy (default: repair, one patch per hunk to the reference
    solution) on the budget left, grades it on the hidden tests, and names
    the earliest step from which no continuation succeeds, and the earliest
    from which the pass rate stays below --threshold, with the range of
    steps the Wilson intervals allow. See docs/credit.md."""
    import json

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from glyph.agent.program import EndpointError
    from glyph.credit import page
    from glyph.credit import replay as credit
    from glyph.credit.trajectory import load_trajectory, resolve_task
    from glyph.data import mbpp

    if (base_url is None) != (model is None):
        fail("--base-url and --model go together (a model continuation)")
    if base_url is None and temperature != 0.0:
        fail("--temperature goes with --base-url and --model (the repair policy samples nothing)")
    if threshold == 0.0:
        fail("--threshold 0: no pass rate is below 0; give a rate in (0, 1]")
    if slip == 1.0:
        fail("--slip 1: every call would be preceded by a detour forever; give a chance in [0, 1)")
    if base_url is not None and slip is not None:
        fail("--slip goes with the repair policy, not a model continuation (a model samples: --temperature)")
    try:
        traj = load_trajectory(source, task, index, budget=budget, test_cost=test_cost)
        tasks = mbpp.load(mbpp_path)
        found, notes = resolve_task(traj, tasks, task, str(mbpp.resolve_path(mbpp_path)))
        if base_url is None:
            continuation = credit.Repair(slip=(0.0 if forks == 1 else DEFAULT_SLIP) if slip is None else slip,
                                         seed=seed)
            if forks > 1 and continuation.slip == 0:
                notes.append(f"--slip 0: the repair policy is deterministic, so its {forks} forks play alike")
        else:
            continuation = credit.ChatContinuation(
                credit.endpoint_chat(base_url, model, temperature, seed=seed), f"model {model}", forked=True,
                seed=seed)
            if forks > 1 and temperature == 0.0:
                notes.append(f"temperature 0: a greedy model's {forks} forks may all play alike")
        with Progress(TextColumn(f"continuing from each snapshot, {forks} fork(s)"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True) as progress:
            bar = progress.add_task("", total=None)
            report = credit.assign(traj, found, continuation, forks=forks, threshold=threshold, notes=notes,
                                   on_progress=lambda done, total: progress.update(bar, completed=done, total=total))
    except EndpointError as exc:  # name the endpoint, and that no report was made
        fail(f"{base_url}: {exc} (the model continuation stopped; no report)")
    doc = report.to_json()
    written = []
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2) + "\n")
        written.append(out)
    if png is not None or html is not None:
        image = page.credit_png(doc)
        if png is not None:
            png.parent.mkdir(parents=True, exist_ok=True)
            png.write_bytes(image)
            written.append(png)
        if html is not None:
            html.parent.mkdir(parents=True, exist_ok=True)
            html.write_text(page.credit_html(doc, image), encoding="utf-8")
            written.append(html)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        shown = Console(soft_wrap=True, highlight=False)
        shown.print(f"{report.source}: {report.task}, arm {report.arm}; recorded: {report.recorded}", markup=False)
        shown.print(credit.table(report))
        for line in report.divergences:
            shown.print(f"[yellow]divergence[/]: {escape(line)}")
        for line in report.notes:
            shown.print(f"note: {line}", markup=False)
        shown.print(f"final state on the hidden tests: {report.final_outcome}", markup=False)
        shown.print(f"[bold]{escape(report.verdict)}[/]")
        if forks > 1:
            shown.print(f"[bold]pass rate: {escape(report.rate_verdict_text)}[/]")
    for path in written:
        err.print(f"wrote {path}", markup=False)
