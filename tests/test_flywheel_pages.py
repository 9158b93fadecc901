"""The flywheel's pictures and pages: every learning-curve point's 95% Wilson
interval (checked on constructed rows against textbook values, and on a real
run against its own stored rollouts), replicate.html and sweep.html with the
bands' numbers, and the look they share with glyph report's page."""

import base64
import json
import re
from html import unescape

import pytest
from test_flywheel_loop import LAYOUT, _write_tasks  # the loop tests' task builder
from typer.testing import CliRunner

from glyph.flywheel import aggregate
from glyph.flywheel.loop import curve_point
from glyph.flywheel.options import RunOptions
from glyph.flywheel.outputs import write_run
from glyph.flywheel.runner import run_one
from glyph.report import page
from glyph.report.stats import wilson


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    return _write_tasks(tmp_path_factory.mktemp("tasks") / "tasks.jsonl", LAYOUT)


def _rows(passes: int, fails: int, excluded: int = 0) -> list[dict]:
    return ([{"reward": 1, "excluded": False}] * passes + [{"reward": 0, "excluded": False}] * fails
            + [{"reward": None, "excluded": True}] * excluded)


def _text(html: str) -> str:
    """The page's text: tags dropped, entities decoded (what a reader sees)."""
    return unescape(re.sub(r"<[^>]+>", " ", re.sub(r"base64,[A-Za-z0-9+/=]+", "", html)))


# ---------------------------------------------------------------- the per-round interval


def test_a_curve_point_carries_the_wilson_interval_of_each_measurement():
    level = {"t1": _rows(2, 3), "t2": _rows(1, 4, excluded=2)}  # 3 of 10 scored; excluded ones never count
    cand = {"t1": _rows(0, 5, excluded=1), "t2": _rows(0, 5)}  # 0 of 10
    pt = curve_point(3, 0.3, level, cand, kept=False, level_before=0.3, band_pp=31.0)
    assert (pt["round"], pt["accepted"], pt["candidate"], pt["kept"], pt["band_pp"]) == (3, 0.3, 0.0, False, 31.0)
    assert (pt["n"], pt["candidate_n"]) == (10, 10)
    # the textbook 95% Wilson intervals of 3/10 and 0/10
    assert (pt["lo"], pt["hi"]) == pytest.approx((0.1078, 0.6032), abs=1e-4)
    assert (pt["candidate_lo"], pt["candidate_hi"]) == pytest.approx((0.0, 0.2775), abs=1e-4)
    none = curve_point(0, 0.3, level)  # no candidate measured (the baseline, a writer failure)
    assert none["candidate"] is None and none["candidate_lo"] is None and none["candidate_n"] is None


def test_every_point_of_a_run_has_the_interval_of_its_stored_rollouts(tmp_path, tasks_file):
    doc, _ = run_one(RunOptions(tasks=tasks_file, K=2, concurrency=2, quiet=True, p_lucky=0.3), tmp_path / "run")
    assert doc["curve_interval"]["method"] == "wilson" and doc["curve_interval"]["level"] == 0.95
    rows = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]

    def measured(phase: str, rnd: int) -> tuple[int, int]:
        mine = [r for r in rows if r["phase"] == phase and r["round"] == rnd and not r["excluded"]]
        return sum(r["reward"] for r in mine), len(mine)

    level = measured("baseline", 0)
    assert len(doc["curve"]) >= 3
    for c in doc["curve"]:
        if c["candidate"] is not None:
            passes, n = measured("holdout", c["round"])
            assert c["candidate_n"] == n == doc["n_holdout"] * 2
            assert (c["candidate_lo"], c["candidate_hi"]) == pytest.approx(wilson(passes, n), abs=1e-6)
            if c["kept"]:
                level = (passes, n)
        assert c["n"] == level[1] and c["accepted"] == pytest.approx(level[0] / level[1], abs=1e-6)
        assert (c["lo"], c["hi"]) == pytest.approx(wilson(*level), abs=1e-6)
        assert c["lo"] <= c["accepted"] <= c["hi"]
    html = _text((tmp_path / "run" / "curve.html").read_text())
    last = doc["curve"][-1]
    assert f"[{100 * last['lo']:.1f}%, {100 * last['hi']:.1f}%]" in html and "95% Wilson interval" in html


# ---------------------------------------------------------------- replicate.html and sweep.html


