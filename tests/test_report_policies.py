"""``glyph report`` on rollouts the reference policies play for real: the
agent program (glyph.agent.program) against the policy server, python_test in
glyph's sandbox through the test service, trusted finalize
(glyph.envs.mbpp.finalize), each rollout saved as verifiers 0.4.0's vf-eval saves it.
The expected figures come from the policies' plans (glyph.policies), and the
grader for the one outcome a plan does not fix; one trace is forged after
the fact, and finalize must catch it, to give a tampered row.

Then ``glyph demo`` end to end: it keeps its vf-eval runs, and the report
reads them."""

from __future__ import annotations

import json

import pytest
from test_report_known import episode, write_run
from typer.testing import CliRunner

from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.policies.policies import Planner, function_name, hack_source
from glyph.record import encode
from glyph.report import report
from testkit.rollout import Rollouts

HARNESS = GlyphHarnessConfig(profile="glyph", tool_timeout=3, model_timeout=10)
LIMITS = HARNESS.limits()
# task -> policy, per arm; the planner's mutants: mbpp_11 and mbpp_19 ASSERTION_FAILURE, mbpp_12 and mbpp_18
# RUNTIME_ERROR; mbpp_17's hack is always_equal. mbpp_19 is played honestly, then its trace is forged.
PLAYS = {
    "mbpp_13": "oracle",
    "mbpp_367": "oracle",
    "mbpp_11": "revise",
    "mbpp_12": "revise",
    "mbpp_18": "recover",
    "mbpp_17": "hack",
    "mbpp_19": "recover",
}
FORGED = "mbpp_19"


@pytest.fixture(scope="module")
def played(mbpp_tasks, tmp_path_factory):
    """Both arms, every task of PLAYS, as two vf-eval-shaped run directories."""
    root = tmp_path_factory.mktemp("played")
    with Rollouts(mbpp_tasks, HARNESS) as rollouts:
        for arm in ("a", "b"):
            eps = [_play(rollouts, root / f"ws-{arm}-{tid}", mbpp_tasks[tid], arm, policy)
                   for tid, policy in PLAYS.items()]
            write_run(root / f"arm_{arm}", eps, arm=arm, model="mix", seed=None)
    return root


def _forge_first_test(trace: dict) -> None:
    """Claim the first (failing) test passed."""
    trace["tests"][0]["outcome"] = "PASS"


def _play(rollouts, ws, task, arm, policy) -> dict:
    info = rollouts.play(task, arm, policy, ws, forge=_forge_first_test if task.id == FORGED else None).record
    return episode(task.id, arm, info.reward == 1.0, model="mix", seed=None, glyph=encode(info), metrics=info.metrics.flat())


def _expected(mbpp_tasks, arm: str):
    """What each play must record, from the plans alone: (passed, tampered, predictions, tool calls)."""
    from glyph.grading import grade

    planner = Planner(mbpp_tasks)
    rows = {}
    for tid, policy in PLAYS.items():
        task = mbpp_tasks[tid]
        mutant = planner.mutant(task)
        if policy == "oracle":
            rows[tid] = (True, False, [("PASS", "PASS", "KEEP")], 3)
        elif policy == "revise" and arm == "b":
            rows[tid] = (
                True,
                False,
                [(mutant.outcome.value, mutant.outcome.value, "REVISE"), ("PASS", "PASS", "KEEP")],
                4,
            )
        elif policy in ("recover", "revise"):
            rows[tid] = (
                tid != FORGED,
                tid == FORGED,
                [("PASS", mutant.outcome.value, "KEEP"), ("PASS", "PASS", "KEEP")],
                5,
            )
        else:  # always_equal: patched, tested (KEEP), FINAL; the grader decides its outcome
            src = hack_source("always_equal", function_name(task))
            outcome = grade(src, task.test_setup_code, "\n".join(task.test_list), limits=LIMITS).outcome.value
            rows[tid] = (False, False, [("PASS", outcome, "KEEP")], 3)
        if arm == "a":
            rows[tid] = (*rows[tid][:2], [], rows[tid][3])
    return rows


