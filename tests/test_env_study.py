"""glyph-mbpp under ``profile = "study"``: the study's prompt, workspace and
episode (``StudyEpisode``) end to end on the local runtime's wiring
(``Rollouts.play``: the trusted test service, the program, finalize), the
model's replies the assistant turns of study-profile SFT traces
(``glyph.data.study``); the study's reward rule with glyph's trusted records."""

import asyncio
import json
import types

import pytest
from test_env import FakeRuntime

from glyph import record
from glyph.agent import program
from glyph.agent import study as S
from glyph.agent.profiles.study import STUDY, call_line, prompt
from glyph.data import study
from glyph.envs.mbpp.finalize.end import ModelReplies, replies_account
from glyph.envs.mbpp.harness import GlyphHarness, GlyphHarnessConfig
from testkit.rollout import Rollouts, Scripted

HARNESS = GlyphHarnessConfig(profile="study", tool_timeout=5, model_timeout=30)
TASK = "mbpp_11"


@pytest.fixture(scope="module")
def rollouts(mbpp_tasks):
    with Rollouts(mbpp_tasks, HARNESS) as r:
        yield r


def turns(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant"]


def view(messages: list[dict]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in messages]


def play(rollouts, tmp_path, task, arm, replies, **kw):
    with Scripted(replies) as model:
        return rollouts.play(task, arm, "script", tmp_path / f"ws-{arm}", model=model, **kw)


def test_the_study_profile_takes_the_study_settings_unless_given():
    cfg = GlyphHarnessConfig(profile="study")
    assert (cfg.max_tool_calls, cfg.tool_timeout, cfg.model_timeout) == (8, 30.0, 1800.0)
    assert (cfg.limits().cpu_s, cfg.limits().wall_s) == (30.0, 30.0)  # the study's limit is wall clock
    assert GlyphHarnessConfig(profile="study", tool_timeout=5).tool_timeout == 5
    assert GlyphHarnessConfig().profile == "study" and GlyphHarnessConfig() == cfg  # the default
    glyph = GlyphHarnessConfig(profile="glyph")
    assert (glyph.tool_timeout, glyph.model_timeout, glyph.limits().wall_s) == (10.0, 300.0, 20.0)


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_a_direct_sft_trace_passes(rollouts, tmp_path, mbpp_tasks, arm):
    task = mbpp_tasks[TASK]
    st = study.from_mbpp(task)
    row = study.sft_row(st, arm, None, None)
    played = play(rollouts, tmp_path, task, arm, turns(row["messages"]))
    assert played.trace["messages"][:2] == prompt(arm, st.text, st.test_code, st.project) == row["messages"][:2]
    assert view(played.trace["messages"]) == view(row["messages"])  # every observation is the trace's own
    assert played.trace["end"] == "final" and played.trace["protocol_errors"] == []
    rec = played.record
    assert rec.reward == 1.0 and rec.tamper == [] and rec.reason == "passed", rec.reason
    assert (played.workspace / st.solution_path).read_text() == st.code
    if arm == "b":
        [target] = played.trace["prediction_targets"]
        assert (target["verified_label"], target["shadow"]) == ("PASS", False)
        assert [(c.sampled_label, c.verified_label) for c in rec.candidates] == [("PASS", "PASS")]


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm,mode", [("a", "visible"), ("b", "visible"), ("b", "shadow")])
def test_a_recovery_sft_trace_passes(rollouts, tmp_path, mbpp_tasks, arm, mode):
    task = mbpp_tasks[TASK]
    st = study.from_mbpp(task)
    recovery = study.one_step(st, study.Grader())
    row = study.sft_row(st, arm, recovery, mode)
    played = play(rollouts, tmp_path, task, arm, turns(row["messages"]))
    assert view(played.trace["messages"]) == view(row["messages"])
    rec = played.record
    assert rec.reward == 1.0 and rec.tamper == [], rec.reason
    if mode == "shadow":
        [shadow] = [c for c in rec.candidates if c.shadow]
        assert shadow.verified_label == shadow.sampled_label == recovery.first_outcome
        assert rec.metrics.visible_test_calls == 1.0
    else:
        assert rec.metrics.had_executed_failure == 1.0 and rec.metrics.recovered_after_executed_failure == 1.0


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_a_trace_ending_in_a_protocol_error_scores_zero(rollouts, tmp_path, mbpp_tasks, arm):
    task = mbpp_tasks[TASK]
    replies = turns(study.sft_row(study.from_mbpp(task), arm, None, None)["messages"])
    replies[-1] = replies[-1] + "\nthanks"  # FINAL is one line in the study
    played = play(rollouts, tmp_path, task, arm, replies)
    assert played.trace["end"] == "protocol_error" and played.trace["protocol_errors"] == [S.ERR_ONE_CALL_OR_FINAL]
    rec = played.record
    assert rec.reward == 0.0 and rec.tamper == [] and rec.final_outcome == "PASS"
    assert rec.reason.startswith("ended by protocol_error") and rec.metrics.protocol_error == 1.0


@pytest.mark.verifiers_free
def test_arm_b_testing_without_a_prediction_scores_zero(rollouts, tmp_path, mbpp_tasks):
    task = mbpp_tasks[TASK]
    replies = turns(study.sft_row(study.from_mbpp(task), "a", None, None)["messages"])  # Arm A's turns
    played = play(rollouts, tmp_path, task, "b", replies)
    assert played.trace["end"] == "protocol_error" and played.record.reward == 0.0
    assert played.trace["protocol_errors"] == [S.ERR_PREDICTION_SHAPE] and played.record.tamper == []


@pytest.mark.verifiers_free
def test_a_budget_exhausted_end_scores_zero(rollouts, tmp_path, mbpp_tasks):
    """The solution is right and its visible test passed, but a ninth call ends the episode."""
    task = mbpp_tasks[TASK]
    st = study.from_mbpp(task)
    replies = turns(study.sft_row(st, "a", None, None)["messages"])[:-1]
    replies += [call_line(S.READ_FILE, f"r{k}", STUDY.args(S.READ_FILE, st.solution_path, st.project))
                for k in range(6)]
    played = play(rollouts, tmp_path, task, "a", replies)
    assert played.trace["end"] == "budget_exhausted" and played.trace["protocol_errors"] == [S.ERR_BUDGET]
    rec = played.record
    assert rec.reward == 0.0 and rec.tamper == [] and rec.final_outcome == "PASS"
    assert rec.metrics.budget_exhausted == 1.0


@pytest.mark.verifiers_free
def test_a_trace_forged_to_final_is_caught(rollouts, tmp_path, mbpp_tasks):
    task = mbpp_tasks[TASK]
    replies = turns(study.sft_row(study.from_mbpp(task), "a", None, None)["messages"])
    replies[-1] = "FINAL: done\nthanks"

    def forge(trace):
        trace.update(end="final", final=True, error=None, protocol_errors=[])

    rec = play(rollouts, tmp_path, task, "a", replies, forge=forge).record
    assert rec.reward == 0.0 and rec.metrics.tampered == 1.0
    assert any("the test service's record" in t for t in rec.tamper), rec.tamper
    assert any("the interception's record of the model replies ends with protocol error" in t
               for t in rec.tamper), rec.tamper


@pytest.mark.verifiers_free
def test_a_forged_prediction_target_is_caught(rollouts, tmp_path, mbpp_tasks):
    task = mbpp_tasks[TASK]
    replies = turns(study.sft_row(study.from_mbpp(task), "b", None, None)["messages"])

    def forge(trace):
        trace["prediction_targets"][0]["verified_label"] = "TIMEOUT"

    rec = play(rollouts, tmp_path, task, "b", replies, forge=forge).record
    assert rec.reward == 0.0 and rec.tamper == ["prediction target 0: recorded TIMEOUT, re-grade PASS"]


@pytest.mark.verifiers_free
def test_the_replies_replay_uses_the_recorded_profile(mbpp_tasks):
    """The SFT turns are FINAL under the study's episode; glyph's reads its one-line CALLs otherwise."""
    st = study.from_mbpp(mbpp_tasks[TASK])
    replies = tuple(turns(study.sft_row(st, "b", None, None)["messages"]))
    got = replies_account(ModelReplies(replies, "b", 8, 1, profile="study", project=st.project))
    assert got.final and got.says == f"ends with FINAL (reply {len(replies)})"
    assert not replies_account(ModelReplies(replies, "b", 8, 1)).final


@pytest.mark.parametrize("arm", ["a", "b"])
def test_the_harness_writes_the_study_workspace_and_config(mbpp_tasks, mbpp_path, arm):
    """The study-profile taskset's task through the harness: the study's prompt
    (the task row's), its placeholder in the project folder, the profile recorded."""
    from glyph.envs.mbpp.taskset import GlyphTaskset, GlyphTasksetConfig

    ts = GlyphTaskset(GlyphTasksetConfig(arm=arm, split="test", data_path=mbpp_path, profile="study"))
    task = next(iter(ts))
    st = study.from_mbpp(mbpp_tasks[task.data.name])
    row = study.task_row(st, arm, "test")
    assert [dict(m) if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in task.data.prompt] == \
        row["prompt"]
    runtime, trace = FakeRuntime(), types.SimpleNamespace(info={})
    asyncio.run(GlyphHarness(GlyphHarnessConfig(id="glyph-mbpp", profile="study")).launch(
        types.SimpleNamespace(model="m"), trace, runtime, "http://127.0.0.1:9/v1", "s", {}, task.data))
    cfg = json.loads(runtime.written[program.CONFIG])
    assert cfg["profile"] == "study" and cfg["project"] == st.project and cfg["messages"] == row["prompt"]
    assert runtime.written[st.solution_path] == S.PLACEHOLDER.encode()
    harness = record.harness_record(trace.info)
    assert harness.protocol.profile == "study" and harness.protocol.project == st.project
    assert harness.limits["wall_s"] == 30.0 and list(trace.info) == [record.HARNESS_KEY]
    with pytest.raises(ValueError, match="profile"):
        asyncio.run(GlyphHarness(GlyphHarnessConfig(id="glyph-mbpp", profile="glyph")).launch(
            types.SimpleNamespace(model="m"), types.SimpleNamespace(info={}), FakeRuntime(),
            "http://127.0.0.1:9/v1", "s", {}, task.data))


@pytest.mark.verifiers_free
def test_the_study_metrics_are_the_studys_definitions():
    """The study profile's metrics (``glyph.profiles.study``): the first target's outcome (else the first
    visible test's), every target counted with an invalid label wrong, recovery a visible PASS after the
    first failure."""
    from glyph.agent.trace import PredictionTarget, StudyTrace
    from glyph.profiles import get

    def metrics(targets, visible):
        return get("study").prediction_metrics(StudyTrace(prediction_targets=targets), [], visible, passed=False)

    def target(actual, sampled, decision):
        return PredictionTarget(candidate_sha256="x", verified_label=actual, sampled_label=sampled, decision=decision)

    m = metrics([target("ASSERTION_FAILURE", "Pass", "REVISE"), target("PASS", "PASS", "KEEP")], ["PASS"])
    assert (m["first_patch_correct"], m["predictions"], m["prediction_accuracy"], m["invalid_predictions"]) == (
        0.0, 2.0, 0.5, 1.0)
    assert (m["bad_patch_rejection_rate"], m["unnecessary_rejection_rate"], m["revise_count"]) == (1.0, 0.0, 1.0)
    assert m["recovered_after_executed_failure"] == 0.0  # no visible failure: a shadow one does not count
    arm_a = metrics([], ["ASSERTION_FAILURE", "RUNTIME_ERROR", "PASS"])
    assert (arm_a["first_patch_correct"], arm_a["recovered_after_executed_failure"]) == (0.0, 1.0)
    assert metrics([], ["PASS", "ASSERTION_FAILURE"])["first_patch_correct"] == 1.0
    assert metrics([], ["PASS", "ASSERTION_FAILURE"])["recovered_after_executed_failure"] == 0.0
    assert metrics([], [])["first_patch_correct"] == 0.0
    assert metrics([target("PASS", None, None)], [])["invalid_predictions"] == 1.0


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_the_container_branch_plays_the_study_profile(rollouts, tmp_path, mbpp_tasks, arm):
    """On a container runtime python_test is graded by the shipped grader in the program's process
    (``tester.kind = "local"``); the study's trace and reward are the same as on the local runtime."""
    task = mbpp_tasks[TASK]
    row = study.sft_row(study.from_mbpp(task), arm, None, None)
    played = play(rollouts, tmp_path, task, arm, turns(row["messages"]), tester="local")
    assert view(played.trace["messages"]) == view(row["messages"])
    assert played.record.reward == 1.0 and played.record.reason == "passed", played.record.reason
    assert played.record.metrics.first_patch_correct == 1.0


@pytest.mark.verifiers_free
def test_switches_reach_a_rollout_and_its_replay(rollouts, mbpp_tasks, tmp_path):
    """A harness with free_text and budget_line: a reply with prose around its CALL line is played
    (the study's rules would end the episode), each RESULT names the calls left, the interception's
    replay accepts the same replies, and the rollout is rewarded."""
    task = mbpp_tasks[TASK]
    st = study.from_mbpp(task)
    row = study.sft_row(st, "a", None, None)
    chatty = [f"Next step.\n{t}" for t in turns(row["messages"])]
    harness = GlyphHarnessConfig(tool_timeout=5, model_timeout=30, free_text=True, budget_line=True)
    with Rollouts(mbpp_tasks, harness) as r:
        played = play(r, tmp_path, task, "a", chatty)
    observations = [m["content"] for m in played.trace["messages"] if m["role"] == "tool"]
    assert observations and all(o.splitlines()[-1].endswith("tool calls left") for o in observations)
    assert played.trace["messages"][0]["content"].endswith("each RESULT says how many are left.")
    assert played.record.reward == 1.0, played.record.reason
    strict = play(rollouts, tmp_path / "strict", task, "a", chatty)
    assert strict.record.reward == 0.0 and strict.trace["end"] == "protocol_error"