def test_replicate_and_sweep_write_html_with_the_bands_and_intervals(tmp_path, tasks_file):
    from glyph.cli.app import app

    runner = CliRunner()
    r = runner.invoke(app, ["flywheel", "replicate", "--runs", "2", "--K", "2", "--max-rounds", "2", "--quiet",
                            "--tasks", tasks_file, "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "rep" / "replicate.json").read_text())
    html = (tmp_path / "rep" / "replicate.html").read_text()
    text = _text(html)
    for row, i in zip(rep["runs"], range(2)):
        run = json.loads((tmp_path / "rep" / f"run-{i}" / "run.json").read_text())
        curve = row["curve"]  # the run's curve as arrays, with its intervals
        assert curve["round"] == [c["round"] for c in run["curve"]]
        assert curve["lo"] == [c["lo"] for c in run["curve"]] and curve["hi"] == [c["hi"] for c in run["curve"]]
        assert row["bands"]["formula_pp"] == run["bands"]["formula_pp"] and row["bands"]["gated_by"] == "formula"
        assert f"{row['bands']['formula_pp']:.2f}" in text and f"{row['bands']['two_rate_pp']:.2f}" in text
        assert f"[{100 * curve['lo'][-1]:.1f}%, {100 * curve['hi'][-1]:.1f}%]" in text  # the final's interval
    assert f"climbed {rep['climbed']}/2" in text and "replicate.html" in r.stderr.replace("\n", "")
    [img] = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    assert base64.b64decode(img) == (tmp_path / "rep" / "replicate.png").read_bytes()

    r = runner.invoke(app, ["flywheel", "sweep", "--K", "1", "2", "--max-rounds", "1", "--quiet", "--tasks",
                            tasks_file, "--out", str(tmp_path / "sweep")])
    assert r.exit_code == 0, r.output
    sw = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    text = _text(html := (tmp_path / "sweep" / "sweep.html").read_text())
    assert sw["band_fit"]["fitted_to"] is None and "no band fitted" in text  # no A/A band measured: said
    for p in sw["per_K"]:
        assert f"{p['band_pp']:.2f}" in text
        for row in p["runs"]:
            assert len(row["curve"]["lo"]) == row["rounds"] + 1 and None not in row["curve"]["lo"]
    assert len(re.findall(r"data:image/png;base64,", html)) == 2  # final/band vs K, and every run's curve


def test_an_imported_replication_gets_a_page_and_its_runs_keep_the_recorded_intervals(tmp_path):
    from test_flywheel_import import _write, original_run, replication

    from glyph.cli.app import app

    a = original_run()
    lone = original_run(baseline=0.25, steps=(("c-mode", 0.4, "learned"),))  # no run file: no K, no interval
    files = [_write(tmp_path / "rep1.json", a), _write(tmp_path / "replication.json", replication([a, lone]))]
    r = CliRunner().invoke(app, ["flywheel", "import", *map(str, files), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    run = json.loads((tmp_path / "out" / "rep1" / "run.json").read_text())
    assert run["curve_interval"]["method"] == "recorded"
    assert [c["lo"] for c in run["curve"]] == pytest.approx([c["lo"] for c in a["curve"]], abs=1e-6)
    rep = json.loads((tmp_path / "out" / "replication" / "replicate.json").read_text())
    assert rep["runs"][0]["curve"]["hi"] == [c["hi"] for c in run["curve"]]
    assert set(rep["runs"][1]["curve"]["lo"]) == {None} and rep["runs"][1]["curve"]["interval"] is None
    text = _text((tmp_path / "out" / "replication" / "replicate.html").read_text())
    assert "replication.json" in text and f"{run['bands']['formula_pp']:.2f}" in text
    assert "95% interval (recorded)" in _text((tmp_path / "out" / "rep1" / "curve.html").read_text())


# ---------------------------------------------------------------- one look


def test_the_flywheel_pages_and_the_report_share_one_look(tmp_path, tasks_file):
    from test_report_known import episode
    from test_report_known import write_run as write_eval_run

    from glyph.report import report, write

    doc, _ = run_one(RunOptions(tasks=tasks_file, K=1, max_rounds=1, quiet=True), tmp_path / "run")
    rep = aggregate.replicate_doc([doc], ["run"])
    pages = {"curve": (tmp_path / "run" / "curve.html").read_text(),
             "replicate": aggregate.replicate_html(rep, b"\x89PNG\r\n\x1a\n"),
             "report": write(report([write_eval_run(tmp_path / "eval", [episode("t1", "a", True)])]),
                             tmp_path / "rep")["html"].read_text()}
    for name, html in pages.items():
        assert html.startswith("<!doctype html><html lang=en><head><meta charset=utf-8><title>"), name
        assert f"<style>{page.CSS}</style>" in html, name
        assert re.search(r"<p class=caption>[^<]+</p></body></html>\n$", html), name  # the provenance foot
        assert not re.search(r"(src|href)=['\"]?(https?:|//|/)", html), name  # nothing loaded from anywhere
    assert "tasks tasks.jsonl (sha256 " in pages["curve"] and str(tmp_path) not in pages["curve"]
    assert "<p class=caption>schema glyph.report/1</p></body>" in pages["report"]


def test_write_run_is_deterministic(tmp_path, tasks_file):
    doc, _ = run_one(RunOptions(tasks=tasks_file, K=1, max_rounds=1, quiet=True), tmp_path / "a")
    write_run(tmp_path / "a", doc)
    first = (tmp_path / "a" / "curve.html").read_bytes()
    write_run(tmp_path / "a", json.loads((tmp_path / "a" / "run.json").read_text()))
    assert (tmp_path / "a" / "curve.html").read_bytes() == first
