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


def test_the_interval_over_tasks_counts_a_tasks_agreeing_rollouts():
    """Ten tasks, ten rollouts each, 50 of 100 passing. Where each task's rollouts agree (five tasks
    pass all ten, five fail all ten) there are in effect ten draws, not 100: the cluster bootstrap over
    tasks is about three times as wide as Wilson's (which counts 100 independent rollouts). Where every
    task passes 5 of 10, tasks do not differ and resampling them changes nothing."""
    agreeing = {f"t{i}": _rows(10, 0) if i < 5 else _rows(0, 10) for i in range(10)}
    alike = {f"t{i}": _rows(5, 5) for i in range(10)}
    a, b = curve_point(0, 0.5, agreeing), curve_point(0, 0.5, alike)
    assert (a["lo"], a["hi"]) == (b["lo"], b["hi"]) == pytest.approx(wilson(50, 100), abs=1e-6)
    assert a["task_hi"] - a["task_lo"] > 2.5 * (a["hi"] - a["lo"])
    assert a["task_lo"] == pytest.approx(0.2, abs=0.1) and a["task_hi"] == pytest.approx(0.8, abs=0.1)
    assert b["task_lo"] == b["task_hi"] == 0.5
    assert curve_point(0, 0.5, agreeing) == a  # seeded: the same rows give the same interval


def _gate_cell(d: dict) -> str:
    word = "keep" if d["keep"] else "reject"
    return f"{d['band_pp']:.1f} {word}"


@pytest.mark.parametrize("gate_name", ["band", "aa"])
def test_run_json_and_the_curve_page_carry_every_gates_decision_per_round(tmp_path, tasks_file, gate_name):
    """Each round's lesson in run.json holds the formula, two-rate, paired and (with --gate aa) A/A
    verdicts, each recomputed here from the round's own numbers; the deciding one is the lesson's
    ``kept``; the curve point carries the same verdicts; the page and the terminal table show each
    gate's band and verdict per round, and say what each gate assumes."""
    import math

    from rich.console import Console

    from glyph.flywheel.gate import ASSUMES, DECISION_OF
    from glyph.flywheel.outputs import gates_table

    opts = RunOptions(tasks=tasks_file, K=2, concurrency=2, quiet=True, p_lucky=0.3, gate=gate_name,
                      **({"aa_runs": 3} if gate_name == "aa" else {}))
    doc, _ = run_one(opts, tmp_path / "run")
    html = _text((tmp_path / "run" / "curve.html").read_text())
    console = Console(width=80, record=True, file=None, color_system=None)
    with console.capture() as captured:
        console.print(gates_table(doc))
    terminal = " ".join(captured.get().split())
    aa_pp = doc["bands"]["aa_pp"]
    assert (aa_pp is not None) is (gate_name == "aa")
    scored = [les for les in doc["lessons"] if les["gates"] is not None]
    assert len(scored) >= 2
    for les in scored:
        g, gain = les["gates"], les["gain_pp"]
        assert g["formula"] == {"band_pp": les["band_pp"], "keep": gain > les["band_pp"]}
        assert g["two_rate"]["band_pp"] == pytest.approx(math.sqrt(2) * les["band_pp"], abs=1e-3)
        assert g["two_rate"]["keep"] is (gain > g["two_rate"]["band_pp"])
        lo = les["paired"]["lo_pp"]
        assert g["paired"] == les["paired"] | {"keep": lo is not None and lo > 0}
        assert g["aa"] == (None if aa_pp is None else {"band_pp": aa_pp, "keep": gain > aa_pp})
        assert les["gated_by"] == DECISION_OF[gate_name] and les["kept"] is g[les["gated_by"]]["keep"]
        verdicts = {k: None if v is None else v["keep"] for k, v in g.items()}
        assert les["gates_agree"] is (len({v for v in verdicts.values() if v is not None}) == 1)
        [point] = [c for c in doc["curve"] if c["round"] == les["round"]]
        assert point["decisions"] == verdicts
        for shown in (html, terminal):
            assert _gate_cell(g["formula"]) in shown and _gate_cell(g["two_rate"]) in shown
            if g["aa"] is not None:
                assert _gate_cell(g["aa"]) in shown
        assert ("disagree" if not les["gates_agree"] else "agree") in html
    if gate_name == "band":
        assert any(not les["gates_agree"] for les in scored)  # this run's round 2: two-rate rejects
        assert "not measured" in html and "not measured" in terminal
    for rule, assumes in ASSUMES.values():
        assert " ".join(rule.split()) in html and " ".join(assumes.split()) in " ".join(html.split())
    assert "glyph recommends --gate aa" in " ".join(html.split())


def test_a_kept_lesson_whose_paired_interval_includes_0_is_marked(tmp_path, tasks_file):
    """A kept lesson whose paired interval includes 0 (here the run's own lesson with its paired
    interval widened to [-1.7, +19.0], the issue's round 1): marked on the page, in the terminal
    table and on the curve (its own legend entry)."""
    from rich.console import Console

    from glyph.flywheel import gate
    from glyph.flywheel.outputs import KEPT_BUT_ZERO, summary_table

    opts = RunOptions(tasks=tasks_file, K=2, concurrency=2, quiet=True, p_lucky=0.3)
    doc, _ = run_one(opts, tmp_path / "run")
    les = next(les for les in doc["lessons"] if les["kept"])
    wide = gate.Paired(0.086, -0.017, 0.19, 14)
    decisions = gate.decisions(les["gain_pp"] / 100, les["band_pp"] / 100, wide, None)
    les.update(paired=wide.to_json(), **gate.lesson_fields(decisions, "band"))
    assert les["kept"] and les["paired_includes_zero"]
    (tmp_path / "edited").mkdir()
    write_run(tmp_path / "edited", doc)
    html = " ".join(_text((tmp_path / "edited" / "curve.html").read_text()).split())
    assert KEPT_BUT_ZERO in html and "+8.6 [-1.7, +19.0] reject" in html
    assert "kept, paired CI includes 0" in html
    assert f"kept although the paired interval includes 0: round(s) {les['round']}" in html
    console = Console(width=80, record=True, color_system=None)
    with console.capture() as captured:
        console.print(summary_table(doc))
    assert KEPT_BUT_ZERO in captured.get()


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
