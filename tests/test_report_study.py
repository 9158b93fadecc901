"""``glyph report`` on hand-built study-profile runs: each rollout is read by
its recorded profile's definitions (its harness record; here the ``glyph_*``
keys an earlier glyph wrote), the study's (PREDICT ``src/glyph/taskset.py``
and ``passk.py``: first patch from the first prediction target, else the
first visible test; recovered is a visible PASS after the first visible
failure, and passed; an invalid label is the class INVALID) or glyph's, and
the output names which. The episode metrics are the ones finalize recorded
by the profile's definitions (``glyph.profiles``: derived once, there)."""

from __future__ import annotations

import pytest
from test_report_known import AF, P, cell, episode, prop, write_run
from typer.testing import CliRunner

from glyph.agent.trace import StudyTrace, TestCall, VerifiedCandidate
from glyph.cli.app import app
from glyph.profiles import get as profile_named
from glyph.profiles.study import study_episode
from glyph.report import MixedRuns, Options, report, write

RE = "RUNTIME_ERROR"


def rollout(task, arm, passed, targets=(), visible=(), profile="study", metrics=None, **kw):
    """``targets``: (sampled, verified, decision) per prediction target (Arm B); ``visible``: the
    trusted outcome of each visible python_test, in order. A study rollout's episode metrics are the
    study's, as finalize records them (``study_episode``); a glyph one's are ``metrics``."""
    if profile == "study":
        first, failed, recovered = study_episode(targets[0][1] if targets else None, list(visible))
        metrics = {"first_patch_correct": float(first), "had_executed_failure": float(failed),
                   "recovered_after_executed_failure": float(recovered)}
    ep = episode(task, arm, passed, calls=len(visible) + 2, tests=len(visible), metrics=metrics, **kw)
    [trace] = ep["traces"]
    g = trace["info"]["glyph"]
    g["candidates"] = [
        {"index": i, "sha256": f"{i:064x}", "sampled_label": s, "verified_label": v, "decision": d,
         "shadow": d == "REVISE", "prediction_turn": f"<PREDICTION>{s}</PREDICTION>"}
        for i, (s, v, d) in enumerate(targets)
    ]
    g["visible_outcomes"] = list(visible)
    proto = {"arm": arm, "max_tool_calls": 8, "test_cost": 1}
    trace["info"]["glyph_protocol"] = proto | ({"profile": "study"} if profile == "study" else {})
    return ep


def arm_b(profile: str) -> list[dict]:
    # glyph's own metrics, as finalize would have written them for the same rollouts
    m = lambda first, failed, rec: {"first_patch_correct": first, "had_executed_failure": failed,
                                    "recovered_after_executed_failure": rec}
    return [
        rollout("t1", "b", True, [(P, P, "KEEP")], [P], profile, m(1.0, 0.0, 0.0)),
        rollout("t2", "b", True, [("MAYBE", AF, "KEEP"), (P, P, "KEEP")], [AF, P], profile, m(0.0, 1.0, 1.0)),
        # a shadow-tested failing first patch, then a passing one tested visibly: the study's first patch is
        # the first target's (failing), not the first visible test's (passing)
        rollout("t3", "b", True, [(AF, AF, "REVISE"), (P, P, "KEEP")], [P], profile, m(0.0, 0.0, 0.0)),
        rollout("t4", "b", False, [(P, AF, "KEEP"), (P, RE, "KEEP")], [AF, RE], profile, m(0.0, 1.0, 0.0)),
        # a visible PASS after a failure, but the final solution fails the hidden tests: not recovered
        rollout("t5", "b", False, [(P, AF, "KEEP"), (P, P, "KEEP")], [AF, P], profile, m(0.0, 1.0, 0.0)),
        episode("t6", "b", kind="errored"),
    ]


def arm_a() -> list[dict]:
    return [
        rollout("t1", "a", True, (), [AF, P]),
        rollout("t2", "a", False, (), []),  # never tested: no first patch correct
        rollout("t3", "a", True, (), [P]),
    ]


