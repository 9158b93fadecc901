"""``glyph flywheel import`` on small files written here in the original
flywheel's result schemas (its rl-loop.mjs run report, replication-report.mjs
aggregate and credit-real.mjs report; field names only, numbers made up)."""

import json
import math

import pytest
from typer.testing import CliRunner

from glyph.flywheel import original


def _wald(p: float, n: int) -> tuple[float, float]:
    half = 1.96 * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


def original_run(baseline=0.2, steps=(("a-mode", 0.35, "learned"), ("b-mode", 0.05, "rejected"),
                                      ("c-mode", -0.1, "rejected")), holdout=5, repeats=4, band_pp=None) -> dict:
    """A run report as rl-loop.mjs writes one: a rejected lesson keeps the level."""
    n = holdout * repeats
    band = 1.96 * math.sqrt(0.25 / n)
    lo, hi = _wald(baseline, n)
    curve = [{"round": 0, "mean": baseline, "lo": lo, "hi": hi, "status": "baseline"}]
    lessons, policy, level = [], [], baseline
    for i, (mode, gain, status) in enumerate(steps, 1):
        text = f"lesson for {mode}"
        if status == "learned":
            level += gain
            policy.append({"mode": mode, "text": text})
        lo, hi = _wald(level, n)
        curve.append({"round": i, "mean": level, "lo": lo, "hi": hi, "status": status, "lesson": text, "gain": gain})
        lessons.append({"round": i, "mode": mode, "lesson": text, "gain": gain, "status": status, "cluster": 7 - i})
    return {"experiment": "rl-on-trajectories", "agent": "codex", "lesson_writer": "codex", "backend": "daytona",
            "holdout": holdout, "train": 3, "repeats": repeats,
            "noise_band_pp": round(100 * band, 1) if band_pp is None else band_pp,
            "baseline": baseline, "final": level, "gain_pp": round(100 * (level - baseline), 1),
            "lessons_kept": len(policy), "policy": policy, "curve": curve, "lessons": lessons}


def replication(runs: list[dict]) -> dict:
    finals = [r["final"] for r in runs]
    return {"agg": {"n": len(runs), "baseline": {"mean": sum(r["baseline"] for r in runs) / len(runs)},
                    "final": {"mean": sum(finals) / len(finals), "lo": min(finals), "hi": max(finals),
                              "vals": finals}, "gain": {}, "modes": []},
            "runs": [{"baseline": r["baseline"], "final": r["final"], "lessons": r["lessons"]} for r in runs]}


def credit(passes=(4, 4, 3, 0, 0), forks=4) -> dict:
    return {"experiment": "credit-assignment-real", "backend": "daytona", "continuation": "reference",
            "steps": len(passes) - 1, "forks": forks, "criticalStep": 2, "located": 2,
            "checkpoints": [{"checkpoint": i, "forks": forks, "pass": p, "passRate": p / forks}
                            for i, p in enumerate(passes)]}


def _write(path, doc):
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_a_run_file_becomes_a_run_document_with_unknowns_marked(tmp_path):
    src, prov = original.load(_write(tmp_path / "r.json", original_run()))
    doc = original.run_doc(src, prov)
    assert (doc["baseline"], doc["final"], doc["gain_pp"]) == (0.2, 0.55, 35.0)
    assert (doc["K"], doc["n_holdout"], doc["n_train"], doc["gate"]) == (4, 5, 3, "band")
    assert doc["noise_band_pp"] == pytest.approx(100 * 1.96 * math.sqrt(0.25 / 20), abs=1e-4)
    assert doc["bands"]["two_rate_pp"] == pytest.approx(math.sqrt(2) * doc["noise_band_pp"], abs=1e-3)
    assert doc["bands"]["aa_pp"] is None
    for field in ("seed", "excluded", "stop", "tasks"):  # never invented
        assert doc[field] is None and field in doc["imported"]["unknown"]
    assert doc["imported"]["paired"].startswith("unavailable")
    assert all(les["paired"] is None for les in doc["lessons"])
    # a candidate's rate is the level before it plus its gain; a rejected one leaves the level
    assert [c["candidate"] for c in doc["curve"][1:]] == [0.55, 0.6, 0.45]
    assert [c["accepted"] for c in doc["curve"]] == [0.2, 0.55, 0.55, 0.55]
    assert [les["kept"] for les in doc["lessons"]] == [True, False, False]
    assert doc["kept_lessons"] == ["lesson for a-mode"]
    assert doc["imported"]["checks"] == [] and doc["imported"]["file"] == "r.json"
    assert len(doc["imported"]["sha256"]) == 64


