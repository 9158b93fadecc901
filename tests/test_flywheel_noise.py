"""The measured noise floor (A/A re-rolls of the holdout) beside the formula
and two-rate bands, on task files written here and graded by glyph's grader.

The reference agent's noise is a hash of (seed, phase, round, task, k), so
every number here is deterministic: a tolerance below is about what R
re-rolls can estimate, never about flakiness."""

import json
import math
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph.data import conventions
from glyph.flywheel import gate
from glyph.flywheel.loop import Flywheel
from glyph.flywheel.options import RunOptions
from glyph.flywheel.runner import make_agent, make_writer, run_one

sys.path.insert(0, str(Path(__file__).parent))
from test_flywheel_loop import _write_tasks  # the loop tests' task builder

K = 4
R = 100  # re-rolls: 4,950 pairs; the 95% quantile's own error is then a few percent


@pytest.fixture(scope="module")
def wide_tasks(tmp_path_factory):
    """40 holdout tasks (2 train), so a holdout rate is over 40*K rollouts."""
    return _write_tasks(tmp_path_factory.mktemp("noise") / "tasks.jsonl", [("a", 1, 20), ("b", 1, 20)])


def _measure(tasks_file, out, **changes) -> dict:
    opts = RunOptions(tasks=tasks_file, K=K, p_lucky=0.5, gate="aa", aa_runs=R, quiet=True).replace(**changes)
    config = opts.config()
    tasks = conventions.load_tasks(config.tasks)
    fw = Flywheel(config, out, make_agent(opts, config, tasks), make_writer(opts, config), tasks=tasks,
                  progress=False)
    return fw.measure_aa(R)["bands"]


def test_quantile_and_aa_band_arithmetic():
    assert gate.quantile([0, 1, 2, 3, 4], 0.95) == pytest.approx(3.8)
    assert gate.quantile([5.0], 0.5) == 5.0 and math.isnan(gate.quantile([], 0.5))
    aa = gate.aa_band([0.5, 0.6, 0.8])  # pairs: 0.1, 0.3, 0.2
    assert aa.pairs == 3 and aa.band == pytest.approx(gate.quantile([0.1, 0.2, 0.3], 0.95))
    assert aa.mean_abs == pytest.approx(0.2)
    assert gate.aa_band([0.5]).band == math.inf  # one re-roll measures nothing
    assert gate.two_rate_band(66) == pytest.approx(math.sqrt(2) * gate.band(11, 6))
    assert gate.decide("aa", 0.11, 0.0, gate.paired({}, {}), gate.aa_band([0.5, 0.6])) is True
    assert gate.decide("aa", 0.09, 0.0, gate.paired({}, {}), gate.aa_band([0.5, 0.6])) is False
    with pytest.raises(ValueError, match="A/A"):
        gate.decide("aa", 0.5, 0.0, gate.paired({}, {}))


def test_aa_band_matches_the_two_rate_band_for_independent_rollouts(tmp_path, wide_tasks):
    """Every rollout an independent Bernoulli(0.5) (p_lucky = 0.5, no lesson): the
    formula's own assumptions. The measured A/A band is then the two-rate band
    (sqrt(2) x the formula band), within 10% (measured: 10.63 vs 10.96 pp)."""
    b = _measure(wide_tasks, tmp_path / "ind")
    n = 40 * K
    assert b["formula_pp"] == pytest.approx(100 * gate.band_for(n), abs=1e-3)
    assert b["two_rate_pp"] == pytest.approx(math.sqrt(2) * b["formula_pp"], abs=1e-3)
    assert b["aa"]["runs"] == R and b["aa"]["pairs"] == R * (R - 1) // 2
    assert b["aa_pp"] == pytest.approx(b["two_rate_pp"], rel=0.10)
    assert b["aa_pp"] > 1.2 * b["formula_pp"]  # the one-rate formula is too narrow for a difference
    q = b["aa"]["abs_diff_quantiles_pp"]
    assert q["0.5"] < q["0.9"] < q["0.95"] == b["aa_pp"] < q["0.99"]
    assert b["gated_by"] == "aa"


def test_aa_band_widens_when_a_tasks_rollouts_are_correlated(tmp_path, wide_tasks):
    """noise_draw=task: a task's K rollouts in a re-roll are alike, so a rate has
    40 independent draws, not 40*K; the A/A band widens by about sqrt(K) = 2
    (measured: 22.5 pp), while both formula bands, counting 40*K rollouts,
    stay where they were."""
    ind = _measure(wide_tasks, tmp_path / "ind")
    cor = _measure(wide_tasks, tmp_path / "cor", noise_draw="task")
    assert cor["formula_pp"] == ind["formula_pp"] and cor["two_rate_pp"] == ind["two_rate_pp"]
    assert cor["aa_pp"] > 1.6 * ind["aa_pp"]
    assert cor["aa_pp"] == pytest.approx(math.sqrt(K) * cor["two_rate_pp"], rel=0.15)


def test_run_with_the_aa_gate_records_the_three_bands_and_resumes_the_aa_command(tmp_path, wide_tasks):
    from glyph.cli.app import app

    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["flywheel", "aa", "--runs", "6", "--out", str(out), "--tasks", wide_tasks,
                                 "-K", "2", "--quiet"])
    assert r.exit_code == 0, r.output + r.stderr
    aa_doc = json.loads((out / "aa.json").read_text())
    assert aa_doc["bands"]["aa"]["runs"] == 6 and (out / "aa.png").read_bytes()[:4] == b"\x89PNG"
    n_rolls = len((out / "rollouts.jsonl").read_text().splitlines())
    assert n_rolls == 6 * 40 * 2

    doc, fw = run_one(RunOptions(tasks=wide_tasks, K=2, gate="aa", aa_runs=6, quiet=True), out)
    assert fw.reused == n_rolls  # the aa command's re-rolls are the run's
    b = doc["bands"]
    assert b["aa"]["rates"] == aa_doc["bands"]["aa"]["rates"] and b["gated_by"] == "aa"
    assert b["formula_pp"] == pytest.approx(doc["noise_band_pp"])
    for les in doc["lessons"]:  # the A/A band decided every round
        assert les["kept"] == (les["gain_pp"] > b["aa_pp"])
    assert doc["curve"][1]["band_pp"] == b["aa_pp"]
    assert (out / "aa.png").exists() and "A/A" in (out / "curve.html").read_text()


def test_the_default_gate_records_the_bands_without_measuring(tmp_path, wide_tasks):
    doc, _ = run_one(RunOptions(tasks=wide_tasks, K=2, max_rounds=1, quiet=True), tmp_path / "r")
    assert doc["bands"]["aa_pp"] is None and doc["bands"]["gated_by"] == "formula"
    assert doc["bands"]["two_rate_pp"] == pytest.approx(math.sqrt(2) * doc["noise_band_pp"], abs=1e-3)
    stored = json.loads((tmp_path / "r" / "config.json").read_text())
    assert "aa_runs" not in stored and "noise_draw" not in stored  # an older version's config.json, unchanged


def test_aa_help_names_its_defaults():
    from glyph.cli.app import app

    r = CliRunner().invoke(app, ["flywheel", "aa", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "--runs" in r.output and "default: 20" in r.output and "--noise-draw" in r.output
    options = re.findall(r"^│\s+(--[\w-]+)", r.output, re.MULTILINE)
    assert "--runs" in options and "--gate" not in options and "--aa-runs" not in options  # it sets both