def test_study_rollouts_take_the_studys_definitions(tmp_path):
    doc = report([write_run(tmp_path / "b", arm_b("study"), arm="b"), write_run(tmp_path / "a", arm_a())])
    b = cell(doc, "b", "7", "ckptX")
    assert b["definitions"] == b["episode"]["definitions"] == "study"
    e = b["episode"]
    assert prop(e["first_patch_correct"]) == (1, 6)  # t1 only: t3's first target failed
    assert prop(e["executed_failure"]) == (3, 6)  # t2, t4, t5
    assert prop(e["recovered"]) == (1, 3) and e["unrecorded"] == 0  # t2: t5's PASS did not solve it
    conf = b["confusion"]
    assert conf["predicted_labels"][-1] == "INVALID" and conf["invalid"] == 1 and conf["n"] == 9
    row = conf["labels"].index(AF)
    assert conf["matrix"][row][conf["predicted_labels"].index("INVALID")] == 1
    assert prop(conf["accuracy"]) == (5, 9)  # an INVALID label is never right
    assert prop(b["gate"]["failing"]) == (1, 5)  # every target counts, the invalid one too
    a = cell(doc, "a", "7", "ckptX")
    assert a["definitions"] == "study" and prop(a["episode"]["first_patch_correct"]) == (1, 3)  # t3
    assert prop(a["episode"]["recovered"]) == (1, 1)
    paths = write(doc, tmp_path / "out")  # the INVALID column is drawn and written too
    assert "INVALID" in paths["markdown"].read_text() and paths["html"].stat().st_size > 10_000


def test_glyph_rollouts_keep_glyphs_definitions(tmp_path):
    doc = report([write_run(tmp_path / "b", arm_b("glyph"), arm="b")])
    b = cell(doc, "b", "7", "ckptX")
    e = b["episode"]
    assert b["definitions"] == "glyph" and prop(e["first_patch_correct"]) == (1, 6)
    assert prop(e["executed_failure"]) == (3, 6) and prop(e["recovered"]) == (1, 3)
    conf = b["confusion"]  # glyph counts predictions with an outcome-class label only
    assert "INVALID" not in conf["predicted_labels"] and conf["n"] == 8 and prop(conf["accuracy"]) == (5, 8)


def test_the_definitions_differ_where_the_first_visible_test_is_not_the_first_patch():
    """Arm A patched twice before its first test, which passed: the study's first patch is the first
    visible test's (passing), glyph's the first candidate's (failing). Recovered: glyph's needs a pass
    of the rollout, the study's a visible PASS after the first visible failure."""
    cands = [VerifiedCandidate(index=0, sha256="a", verified_label=AF), VerifiedCandidate(index=1, sha256="b",
                                                                                         verified_label=P)]
    trace = StudyTrace(tests=[TestCall(call="3", sha256="b", outcome=P)])
    study = profile_named("study").prediction_metrics(trace, cands, [P], passed=True)
    glyph = profile_named("glyph").prediction_metrics(trace, cands, [P], passed=True)
    assert (study["first_patch_correct"], glyph["first_patch_correct"]) == (1.0, 0.0)
    failed_then_passed = [AF, P]
    assert profile_named("study").prediction_metrics(trace, cands, failed_then_passed, passed=False)[
        "recovered_after_executed_failure"] == 1.0  # whatever the reward
    assert profile_named("glyph").prediction_metrics(trace, cands, failed_then_passed, passed=False)[
        "recovered_after_executed_failure"] == 0.0


def test_a_cell_mixing_profiles_is_refused_unless_labelled(tmp_path):
    runs = [write_run(tmp_path / "s", arm_b("study")[:2], arm="b"),
            write_run(tmp_path / "g", arm_b("glyph")[2:4], arm="b")]
    with pytest.raises(MixedRuns, match="profile"):
        report(runs)
    doc = report(runs, [{"arm": "b", "seed": "7", "ckpt": "x"}] * 2)
    assert doc["cells"][0]["definitions"] == "mixed"


def test_the_output_names_the_definitions_and_the_convention(tmp_path):
    run = write_run(tmp_path / "b", arm_b("study"), arm="b")
    r = CliRunner().invoke(app, ["report", str(run), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "First-patch correctness and recovery after an executed failure" in text
    assert "| b | 7 | ckptX | study | 16.7% [3.0, 56.4] | 50.0% [18.8, 81.2] | 33.3% [6.1, 79.2] |" in text
    assert "Definitions: study: the study's" in text and "(study convention)" in text
    assert "INVALID" in text
    doc = report([run], options=Options(convention="glyph"))
    assert cell(doc, "b", "7", "ckptX")["revise_split"]["incomplete"]["n"] == 1
