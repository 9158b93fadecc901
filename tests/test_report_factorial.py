"""``glyph report`` on the four cells {arm A, arm B} x {observation CE (ECHO) off, on}
(issue 37), from hand-built eval runs whose every figure is known: both profiles,
two seeds, the ``echo`` label on every run (``--label arm=..,echo=..,seed=..,ckpt=..``).

Each profile's checkpoints carry their own ``ckpt`` label (``study-step100``,
``glyph-step100``): a cell is arm x echo x seed x checkpoint, so two profiles'
runs under one label would merge into one cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_known import AF, P, episode, prop, write_run
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.errors import RunError
from glyph.report import report, tables, write
from glyph.report.load import parse_label

TASKS = [f"t{i}" for i in range(1, 7)]
# pass or fail per task, per cell: A 2/6, A + ECHO 3/6, B 4/6, B + ECHO 5/6 (seed 42)
PASSES = {("a", "off"): "100100", ("a", "on"): "110100", ("b", "off"): "111100", ("b", "on"): "111110"}


def profile_episode(task: str, arm: str, passed: bool, profile: str, seed: int) -> dict:
    """One rollout of ``profile`` (the harness record names it); arm B predicts once: right on a pass,
    a wrong PASS on a failure."""
    preds = [(P, P, "KEEP")] if passed else [(P, AF, "KEEP")]
    ep = episode(task, arm, passed, preds if arm == "b" else (), seed=seed)
    for c in ep["traces"][0]["info"]["glyph"]["candidates"]:
        c["prediction_turn"] = f"<PREDICTION>{c['sampled_label']}</PREDICTION>"  # the study counts these
    ep["traces"][0]["info"]["glyph_harness"] = {
        "version": 1, "protocol": {"arm": arm, "max_tool_calls": 8, "test_cost": 1, "profile": profile}}
    return ep


@pytest.fixture()
def four_cells(tmp_path) -> tuple[list[Path], list[dict]]:
    """Both profiles' four cells at seed 42, and two of glyph's cells at seed 43."""
    roots, labels = [], []
    for profile in ("study", "glyph"):
        for (arm, echo), passes in PASSES.items():
            for seed in (42, 43):
                if seed == 43 and (profile == "study" or (arm, echo) not in (("a", "off"), ("b", "on"))):
                    continue
                bits = passes if seed == 42 else passes[::-1]
                eps = [profile_episode(t, arm, b == "1", profile, seed) for t, b in zip(TASKS, bits)]
                roots.append(write_run(tmp_path / f"{profile}-{arm}-{echo}-{seed}", eps, "eval", arm=arm,
                                       model=f"outputs/{profile}-arm-{arm}-{echo}/step_100", seed=seed))
                labels.append({"arm": arm, "echo": echo, "seed": str(seed), "ckpt": f"{profile}-step100"})
    return roots, labels


def test_the_four_cells_and_every_pair_by_profile_and_seed(four_cells):
    doc = report(*four_cells)
    groups = {(g["profile"], g["seed"]): g for g in doc["factorial"]}
    assert set(groups) == {("study", "42"), ("glyph", "42"), ("glyph", "43")}
    for profile in ("study", "glyph"):
        g = groups[profile, "42"]
        assert g["ckpt"] == f"{profile}-step100"
        assert [(c["arm"], c["echo"]) for c in g["cells"]] == list(PASSES)
        assert [prop(c["pass_at_1"]) for c in g["cells"]] == [(2, 6), (3, 6), (4, 6), (5, 6)]
        lo, hi = g["cells"][0]["pass_at_1"]["ci"]
        assert lo < 2 / 6 < hi
        # the prediction figures are arm B's: one prediction a rollout, right iff it passed
        for c in g["cells"]:
            if c["arm"] == "a":
                assert c["prediction_accuracy"] is None
            else:
                assert prop(c["prediction_accuracy"]) == prop(c["pass_at_1"])
                assert c["gate"] is not None
        pairs = {((x["first"]["arm"], x["first"]["echo"]), (x["second"]["arm"], x["second"]["echo"])): x
                 for x in g["pairs"]}
        assert len(pairs) == 6 and all(x["kind"] == "factorial" and x["pairs"] == 6 for x in pairs.values())
        for (k1, k2), x in pairs.items():
            one, two = PASSES[k1], PASSES[k2]
            both = sum(a == b == "1" for a, b in zip(one, two))
            first_only = sum(a == "1" and b == "0" for a, b in zip(one, two))
            second_only = sum(a == "0" and b == "1" for a, b in zip(one, two))
            assert (x["both"], x["first_only"], x["second_only"]) == (both, first_only, second_only)
            assert x["difference"]["value"] == pytest.approx((two.count("1") - one.count("1")) / 6)
        # B + ECHO against A: 3 discordant pairs, all one way: exact two-sided McNemar p = 2 / 2**3
        assert pairs[("a", "off"), ("b", "on")]["mcnemar_p"] == pytest.approx(0.25)
    [pair] = groups["glyph", "43"]["pairs"]
    assert prop(pair["first_pass_at_1"]) == (2, 6) and prop(pair["second_pass_at_1"]) == (5, 6)
    # the arm comparisons keep the observation CE fixed; the seed aggregates keep it apart
    assert all(x["first"]["echo"] == x["second"]["echo"] for x in doc["comparisons"] if x["kind"] == "arm")
    aggregates = {(a["arm"], a["echo"], a["ckpt"]) for a in doc["seed_aggregates"]}
    assert aggregates == {("a", "off", "glyph-step100"), ("b", "on", "glyph-step100")}


def test_the_rendered_report_shows_the_four_cells(four_cells, tmp_path):
    doc = report(*four_cells)
    tabs = {t.key: t for t in tables.tables(doc)}
    cells, pairs = tabs["factorial"], tabs["factorial_pairs"]
    assert [r[3] for r in cells.rows[:4]] == ["A", "A + ECHO", "B (PREDICT)", "B + ECHO"]
    assert len(cells.rows) == 4 + 4 + 2 and len(pairs.rows) == 6 + 6 + 1
    assert cells.rows[0][6] == "—" and cells.rows[2][6] != "—"  # prediction accuracy: arm B's only
    markdown = write(doc, tmp_path / "out")["markdown"].read_text()
    assert "Four cells: {arm A, arm B} x {observation CE (ECHO) off, on}" in markdown
    assert "B + ECHO" in markdown and "every pair, paired on shared tasks" in markdown
    roots, labels = four_cells
    args = ["report", *map(str, roots)]
    for label in labels:
        args += ["--label", ",".join(f"{k}={v}" for k, v in label.items())]
    r = CliRunner().invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["factorial"] == json.loads(json.dumps(doc["factorial"]))


def test_runs_without_the_echo_label_make_no_four_cell_table(four_cells):
    roots, labels = four_cells
    doc = report(roots, [{k: v for k, v in label.items() if k != "echo"} | {"ckpt": f"{i}"}
                         for i, label in enumerate(labels)])
    assert doc["factorial"] == [] and "factorial" not in {t.key for t in tables.tables(doc)}
    with pytest.raises(RunError, match="echo is on or off"):
        parse_label("arm=a,echo=maybe")