def test_disagreements_with_what_a_file_reports_are_listed(tmp_path):
    # a 'learned' lesson whose gain is under the band, and a band the formula does not give
    bad = original_run(steps=(("a-mode", 0.05, "learned"),), band_pp=5.0)
    doc = original.run_doc(*original.load(_write(tmp_path / "bad.json", bad)))
    checks = " | ".join(doc["imported"]["checks"])
    assert "noise_band_pp 5.0 recorded" in checks and "disagrees with gain > band" in checks


def test_the_cli_redraws_runs_replication_credit_and_bands(tmp_path):
    from glyph.cli.app import app

    a = original_run()
    b = original_run(steps=(("b-mode", 0.3, "learned"), ("a-mode", 0.25, "learned"), ("c-mode", 0.0, "rejected")))
    lone = original_run(baseline=0.25, steps=(("c-mode", 0.4, "learned"),))  # in the replication only
    files = [_write(tmp_path / "rep1.json", a), _write(tmp_path / "rep2-K8.json", b | {"repeats": 8}),
             _write(tmp_path / "replication.json", replication([a, b | {"repeats": 8}, lone])),
             _write(tmp_path / "credit-real.json", credit())]
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["flywheel", "import", *map(str, files), "--out", str(out)],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output + r.stderr
    for rel in ("rep1/run.json", "rep1/curve.png", "rep1/curve.html", "rep2-K8/run.json",
                "replication/replicate.json", "replication/replicate.png", "credit-real/credit.json",
                "credit-real/credit.png", "bands.json", "bands.png"):
        assert (out / rel).is_file(), rel
    html = (out / "rep1" / "curve.html").read_text()
    assert "unavailable" in html and "rep1.json" in html and str(tmp_path) not in html

    rep = json.loads((out / "replication" / "replicate.json").read_text())
    assert rep["n_runs"] == 3 and rep["imported"]["matched_run_files"] == ["rep1.json", "rep2-K8.json"]
    assert rep["final"]["mean"] == pytest.approx((0.55 + 0.75 + 0.65) / 3, abs=1e-6)
    assert rep["K"] == [4, 8]  # mixed K, as the original's replication mixes K=6 and K=10
    lone_row = rep["runs"][2]
    assert lone_row["K"] is None and lone_row["climbed"] is None and rep["climbed"] is None  # band unknown there
    assert [row["climbed"] for row in rep["runs"][:2]] == [True, True]
    assert rep["imported"]["checks"] == []

    bands = json.loads((out / "bands.json").read_text())
    by = {row["run"]: row for row in bands["runs"]}
    assert by["rep2-K8.json"]["formula_pp"] == pytest.approx(100 * 1.96 * math.sqrt(0.25 / 40), abs=1e-3)
    assert by["rep1.json"]["recorded_pp"] == a["noise_band_pp"] and by["rep1.json"]["aa_pp"] is None

    cr = json.loads((out / "credit-real" / "credit.json").read_text())
    assert [c["pass_rate"] for c in cr["checkpoints"]] == [1.0, 1.0, 0.75, 0.0, 0.0]
    lo, hi = original.wilson(4, 4)
    assert cr["checkpoints"][0]["wilson_lo"] == pytest.approx(lo) and lo == pytest.approx(0.5101, abs=1e-4)
    assert hi == 1.0 and original.wilson(0, 4)[0] == 0.0
    assert (cr["critical_step"], cr["located"]) == (2, 2)

    narrow = CliRunner().invoke(app, ["flywheel", "import", *map(str, files), "--out", str(tmp_path / "o80")],
                                terminal_width=80)  # the summary table at the width of piped output
    assert narrow.exit_code == 0, narrow.output
    assert max(map(len, narrow.stdout.splitlines())) <= 80 and "…" not in narrow.stdout
    for name in ("rep1.json", "replication.json", "band recorded", "two-rate", "checks"):
        assert name in narrow.stdout


def test_a_file_of_another_schema_is_refused_naming_it(tmp_path):
    from glyph.cli.app import app

    f = _write(tmp_path / "x.json", {"experiment": "something-else"})
    r = CliRunner().invoke(app, ["flywheel", "import", str(f), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "not a result file of the original flywheel" in (r.output + r.stderr)
    r = CliRunner().invoke(app, ["flywheel", "import", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--out" in r.output
