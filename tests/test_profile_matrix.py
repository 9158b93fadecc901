"""Every command that reads or replays a rollout works on both profiles: the
profile x command matrix over ``glyph demo``, ``glyph report``, ``glyph
flywheel credit`` (one fork and several) and ``glyph study replay``, on one
``glyph demo`` run per profile (``demo_runs`` in conftest.py; the eval CLI of
the verifiers installed, so tests/test_pin.py runs this file at PRIME-RL's
verifiers pin too). PREDICT's annotate on both profiles' rollouts is
``tests/pin/test_prime_rl_adapter.py``; the eval CLI's own output on both is
``test_eval_profiles.py``.

Credit on the same trajectory names the same earliest step under both
profiles: the demo's failed rollout (the hack policy on mbpp_12, Arm A), and a
trajectory that burns its budget (the reference policies' ``fault-budget``),
played under each profile's grammar."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.envs.mbpp.harness import GlyphHarnessConfig

PROFILES = ("study", "glyph")
FAILED = "mbpp_12"  # the mix policy plays hack on it: a failed rollout in both arms
runner = CliRunner()


@pytest.mark.parametrize("profile", PROFILES)
def test_glyph_demo(demo_runs, profile):
    run = demo_runs[profile]
    assert run.code == 0, run.text[-3000:]
    assert "All as expected." in run.text and f"profile: {profile}" in run.text
    assert sorted(p.name for p in run.out.iterdir()) == [f"arm_a-{profile}", f"arm_b-{profile}"]


@pytest.mark.parametrize("profile", PROFILES)
def test_glyph_report(demo_runs, profile, tmp_path):
    out = demo_runs[profile].out
    r = runner.invoke(app, ["report", str(out), "--format", "json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [(c["arm"], c["definitions"], c["rollouts"]) for c in doc["cells"]] == [("a", profile, 3),
                                                                                  ("b", profile, 3)]
    b = doc["cells"][1]
    assert b["confusion"]["n"] >= 3 and b["revise_split"]["revised"]["n"] == 1  # revise, hack, oracle
    assert {p.name for p in tmp_path.iterdir()} == {"report.json", "report.md", "report.html"}


def _credit(out, profile: str, arm: str, *extra: str) -> dict:
    r = runner.invoke(app, ["flywheel", "credit", str(out / f"arm_{arm}-{profile}"), "--task", FAILED, "--json",
                            *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("forks", [1, 3])
def test_glyph_flywheel_credit(demo_runs, mbpp_path, profile, forks):
    """Credit replays the failed rollout through its own profile's episode (the study's one-line turns and
    tool messages too), every observation as recorded."""
    for arm in ("a", "b"):
        doc = _credit(demo_runs[profile].out, profile, arm, "--mbpp-path", mbpp_path, "--forks", str(forks))
        assert doc["divergences"] == [] and doc["task"] == FAILED and doc["forks"] == forks, doc["notes"]
        assert doc["final_outcome"] != "PASS" and doc["steps"][-1]["tool"] == "FINAL"
        assert all(s["forks"] == forks for s in doc["steps"])


def test_credit_on_the_demos_failed_rollout_agrees_across_profiles(demo_runs, mbpp_path):
    """The same policy on the same task, Arm A, under each profile: the same steps, the same verdict."""
    docs = {p: _credit(demo_runs[p].out, p, "a", "--mbpp-path", mbpp_path) for p in PROFILES}
    study, glyph = docs["study"], docs["glyph"]
    assert study["earliest_unreachable"] == glyph["earliest_unreachable"]
    assert [s["tool"] for s in study["steps"]] == [s["tool"] for s in glyph["steps"]]
    assert [s["budget_left"] for s in study["steps"]] == [s["budget_left"] for s in glyph["steps"]]


@pytest.mark.verifiers_free
def test_credit_names_the_same_earliest_step_under_both_profiles(mbpp_tasks, tmp_path):
    """The reference policies' ``fault-budget`` (the oracle's read, then reads until the budget is
    gone), played under each profile's grammar on the local runtime's wiring: the read that leaves
    less than a repair needs (a test, one patch, a test: 3 calls) is the earliest unreachable step in
    both; the credit replays every observation as recorded."""
    from glyph.credit import replay as credit
    from glyph.credit.trajectory import load_trajectory, resolve_task
    from testkit.rollout import Rollouts

    task = mbpp_tasks["mbpp_11"]
    reports = {}
    for profile in PROFILES:
        harness = GlyphHarnessConfig(profile=profile, tool_timeout=5, model_timeout=30)
        with Rollouts(mbpp_tasks, harness) as r:
            played = r.play(task, "a", "fault-budget", tmp_path / f"ws-{profile}")
        assert played.trace["end"] == "budget_exhausted"
        saved = tmp_path / f"{profile}.json"
        saved.write_text(json.dumps(played.trace))
        traj = load_trajectory(saved)
        assert traj.profile == profile
        found, notes = resolve_task(traj, mbpp_tasks)
        assert found.id == task.id and notes == []
        reports[profile] = credit.assign(traj, found)
    for rep in reports.values():
        assert rep.divergences == [] and rep.earliest_unreachable == 6
        assert [s.budget_left for s in rep.steps] == [8, 7, 6, 5, 4, 3, 2, 1, 0, 0]
    assert reports["study"].verdict.split(" (")[0] == reports["glyph"].verdict.split(" (")[0] == "step 6"


@pytest.mark.verifiers_free
@pytest.mark.parametrize("profile", PROFILES)
def test_glyph_study_replay(profile, mbpp_tasks, mbpp_path, tmp_path):
    """SFT traces of each profile (a direct and a recovery trace per arm, as ``glyph data prepare`` writes
    them) replay through their own profile's episode, which the command reads from their system prompt."""
    from glyph.data import sft, study

    task = mbpp_tasks["mbpp_11"]
    if profile == "glyph":
        mutant = sft.find_mutant(task, random.Random(1))
        rows = [t for m, v in ((None, "keep"), (mutant, "revise")) for t in sft.build_traces(task, m, v).values()]
    else:
        st = study.from_mbpp(task)
        recovery = study.one_step(st, study.Grader())
        rows = [study.sft_row(st, arm, rec, mode) for arm, rec, mode in (
            ("a", None, None), ("b", None, None), ("a", recovery, "visible"), ("b", recovery, "shadow"))]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["study", "replay", str(path), "--mbpp-path", mbpp_path])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == f"replay: {len(rows)}/{len(rows)} traces reproduce every observation"
    rows[-1]["messages"][3]["content"] += " (edited)"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["study", "replay", str(path), "--mbpp-path", mbpp_path])
    assert r.exit_code == 1 and f"trace {len(rows) - 1} (task 11): message 3 differs" in r.output
