"""Terminal tables at 80 columns (the width of piped output) and at 160: no
cell wraps over two lines, no header is cut (issue 22, friction 4).

Each table is rendered with ``rich`` ``Console(width=...)`` through
``glyph.report.terminal`` and read back as text: every header and every cell
must appear whole on one line, no line may pass the width, and nothing may
be cut with an ellipsis. Covered: every table of ``glyph report``, the
flywheel's run summary, replicate and sweep tables and the A/A table, and
the credit table."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from rich.text import Text
from test_report_known import study  # noqa: F401  (the fixture: four runs whose every figure is known)

from glyph.report import report
from glyph.report.tables import Table, _incidents, tables
from glyph.report.terminal import render

WIDTHS = (80, 160)


def shown(t: Table, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render(t))
    return console.export_text()


def assert_fits(t: Table, width: int) -> str:
    """``t`` at ``width``: every line within it, no ellipsis, each header and
    each cell whole on one line of a table (a row inside ``│`` rules), or a
    long cell whole in the list under the table (a paragraph, which wraps as
    text: compared with the whitespace taken out)."""
    text = shown(t, width)
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(line for line in lines if len(line) > width)
    assert "…" not in text, text
    rows = [line.replace("┃", "│") for line in lines if line.startswith(("│", "┃"))]
    rules = ("│", "┃", "┏", "┡", "└")
    below = _squeeze("\n".join(line for line in lines if not line.startswith(rules)))
    parts = text.count("┏")
    # one line per row (and one header line) in every part: a wrapped cell would add lines
    assert sum(line.startswith("│") for line in lines) == parts * len(t.rows), text
    assert sum(line.startswith("┃") for line in lines) == parts, text
    for j, h in enumerate(t.columns):
        in_table = any(re.search(rf"│ *{re.escape(h)} *│", r) for r in rows)
        assert in_table or _squeeze(f"·{h}:") in below, (h, text)
        for row in t.rows:
            plain = Text.from_markup(row[j]).plain if t.markup else row[j]
            if in_table:
                assert any(f" {plain} " in r for r in rows), (plain, text)
            else:  # listed under the table, whole
                assert _squeeze(f"·{h}:{plain}") in below, (plain, text)
    return text


def _squeeze(text: str) -> str:
    return re.sub(r"\s", "", text)


@pytest.fixture()
def doc(study):  # noqa: F811
    return report(study)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_report_table_fits(doc, width):
    tabs = tables(doc)
    assert {t.key for t in tabs} >= {"runs", "pass", "episode", "revise_split", "gate", "tool_calls",
                                      "comparisons", "seeds", "incidents"}
    for t in tabs:
        assert_fits(t, width)


def test_at_80_columns_the_wide_tables_split_and_the_long_cells_go_under_them(doc, study):  # noqa: F811
    by_key = {t.key: t for t in tables(doc)}
    comparisons = shown(by_key["comparisons"], 80)
    assert comparisons.count("┏") >= 2  # in parts, each repeating the row number
    assert re.search(r"┃ *# *┃", comparisons)
    incidents = by_key["incidents"]
    text = shown(incidents, 80)
    errored = next(r for r in incidents.rows if r[1] == "errored")
    assert errored[2:5] == ["1", "5", "t5"]  # one rollout: its count, line and task
    # the reason whole, named by its row's keys
    assert _squeeze(f"run r2, kind errored · reason: {errored[8]}") in _squeeze(text)
    assert _squeeze(f"r2: {study[1]}") in _squeeze(text)  # the run's full path in the legend
    assert "· reason:" not in shown(incidents, 200)  # wide enough: one table, the reasons in it


def test_incidents_that_failed_alike_are_one_row_naming_every_line_and_task():
    """500 rollouts of one run that failed with one reason (a dead endpoint) are one row, not 500 (at
    80 columns the table and its reason take a few lines, not 1,582), with every line and task named
    as ranges; a rollout that failed otherwise is a row of its own; report.json keeps each."""
    from glyph.report.tables import ranges, task_ranges

    dead = "endpoint_error: model call failed: HTTP 503: [Errno -2] Name or service not known"
    incidents = [{"run": 0, "path": "p", "line": i + 1, "task": f"mbpp_{11 + i}", "arm": "a", "seed": None,
                  "ckpt": "m", "kind": "errored", "reason": dead} for i in range(500)]
    incidents.insert(7, dict(incidents[7], line=501, task="mbpp_600", kind="timed_out",
                             reason="agent timeout"))
    doc = {"runs": [{"path": "outputs/run-0"}], "incidents": incidents}
    t = _incidents(doc)
    assert t.title == "Incidents: errored, timed-out and tampered rollouts (501, in 2 groups)"
    assert t.rows[0][:5] == ["r1", "errored", "500", "1-500", "mbpp_11-510"] and t.rows[0][8] == dead
    assert t.rows[1][:5] == ["r1", "timed_out", "1", "501", "mbpp_600"]
    text = assert_fits(t, 80)
    assert len(text.splitlines()) < 30 and text.count(dead.split(": ")[-1]) == 1
    assert ranges([3, 1, 2, 7, 9, 10, 9]) == "1-3, 7, 9-10"
    assert task_ranges(["mbpp_12", "mbpp_11", "x", "mbpp_20", "t1"]) == "mbpp_11-12, mbpp_20, t1, x"


def test_a_split_table_tells_its_rows_apart_in_every_part():
    """The REVISE split and the tool-call tables repeat their trajectory label in each part at 80
    columns, and a table whose key columns repeat gets a row number in each part: no part shows
    two rows that read the same."""
    rows = [["b", "42", "step100", label, "7", "70.0% [39.7, 89.2]", "71.4% [35.9, 91.8]"]
            for label in ("never REVISE (KEEP only)", "chose REVISE")]
    t = Table("revise_split", "split", ["arm", "seed", "ckpt", "trajectories", "n", "share", "pass@1"],
              rows=rows, numeric=4, keys=4)
    narrow = shown(t, 80)
    assert narrow.count("┏") >= 2 and narrow.count("chose REVISE") == narrow.count("┏")
    repeated = Table("x", "keys that repeat", ["arm", "value one", "value two"],
                     rows=[["b", "1" * 30, "2" * 30], ["b", "3" * 30, "4" * 30]], keys=1)
    text = shown(repeated, 50)
    assert text.count("┏") == 2 and len(re.findall(r"┃ # ┃ arm", text)) == 2, text
    for part in text.split("┏")[1:]:
        body = [line for line in part.splitlines() if line.startswith("│")]
        assert len(set(body)) == len(body) == 2, part


def test_the_runs_table_names_runs_short_and_says_where_each_value_came_from(doc, study):  # noqa: F811
    runs = next(t for t in tables(doc) if t.key == "runs")
    assert [r[0] for r in runs.rows] == ["r1", "r2", "r3", "r4"]
    assert runs.legend == [f"r{i + 1}: {p}" for i, p in enumerate(study)]
    assert runs.columns[-3:] == ["arm from", "seed from", "ckpt from"]
    assert runs.rows[0][-3:] == ["task records", "sampling.seed", "model name"]
    assert runs.rows[3][-2] == "not recorded"
    assert "--label" in runs.caption and "not recorded" in runs.caption


def test_the_cli_prints_the_report_at_80_columns_without_wrapping(study):  # noqa: F811
    from typer.testing import CliRunner

    from glyph.cli.app import app

    r = CliRunner().invoke(app, ["report", *map(str, study)], terminal_width=80)
    assert r.exit_code == 0, r.output
    assert max(map(len, r.stdout.splitlines())) <= 80 and "…" not in r.stdout
    assert str(study[0]) in r.stdout  # in the legend, whole


def test_a_table_whose_keys_alone_are_too_wide_prints_its_rows_as_records():
    t = Table("x", "Too wide", ["name", "value"], rows=[["n" * 90, "1"]], keys=1)
    text = shown(t, 80)
    assert _squeeze("name: " + "n" * 90) in _squeeze(text) and "value: 1" in text and "…" not in text


# ---------------------------------------------------------------- the flywheel's and the credit tables


LONG_LESSON = ("When the task asks for a case-insensitive comparison, lower-case both strings before "
               "comparing them, and keep the original strings for the value you return.")


def flywheel_run(K: int = 8, aa: float | None = None, lessons: int = 2) -> dict:
    """A run document with the fields the tables and the aggregates read (what ``Flywheel.run`` writes)."""
    n = 42
    formula = 100 * 1.96 * (0.25 / (n * K)) ** 0.5
    from glyph.flywheel import gate

    def paired(i: int) -> gate.Paired:
        return gate.Paired((8.0 - 5 * i) / 100, (3.1 - 6 * i) / 100, float("inf"), n)

    les = [{"round": i + 1, "mode": f"mode_{i}", "text": LONG_LESSON if i == 0 else "Round to 2 dp.",
            "cluster_size": 3 + i, "candidate": 0.3 + 0.1 * i, "gain_pp": 8.6 - 5 * i, "band_pp": formula,
            "paired": paired(i).to_json(), "kept": i == 0,
            "error": "HTTP 500: the writer's endpoint failed" if i == 2 else None}
           | gate.lesson_fields(None if i == 2 else gate.decisions(
               (8.6 - 5 * i) / 100, formula / 100, paired(i),
               None if aa is None else gate.AABand((0.4, 0.45), aa / 100, 0.05, 0.03)),
               "aa" if aa else "band")
           for i in range(lessons)]
    return {"seed": 0, "K": K, "baseline": 0.086, "final": 0.464, "gain_pp": 37.8, "noise_band_pp": formula,
            "rounds": lessons, "lessons": les, "excluded": {"rollouts": 0}, "stop": "2 rejections in a row",
            "gate": "aa" if aa is not None else "band", "n_holdout": n, "n_train": 20,
            "agent": {"kind": "reference"}, "writer": {"kind": "reference"},
            "bands": {"formula_pp": formula, "two_rate_pp": 2 ** 0.5 * formula, "aa_pp": aa,
                      "gated_by": "aa" if aa is not None else "formula",
                      "aa": {"runs": 20, "pairs": 190, "rates": [0.4, 0.45], "normal_two_rate_pp": 6.1}
                      if aa is not None else None},
            "curve": [{"round": r, "accepted": 0.086 + 0.1 * r, "lo": 0.05 + 0.1 * r, "hi": 0.15 + 0.1 * r,
                       "n": n * K, "candidate": None if r == 0 else 0.1 + 0.1 * r,
                       "candidate_lo": None if r == 0 else 0.05 + 0.1 * r,
                       "candidate_hi": None if r == 0 else 0.2 + 0.1 * r, "candidate_n": n * K,
                       "kept": None if r == 0 else r == 1, "band_pp": None if r == 0 else formula,
                       "level_before": None if r == 0 else 0.1 * r} for r in range(lessons + 1)]}


def _fitted(table) -> Table:
    return table.table  # glyph.report.terminal.Fitted: the table it lays out


@pytest.mark.parametrize("width", WIDTHS)
def test_the_flywheel_tables_fit(width):
    from glyph.flywheel.aggregate import replicate_doc, runs_table, sweep_doc
    from glyph.flywheel.noise import aa_table
    from glyph.flywheel.outputs import gates_table, summary_table

    lessons = _fitted(summary_table(flywheel_run(lessons=3)))
    text = assert_fits(lessons, width)
    assert _squeeze(f"round 1 · lesson: {LONG_LESSON}") in _squeeze(text) or f" {LONG_LESSON} " in text
    for aa in (None, 10.5):
        text = assert_fits(_fitted(gates_table(flywheel_run(aa=aa, lessons=3))), width)
        assert "+8.0 [+3.1, inf] keep" in text and ("not measured" in text) is (aa is None)
    rep = replicate_doc([flywheel_run(), dict(flywheel_run(), seed=1)], ["run-0", "run-1"])
    text = assert_fits(_fitted(runs_table("replicate: 2/2 climbed", rep["runs"])), width)
    assert "run-1" in text and "baseline [95%]" in text
    sw = sweep_doc({k: [(flywheel_run(k, aa), f"K{k}/run-0")] for k, aa in ((4, 14.0), (8, 10.5), (16, 6.5))})
    assert_fits(_fitted(runs_table("sweep", [r for p in sw["per_K"] for r in p["runs"]])), width)
    assert_fits(_fitted(aa_table(flywheel_run(aa=10.5))), width)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("forks", [1, 8])
def test_the_credit_table_fits(width, forks):
    from glyph.credit.rates import ThresholdVerdict
    from glyph.credit.replay import Attempt, Report, Row, table

    def row(i: int, passes: int) -> Row:
        attempt = Attempt("PASS" if passes else "BUDGET_EXHAUSTED", bool(passes), "final", 3, 4, "PASS")
        return Row(i, "apply_patch" if i else "start", None, "solution.py: 3 hunks [x]" if i else "", "ok",
                   8 - i, bool(i % 2), f"{i:064x}", "", attempt, forks, passes, passes / forks,
                   max(0.0, passes / forks - 0.3), min(1.0, passes / forks + 0.3))

    report = Report("trace.json", "mbpp_11", "b", 8, 1, "repair", "FINAL", "ASSERTION_FAILURE", 2,
                    "step 2 is the earliest", [row(0, forks), row(1, forks // 2), row(2, 0)], [], [], forks,
                    rate_verdict=ThresholdVerdict(0.5, 0.95, 1, 2, 1) if forks > 1 else None)
    t = _fitted(table(report))
    assert t.markup and t.rows[1][1] == r"apply_patch solution.py: 3 hunks \[x]"  # a summary is not markup
    text = assert_fits(t, width)
    assert "<- earliest" in text and "[x]" in text