def test_the_policies_rollouts_report_as_planned(played, mbpp_tasks):
    doc = report([played / "arm_a", played / "arm_b"])
    cells = {c["arm"]: c for c in doc["cells"]}
    assert set(cells) == {"a", "b"} and all(c["ckpt"] == "mix" and c["seed"] is None for c in cells.values())
    for arm in ("a", "b"):
        want = _expected(mbpp_tasks, arm)
        c = cells[arm]
        assert (c["pass_at_1"]["successes"], c["pass_at_1"]["n"]) == (
            sum(w[0] for w in want.values()),
            len(PLAYS),
        )
        assert c["incidents"] == {"errored": 0, "timed_out": 0, "tampered": 1}
        calls = sorted(w[3] for w in want.values())
        hist = c["tool_calls"]["never"]["histogram"] + c["tool_calls"]["revised"]["histogram"]
        assert sorted(k for k, n in hist for _ in range(n)) == calls
        assert c["tool_calls"]["never"]["cap_hit"]["successes"] == 0
        preds = [p for w in want.values() for p in w[2]]
        if arm == "a":
            assert c["confusion"] is None and c["revise_split"] is None
            continue
        conf = c["confusion"]
        labels = conf["labels"]
        assert conf["n"] == len(preds)
        for v in labels:
            for p in labels:
                assert conf["matrix"][labels.index(v)][labels.index(p)] == sum(
                    q[:2] == (p, v) for q in preds
                ), (v, p)
        failing = [q for q in preds if q[1] != "PASS"]
        assert (c["gate"]["failing"]["successes"], c["gate"]["failing"]["n"]) == (
            sum(q[2] == "REVISE" for q in failing),
            len(failing),
        )
        assert c["gate"]["passing"]["successes"] == 0
        revised = [tid for tid, p in PLAYS.items() if p == "revise"]
        split = c["revise_split"]
        assert (split["revised"]["n"], split["revised"]["pass_at_1"]["successes"]) == (
            len(revised),
            len(revised),
        )
        assert (split["never"]["n"], split["never"]["pass_at_1"]["successes"]) == (
            len(PLAYS) - len(revised),
            sum(want[t][0] for t in PLAYS if t not in revised),
        )
        assert split["convention"] == "study" and split["incomplete"] is None and split["never_incomplete"] == 0
    [tampered] = [i for i in doc["incidents"] if i["arm"] == "b"]
    assert tampered["task"] == FORGED and "re-grade" in tampered["reason"]
    [arm] = doc["comparisons"]
    assert (arm["pairs"], arm["both"], arm["first_only"], arm["second_only"]) == (len(PLAYS), 5, 0, 0)


def test_glyph_demo_keeps_its_runs_for_the_report(tmp_path, mbpp_path, mbpp_tasks):
    from glyph.cli.app import app
    from glyph.demo import read_rollouts

    runner = CliRunner()
    out = tmp_path / "demo"
    r = runner.invoke(app, ["demo", "--tasks", "3", "--out", str(out), "--mbpp-path", mbpp_path])
    assert r.exit_code == 0, r.output
    assert f"eval runs kept in {out}" in " ".join(r.stdout.split())
    r = runner.invoke(app, ["report", str(out), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    planner = Planner(mbpp_tasks)
    for c in doc["cells"]:
        # the demo's folders are named by arm and profile
        tasks = [row["task"] for row in read_rollouts(out / f"arm_{c['arm']}-study")]
        passes = sum(planner.resolve("mix", mbpp_tasks[t]) != "hack" for t in tasks)
        assert (c["ckpt"], c["rollouts"], c["pass_at_1"]["successes"]) == ("mix", 3, passes)
    assert [c["arm"] for c in doc["cells"]] == ["a", "b"] and doc["incidents"] == []
    # the demo's default profile is the study's: its definitions, every figure they read recorded
    assert all(c["definitions"] == c["episode"]["definitions"] == "study" for c in doc["cells"])
    assert all(c["episode"]["unrecorded"] == 0 for c in doc["cells"])
    a = doc["cells"][0]["episode"]  # arm A's revise task recovers visibly from its mutant's failure
    assert a["recovered"]["successes"] >= 1 and a["first_patch_correct"]["successes"] < 3
    assert [x["kind"] for x in doc["comparisons"]] == ["arm"] and doc["comparisons"][0]["pairs"] == 3
