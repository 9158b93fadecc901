"""``glyph report`` on hand-built eval runs whose every figure is known:
records in the layouts of vf-eval (verifiers 0.4.0), the PRIME-RL pin's
``eval`` and PRIME-RL's own rollout files, with errored, timed-out and
tampered rows, the plus metric, mixes and bad input.

The builders here write what those CLIs write (the fields the report
reads, in their places); tests/test_report_policies.py runs the same
report on records the reference policies produce."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.errors import RunError
from glyph.report import MixedRuns, Options, report, tables, write
from glyph.report.stats import wilson

HARNESS = {
    "id": "glyph-mbpp",
    "max_tool_calls": 8,
    "test_cost": 1,
    "revise_feedback": "none",
    "tool_timeout": 30.0,
}
METRIC_NAMES = (
    "passed",
    "first_patch_correct",
    "prediction_accuracy",
    "predictions",
    "bad_patch_rejection_rate",
    "unnecessary_rejection_rate",
    "recovered_after_executed_failure",
    "had_executed_failure",
    "visible_test_calls",
    "visible_tool_calls",
    "tampered",
    "budget_exhausted",
    "revise_count",
    "protocol_error",
    "no_trace",
)


def episode(
    task: str,
    arm: str,
    passed: bool = False,
    preds=(),
    calls: int = 3,
    kind: str = "ok",
    version: str = "0.4.0",
    model: str = "ckptX",
    seed: int | None = 7,
    plus: bool | None = None,
    base: bool | None = None,
    plus_graded: bool = True,  # False: the task has no plus tests (finalize records no plus_passed)
    hidden: str | None = None,
    harness: dict | None = None,
    tests: int = 1,
    budget_exhausted: bool = False,
    glyph: dict | None = None,
    metrics: dict | None = None,
) -> dict:
    """One verifiers episode of one glyph-mbpp rollout. ``preds``: (sampled, verified, decision) per
    predicted candidate. ``kind``: ok, tampered, timed_out, errored (endpoint failure), no_trace.
    ``plus``: finalize also graded the plus tests (``base``: the base suite's result, default ``passed``);
    ``hidden``: what the reward graded, as the taskset records it."""
    data = {"name": task, "prompt": [{"role": "user", "content": f"solve {task}"}], "arm": arm}
    if hidden:
        data["hidden"] = hidden
    task_json = {"type": "GlyphTask", "data": data}
    m = {name: 0.0 for name in METRIC_NAMES} | {
        "passed": float(passed),
        "visible_tool_calls": float(calls),
        "visible_test_calls": float(tests),
        "budget_exhausted": float(budget_exhausted),
        "predictions": float(len(preds)),
        "revise_count": float(sum(p[2] == "REVISE" for p in preds)),
    }
    if plus is not None:
        m["base_passed"] = float(passed if base is None else base)
        if plus_graded:
            m["plus_passed"] = float(plus)
    m |= metrics or {}
    g = {
        "reward": float(passed),
        "reason": "passed" if passed else "no visible test passed",
        "tamper": [],
        "candidates": [
            {
                "index": i,
                "sha256": f"{i:064x}",
                "sampled_label": s,
                "verified_label": v,
                "decision": d,
                "shadow": d == "REVISE",
                "context": [{"role": "user", "content": "..."}],
            }
            for i, (s, v, d) in enumerate(preds)
        ],
        "final_outcome": "PASS" if passed else "ASSERTION_FAILURE",
        "metrics": m,
        "program": {"exit_code": 0, "stderr": ""},
    } | (glyph or {})
    sampling = {"temperature": 0.0, "max_tokens": 512} | ({} if seed is None else {"seed": seed})
    trace = {
        "version": 1,
        "verifiers": {"version": version},
        "task": task_json,
        "agent": {
            "config": {"harness": harness or HARNESS, "model": model, "sampling": sampling},
            "name": "agent",
        },
        "nodes": [],
        "rewards": {"passed": {"score": float(passed), "weight": 1.0}},
        "metrics": m,
        "info": {"glyph": g},
        "ok": True,
        "errors": [],
    }
    ep = {"env": {"id": "glyph-mbpp"}, "task": task_json, "ok": True, "errors": [], "traces": [trace]}
    pin = not version.startswith("0.4")
    if kind == "tampered":
        g |= {
            "reward": 0.0,
            "tamper": ["test 3: recorded PASS, re-grade ASSERTION_FAILURE"],
            "reason": "tampered: test 3: recorded PASS, re-grade ASSERTION_FAILURE",
        }
        m |= {"tampered": 1.0, "passed": 0.0}
        trace["rewards"]["passed"]["score"] = 0.0
    elif kind == "timed_out" and not pin:
        trace["is_timeout"] = True
        g["reason"] = "the rollout timed out; the program did not finish (killed, or the rollout timed out)"
    elif kind == "errored" and not pin:
        g["reason"] = "ended by endpoint_error: model call failed: HTTP 500"
    elif kind in ("timed_out", "errored"):  # the pin: an errored, unscored trace
        message = (
            "agent timeout: rollout exceeded its 600s budget"
            if kind == "timed_out"
            else 'upstream 500: {"error": {"message": "injected failure"}}'
        )
        trace |= {
            "ok": False,
            "rewards": {},
            "metrics": {},
            "info": {},
            "stop_condition": "error",
            "errors": [{"type": "ProviderError", "message": message}],
        }
        ep["ok"] = False
    elif kind == "no_trace":  # an episode that failed before any trace
        ep |= {
            "ok": False,
            "traces": [],
            "errors": [{"type": "SetupError", "message": "sandbox setup failed"}],
        }
    return ep


def write_run(
    folder: Path,
    episodes: list[dict],
    layout: str = "vf-eval",
    arm: str = "a",
    model: str = "ckptX",
    seed: int | None = 7,
) -> Path:
    """``layout``: vf-eval (0.4.0), eval (the pin) or prime-rl (``folder`` is an orchestrator output dir,
    the episodes land in step 100's eval file)."""
    if layout == "prime-rl":
        steps = folder / "rollouts" / "step_100"
        for sub in ("eval/all", "eval/effective", "train/all"):
            (steps / sub).mkdir(parents=True)
        for ep in episodes:
            ep["env"]["name"] = "mbpp-val"
            ep["run"] = {
                "type": "train",
                "id": "r",
                "work": {"type": "eval", "step": 100, "policy": {"start": 99, "end": 99}},
            }
        lines = "".join(json.dumps(ep) + "\n" for ep in episodes)
        (steps / "eval/all/traces.jsonl").write_text(lines)
        (steps / "eval/effective/traces.jsonl").write_text(lines)  # never read: a subset of all
        (steps / "train/all/traces.jsonl").write_text(lines)  # never read: training rollouts
        return folder
    folder.mkdir(parents=True)
    config = {
        "env": {
            "taskset": {"id": "glyph-mbpp", "arm": arm, "split": "test", "seed": 42},
            "agent": {"harness": HARNESS},
        },
        "model": model,
        "sampling": {"temperature": 0.0, "max_tokens": 512} | ({"seed": seed} if seed else {}),
    }
    cfg = folder / ("configs/resolved/eval.json" if layout == "vf-eval" else "configs/eval.json")
    cfg.parent.mkdir(parents=True)
    cfg.write_text(json.dumps(config))
    (folder / "traces.jsonl").write_text("".join(json.dumps(ep) + "\n" for ep in episodes))
    return folder


AF, RE, P = "ASSERTION_FAILURE", "RUNTIME_ERROR", "PASS"


@pytest.fixture()
def study(tmp_path) -> list[Path]:
    """Four runs: arm A seed 7 (vf-eval), arm B seed 7 (the pin's eval), arm A seed 8, arm A at SFT."""
    a7 = [
        episode("t1", "a", True, calls=3),
        episode("t2", "a", True, calls=4),
        episode("t3", "a", calls=5),
        episode("t4", "a", calls=8, budget_exhausted=True),
        episode("t5", "a", kind="tampered", calls=3),
        episode("t6", "a", kind="timed_out", calls=2),
    ]
    v = "0.3.1.dev62"
    b7 = [
        episode("t1", "b", True, [(P, P, "KEEP")], 3, version=v, plus=True),
        episode("t2", "b", True, [(AF, AF, "REVISE"), (P, P, "KEEP")], 5, version=v, plus=True),
        episode(
            "t3",
            "b",
            False,
            [(P, RE, "REVISE"), (RE, AF, "REVISE"), (P, AF, "KEEP")],
            8,
            version=v,
            plus=False,
        ),
        episode("t4", "b", False, [(P, AF, "KEEP")], 4, version=v, plus=False),
        episode("t5", "b", kind="errored", version=v),
        episode("t6", "b", True, [(P, P, "KEEP")], 3, version=v, plus=False),
        episode("t7", "b", kind="no_trace", version=v),
    ]
    a8 = [episode(t, "a", ok, seed=8) for t, ok in (("t1", True), ("t2", False), ("t3", True), ("t4", True))]
    sft = [
        episode(t, "a", ok, model="sft", seed=None)
        for t, ok in (("t1", False), ("t2", True), ("t3", False), ("t4", False))
    ]
    return [
        write_run(tmp_path / "a7", a7),
        write_run(tmp_path / "b7", b7, "eval", arm="b"),
        write_run(tmp_path / "a8", a8, seed=8),
        write_run(tmp_path / "sft", sft, model="sft", seed=None),
    ]


def cell(doc, arm, seed, ckpt):
    [c] = [c for c in doc["cells"] if (c["arm"], c["seed"], c["ckpt"]) == (arm, seed, ckpt)]
    return c


def prop(p):
    return (p["successes"], p["n"])


def test_cells_come_from_the_records(study):
    doc = report(study)
    assert [(c["arm"], c["seed"], c["ckpt"]) for c in doc["cells"]] == [
        ("a", None, "sft"),
        ("a", "7", "ckptX"),
        ("a", "8", "ckptX"),
        ("b", "7", "ckptX"),
    ]
    assert [(r["source"], r["verifiers"], r["rollouts"]) for r in doc["runs"]] == [
        ("vf-eval", "0.4.0", 6),
        ("eval", "0.3.1.dev62", 7),
        ("vf-eval", "0.4.0", 4),
        ("vf-eval", "0.4.0", 4),
    ]
    assert doc["runs"][0]["sources"] == {"arm": "task records", "seed": "sampling.seed", "ckpt": "model name",
                                       "echo": "not recorded"}
    assert doc["runs"][3]["sources"]["seed"] == "not recorded"


def test_pass_at_1_counts_every_incident_as_a_failure(study):
    doc = report(study)
    a7, b7 = cell(doc, "a", "7", "ckptX"), cell(doc, "b", "7", "ckptX")
    assert prop(a7["pass_at_1"]) == (2, 6) and a7["pass_at_1"]["ci"] == list(wilson(2, 6))
    assert a7["incidents"] == {"errored": 0, "timed_out": 1, "tampered": 1}
    assert prop(b7["pass_at_1"]) == (3, 7) and b7["incidents"] == {
        "errored": 2,
        "timed_out": 0,
        "tampered": 0,
    }
    assert (b7["rollouts"], b7["tasks"]) == (7, 7)
    assert prop(cell(doc, "a", "8", "ckptX")["pass_at_1"]) == (3, 4)
    assert [(i["task"], i["kind"], i["line"]) for i in doc["incidents"]] == [
        ("t5", "tampered", 5),
        ("t6", "timed_out", 6),
        ("t5", "errored", 5),
        ("t7", "errored", 7),
    ]
    assert doc["incidents"][2]["reason"].startswith("upstream 500")
    assert doc["incidents"][3]["reason"] == "sandbox setup failed"


def test_plus_is_shown_where_recorded(study):
    doc = report(study)
    b7 = cell(doc, "b", "7", "ckptX")
    assert prop(b7["plus"]["pass_at_1"]) == (2, 7) and b7["plus"]["recorded"] == 5  # errored rows: failures
    assert prop(b7["base"]["pass_at_1"]) == (3, 7) and b7["reward_suite"] == "base"
    assert cell(doc, "a", "7", "ckptX")["plus"] is None


def test_base_and_plus_when_the_reward_grades_plus_and_where_no_plus_tests_were_found(tmp_path):
    on_plus = [
        episode("t1", "a", True, plus=True, base=True, hidden="plus"),
        episode("t2", "a", False, plus=False, base=True, hidden="plus"),  # answers only the shown asserts
        episode("t3", "a", kind="errored", version="0.3.1.dev62", hidden="plus"),
    ]
    on_base = [
        episode("t1", "b", True, [(P, P, "KEEP")], plus=False, plus_graded=False),  # no plus tests found
        episode("t2", "b", True, [(P, P, "KEEP")], plus=True),
    ]
    doc = report([write_run(tmp_path / "p", on_plus), write_run(tmp_path / "b", on_base, arm="b")])
    a, b = cell(doc, "a", "7", "ckptX"), cell(doc, "b", "7", "ckptX")
    assert a["reward_suite"] == "plus" and prop(a["pass_at_1"]) == (1, 3)
    assert prop(a["base"]["pass_at_1"]) == (2, 3) and prop(a["plus"]["pass_at_1"]) == (1, 3)
    assert (
        b["reward_suite"] == "base" and prop(b["plus"]["pass_at_1"]) == (1, 2) and b["plus"]["recorded"] == 1
    )
    assert any("1 scored rollout(s) have no plus grade" in n for n in doc["notes"])
    md = tables.markdown(doc)
    assert (
        "| a | 7 | ckptX | plus | 3 | 3 | 1 | 33.3% [6.1, 79.2] | 66.7% [20.8, 93.9] | 33.3% [6.1, 79.2] |"
        in md
    )
    assert (
        "| b | 7 | ckptX | base | 2 | 2 | 2 | 100.0% [34.2, 100.0] | 100.0% [34.2, 100.0] "
        "| 50.0% [9.5, 90.5] |" in md
    )
    with pytest.raises(MixedRuns, match="hidden: base vs plus"):
        report([write_run(tmp_path / "m", [episode("t1", "a", hidden="plus"), episode("t2", "a")])])


def test_revise_split_gate_and_tool_calls(study):
    b7 = cell(report(study, options=Options(convention="glyph")), "b", "7", "ckptX")
    s = b7["revise_split"]
    assert s["convention"] == "glyph" and s["never_incomplete"] == 0
    assert (s["never"]["n"], prop(s["never"]["pass_at_1"])) == (3, (2, 3))
    assert (s["revised"]["n"], prop(s["revised"]["pass_at_1"])) == (2, (1, 2))
    assert (s["incomplete"]["n"], prop(s["incomplete"]["pass_at_1"])) == (2, (0, 2))
    assert prop(s["revised"]["share"]) == (2, 7)
    assert prop(b7["gate"]["failing"]) == (3, 5) and prop(b7["gate"]["passing"]) == (0, 3)
    tc = b7["tool_calls"]
    assert tc["never"]["mean"]["value"] == pytest.approx(10 / 3) and prop(tc["never"]["cap_hit"]) == (0, 3)
    assert tc["revised"]["mean"]["value"] == 6.5 and prop(tc["revised"]["cap_hit"]) == (1, 2)
    assert tc["incomplete"] == 2 and tc["revised"]["histogram"] == [[5, 1], [8, 1]]
    lo, hi = tc["never"]["mean"]["ci"]
    assert 3.0 <= lo <= 10 / 3 <= hi <= 4.0


def test_the_study_convention_counts_the_incomplete_trajectories_as_never_revised_failures(study):
    """The two conventions differ by exactly the errored, timed-out and traceless rollouts (t5, t7):
    the study's split (its seed-42 run: 409 + 91 = 500) counts them in never revised, as failures."""
    glyph = cell(report(study, options=Options(convention="glyph")), "b", "7", "ckptX")["revise_split"]
    s = cell(report(study), "b", "7", "ckptX")["revise_split"]  # the default: the study's
    assert s["convention"] == "study" and s["incomplete"] is None
    assert s["never_incomplete"] == glyph["incomplete"]["n"] == 2
    assert s["never"]["n"] == glyph["never"]["n"] + glyph["incomplete"]["n"] == 5
    assert prop(s["never"]["pass_at_1"]) == (glyph["never"]["pass_at_1"]["successes"], 5) == (2, 5)
    assert s["revised"] == glyph["revised"]
    assert s["never"]["n"] + s["revised"]["n"] == 7  # every rollout
    r = CliRunner().invoke(app, ["report", *map(str, study), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert "(study convention)" in r.stdout and "never REVISE (KEEP only) (incl. 2 incomplete) | 5 |" in r.stdout
    r = CliRunner().invoke(app, ["report", *map(str, study), "--format", "markdown", "--convention", "glyph"])
    assert "(glyph convention)" in r.stdout and "| incomplete | 2 |" in r.stdout
    r = CliRunner().invoke(app, ["report", *map(str, study), "--convention", "prime"])
    assert r.exit_code == 2 and "--convention prime" in r.output


def test_arm_a_tool_calls_keep_the_tampered_trajectory_and_not_the_timed_out_one(study):
    a7 = cell(report(study), "a", "7", "ckptX")
    assert a7["revise_split"] is None and a7["gate"] is None and a7["confusion"] is None
    tc = a7["tool_calls"]
    assert tc["never"]["n"] == 5 and tc["never"]["mean"]["value"] == pytest.approx(4.6)
    assert prop(tc["never"]["cap_hit"]) == (1, 5) and tc["incomplete"] == 1 and tc["revised"]["n"] == 0


def test_confusion_matrix_precision_recall_share_and_base_rate(study):
    conf = cell(report(study), "b", "7", "ckptX")["confusion"]
    i = {label: k for k, label in enumerate(conf["labels"])}
    expected = {(P, P): 3, (AF, AF): 1, (RE, P): 1, (AF, RE): 1, (AF, P): 2}  # (verified, predicted): count
    assert conf["matrix"] == [[expected.get((v, p), 0) for p in conf["labels"]] for v in conf["labels"]]
    assert conf["n"] == 8 and prop(conf["accuracy"]) == (4, 8)
    k = {c["label"]: c for c in conf["classes"]}
    assert (prop(k[P]["precision"]), prop(k[P]["recall"])) == ((3, 6), (3, 3))
    assert (prop(k[P]["prediction_share"]), prop(k[P]["base_rate"])) == ((6, 8), (3, 8))
    assert (prop(k[AF]["precision"]), prop(k[AF]["recall"])) == ((1, 1), (1, 4))
    assert (prop(k[RE]["precision"]), prop(k[RE]["recall"]), prop(k[RE]["base_rate"])) == (
        (0, 1),
        (0, 1),
        (1, 8),
    )
    assert k["TIMEOUT"]["precision"]["value"] is None and i[P] == 0


def test_paired_comparisons_and_mcnemar(study):
    doc = report(study)
    by = {
        (x["kind"], x["first"]["ckpt"], x["second"]["arm"], x["second"]["seed"]): x
        for x in doc["comparisons"]
    }
    assert len(doc["comparisons"]) == 3
    arm = by[("arm", "ckptX", "b", "7")]
    assert (arm["pairs"], arm["both"], arm["first_only"], arm["second_only"], arm["neither"]) == (
        6,
        2,
        0,
        1,
        3,
    )
    assert (arm["unpaired_first"], arm["unpaired_second"]) == (0, 1)
    assert arm["mcnemar_p"] == 1.0 and arm["difference"]["value"] == pytest.approx(1 / 6)
    s7 = by[("checkpoint", "sft", "a", "7")]
    assert (s7["pairs"], s7["both"], s7["first_only"], s7["second_only"], s7["neither"]) == (4, 1, 0, 1, 2)
    assert s7["unpaired_second"] == 2
    s8 = by[("checkpoint", "sft", "a", "8")]
    assert (s8["both"], s8["first_only"], s8["second_only"], s8["neither"]) == (0, 1, 3, 0)
    assert s8["mcnemar_p"] == pytest.approx(2 * (1 + 4) / 16)
    assert prop(s8["first_pass_at_1"]) == (1, 4) and prop(s8["second_pass_at_1"]) == (3, 4)


def test_aggregation_over_seeds(study):
    [agg] = report(study)["seed_aggregates"]
    assert (agg["arm"], agg["ckpt"], agg["seeds"]) == ("a", "ckptX", ["7", "8"])
    assert [prop(p) for p in agg["per_seed"]] == [(2, 6), (3, 4)]
    assert agg["mean"]["value"] == pytest.approx((2 / 6 + 3 / 4) / 2)
    assert (agg["min"], agg["max"]) == (pytest.approx(1 / 3), 0.75) and agg["mean"]["n"] == 6
    lo, hi = agg["mean"]["ci"]
    assert lo < agg["mean"]["value"] < hi


def test_pass_at_k_over_several_samples(tmp_path):
    # three tasks x four samples: 4/4, 1/4, 0/4 passed; one task with two samples only
    eps = [
        episode(t, "a", ok)
        for t, oks in (("t1", [1, 1, 1, 1]), ("t2", [1, 0, 0, 0]), ("t3", [0, 0, 0, 0]), ("t4", [1, 0]))
        for ok in oks
    ]
    doc = report([write_run(tmp_path / "r", eps)], options=Options(ks=(1, 2, 4)))
    k = {p["k"]: p for p in doc["cells"][0]["pass_at_k"]}
    assert k[1]["value"] == pytest.approx((1 + 0.25 + 0 + 0.5) / 4) and k[1]["tasks"] == 4
    assert k[2]["value"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)  # 1 - C(3,2)/C(4,2) = 0.5; t4: 1 - 0/1
    assert k[4]["value"] == pytest.approx((1 + 1 + 0) / 3) and (k[4]["tasks"], k[4]["tasks_short"]) == (3, 1)
    assert prop(doc["cells"][0]["pass_at_1"]) == (6, 14)


def test_the_rendered_tables_print_what_was_built(study, tmp_path):
    r = CliRunner().invoke(app, ["report", *map(str, study), "--format", "markdown"])
    assert r.exit_code == 0, r.output
    md = r.stdout
    short = CliRunner().invoke(app, ["report", *map(str, study), "--format", "md"])  # as the file report.md
    assert short.exit_code == 0 and short.stdout == md, short.output
    bad = CliRunner().invoke(app, ["report", *map(str, study), "--format", "html"])
    assert bad.exit_code == 2 and "expected table, markdown (or md), json or none" in bad.stderr
    assert "| a | 7 | ckptX | 6 | 6 | 2 | 33.3% [9.7, 70.0] | — | — | 0 | 1 | 1 |" in md
    assert (
        "| b | 7 | ckptX | 7 | 7 | 3 | 42.9% [15.8, 75.0] | 42.9% [15.8, 75.0] | 28.6% [8.2, 64.1] "
        "| 2 | 0 | 0 |" in md
    )
    assert "| b | 7 | ckptX | chose REVISE | 2 | 28.6% [8.2, 64.1] | 50.0% [9.5, 90.5] |" in md
    assert "| b | 7 | ckptX | 5 | 60.0% [23.1, 88.2] | 3 | 0.0% [0.0, 56.1] |" in md
    assert "| b | 7 | ckptX | never REVISE (KEEP only) | 3 | 3.33 [" in md
    assert (
        "| PASS | 6 | 3 | 50.0% [18.8, 81.2] | 100.0% [43.9, 100.0] | 75.0% [40.9, 92.9] "
        "| 37.5% [13.7, 69.4] |" in md
    )
    assert "| ASSERTION_FAILURE | 2 | 1 | 1 | 0 | 0 | 0 | 4 |" in md
    assert re.search(
        r"\| arm \| arm a · seed 7 · ckptX \| arm b · seed 7 · ckptX \| 6 \| 2 \| 0 \| 1 \| 3 \| 33\.3% \| "
        r"50\.0% \| \+16\.7 pp \[[^]]+\] \| 1\.000 \| 0 / 1 \|",
        md,
    )
    assert "| a | ckptX | 2 | 7: 33.3%, 8: 75.0% | 54.2% [" in md
    assert "| r2 | errored | 1 | 5 | t5 | b | 7 | ckptX | upstream 500:" in md  # r2: the second run ...
    assert f"- r2: {study[1]}" in md  # ... named in full under the table


def test_strict_fails_on_incidents_only(study):
    runner = CliRunner()
    r = runner.invoke(app, ["report", *map(str, study), "--strict", "--format", "none"])
    assert r.exit_code == 1 and "4 rollout(s) errored, timed out or were tampered" in r.stderr
    clean = runner.invoke(app, ["report", str(study[2]), "--strict", "--format", "none"])
    assert clean.exit_code == 0, clean.output


def test_outputs_json_markdown_and_one_self_contained_html(study, tmp_path):
    doc = report(study)
    paths = write(doc, tmp_path / "out")
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(doc))
    assert doc["schema"] == "glyph.report/1"
    html = paths["html"].read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    # pass@1, the REVISE split, the confusion heatmap, calibration, tool calls; each a real PNG
    assert len(images) == 5 and all(base64.b64decode(i).startswith(b"\x89PNG\r\n") for i in images)
    assert not re.search(r"(src|href)=['\"]?(https?:|//|/)", html)  # nothing loaded from anywhere
    assert "Incidents: errored, timed-out and tampered rollouts (4)" in html
    assert "# glyph report" in paths["markdown"].read_text()
    r = CliRunner().invoke(app, ["report", *map(str, study), "--format", "json"])
    assert json.loads(r.stdout)["cells"] == json.loads(json.dumps(doc["cells"]))


def test_a_reason_holding_an_escaped_lone_surrogate_is_reported_escaped(tmp_path):
    """A traces.jsonl line whose JSON escapes a lone surrogate (msgspec refuses it,
    ``json`` gives it back): the report reads it escaped and writes its files."""
    eps = [episode("t1", "a", True), episode("t2", "a", glyph={"reason": "ended by program_error: odd \ud800"})]
    run = write_run(tmp_path / "a", eps)
    assert "odd \\ud800" in (run / "traces.jsonl").read_text()
    doc = report([run])
    paths = write(doc, tmp_path / "out")
    assert "odd \\\\ud800" in paths["json"].read_text(encoding="utf-8")  # the backslash, JSON-escaped
    for kind in ("markdown", "html"):
        assert "odd \\ud800" in paths[kind].read_text(encoding="utf-8"), kind


def test_prime_rl_rollouts_are_read_from_the_eval_all_file(tmp_path):
    eps = [
        episode("t1", "b", True, [(P, P, "KEEP")], version="0.3.1.dev62", model="base"),
        episode("t2", "b", kind="errored", version="0.3.1.dev62", model="base"),
    ]
    root = write_run(tmp_path / "outputs" / "arm-b-seed42", eps, "prime-rl")
    doc = report([root])
    [run] = doc["runs"]
    assert run["source"] == "prime-rl" and run["path"].endswith("step_100/eval/all#mbpp-val")
    assert run["rollouts"] == 2 and run["values"]["ckpt"] == ["step100"]
    assert run["sources"]["ckpt"] == "PRIME-RL step"
    assert prop(doc["cells"][0]["pass_at_1"]) == (1, 2) and doc["cells"][0]["incidents"]["errored"] == 1


def test_a_run_mixing_arms_is_refused_unless_labelled(tmp_path):
    mixed = write_run(tmp_path / "m", [episode("t1", "a", True), episode("t2", "b", True, [(P, P, "KEEP")])])
    with pytest.raises(MixedRuns, match=r"mixes arm a \(1 rollouts\) and arm b \(1 rollouts\).*--label"):
        report([mixed])
    doc = report([mixed], [{"arm": "b", "ckpt": "step100"}])
    assert [(c["arm"], c["ckpt"], c["rollouts"]) for c in doc["cells"]] == [("b", "step100", 2)]
    assert any("mixes arm a" in n and "taken as labelled" in n for n in doc["notes"])


def test_runs_of_different_configurations_in_one_cell_are_refused_unless_labelled(tmp_path):
    r1 = write_run(tmp_path / "r1", [episode("t1", "a", True)])
    r2 = write_run(tmp_path / "r2", [episode("t1", "a", False, harness=HARNESS | {"max_tool_calls": 16})])
    with pytest.raises(MixedRuns, match="differ in configuration .max_tool_calls: 16 vs 8."):
        report([r1, r2])
    doc = report([r1, r2], [{"ckpt": "x"}, {"ckpt": "x"}])
    assert len(doc["cells"]) == 1 and any("max_tool_calls" in n for n in doc["notes"])
    doc = report([r1, r2], [{"ckpt": "budget8"}, {"ckpt": "budget16"}])
    assert len(doc["cells"]) == 2


def test_labels_override_the_records(study):
    doc = report(study[:2], [{"seed": "42", "ckpt": "step100"}, {"seed": "42", "ckpt": "step100"}])
    assert [(c["arm"], c["seed"], c["ckpt"]) for c in doc["cells"]] == [
        ("a", "42", "step100"),
        ("b", "42", "step100"),
    ]
    assert doc["runs"][0]["sources"] == {"arm": "task records", "seed": "label", "ckpt": "label",
                                         "echo": "not recorded"}


def test_bad_input_is_one_line_naming_the_file_and_line(tmp_path, study):
    bad = write_run(tmp_path / "bad", [episode("t1", "a", True)] * 2)
    with (bad / "traces.jsonl").open("a") as f:
        f.write('{"id": "x", "traces": [\n')
    with pytest.raises(RunError, match=re.escape(f"{bad / 'traces.jsonl'}:3: not valid JSON")):
        report([bad])
    runner = CliRunner()
    r = runner.invoke(app, ["report", str(bad)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "traces.jsonl:3:" in r.stderr
    r = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert (
        r.exit_code == 2 and "nope: no such directory" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    )
    (tmp_path / "empty").mkdir()
    r = runner.invoke(app, ["report", str(tmp_path / "empty")])
    assert r.exit_code == 2 and "no eval run under it" in r.stderr
    (bad / "traces.jsonl").write_text('{"id": "x"}\n')
    r = runner.invoke(app, ["report", str(bad)])
    assert r.exit_code == 2 and "traces.jsonl:1: not a verifiers episode" in r.stderr
    r = runner.invoke(app, ["report", *map(str, study), "--label", "arm=c"])
    assert r.exit_code == 2 and "arm is a or b" in r.stderr
    r = runner.invoke(app, ["report", *map(str, study), "--label", "arm=a", "--label", "arm=b"])
    assert r.exit_code == 2 and "2 --label for 4 RUN_DIR" in r.stderr


def test_a_run_given_twice_is_refused_and_an_effective_file_is_not_taken_for_all(tmp_path, study):
    with pytest.raises(RunError, match="is given twice"):
        report([study[0], study[0]])
    root = write_run(tmp_path / "prl", [episode("t1", "b", True, [(P, P, "KEEP")])], "prime-rl")
    with pytest.raises(RunError, match="eval/effective is the non-errored subset"):
        report([root / "rollouts" / "step_100" / "eval" / "effective"])
    assert report([root / "rollouts" / "step_100" / "eval" / "all"])["runs"][0]["source"] == "prime-rl"


def test_default_k_follows_the_samples_and_versions_spell_a_seed_alike(tmp_path):
    # the pin records sampling.seed as "42", 0.4.0 as 42: one configuration, one cell
    eps = [episode(f"t{i}", "a", i % 2 == 0, seed=42) for i in range(3) for _ in range(4)]
    pin = [episode("t9", "a", True, seed="42", version="0.3.1.dev62")]
    doc = report([write_run(tmp_path / "r", eps), write_run(tmp_path / "p", pin, "eval", seed="42")])
    [c] = doc["cells"]
    assert [p["k"] for p in c["pass_at_k"]] == [1, 2] and c["seed"] == "42" and c["rollouts"] == 13
    assert c["pass_at_k"][1]["tasks"] == 3 and c["pass_at_k"][1]["tasks_short"] == 1
