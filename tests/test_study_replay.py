"""The study profile's episode (``glyph.agent.study_episode``) and ``glyph study
replay``: glyph's study-profile SFT traces replay against the real sandbox
with every observation equal (both arms, all 212 traces each: about 10 s
apiece), and the study's protocol errors and call costs hold turn by turn.

The study's own published SFT files are replayed too where
``$GLYPH_STUDY_SFT_DIR`` names a folder holding them (``arm_a/train.jsonl``,
``arm_b/train.jsonl``); they are never part of glyph."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph.agent import study as S
from glyph.agent.profiles.study import StudyEpisode
from glyph.cli.app import app
from glyph.data import replay as study_replay
from glyph.profiles import get as profile

runner = CliRunner()
PROJECT = S.PROJECT_PATH.format(task_id=7)
SOLUTION = f"{PROJECT}/{S.SOLUTION_FILE}"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mbpp_path) -> Path:
    out = tmp_path_factory.mktemp("study")
    r = runner.invoke(app, ["data", "prepare", "--profile", "study", "--out", str(out), "--mbpp-path", mbpp_path])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("arm", ["a", "b"])
def test_glyph_study_traces_replay_every_observation(prepared, arm):
    path = prepared / "sft" / f"arm_{arm}" / "train.jsonl"
    r = runner.invoke(app, ["study", "replay", str(path), "--arm", arm])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == "replay: 212/212 traces reproduce every observation"


def test_replay_names_the_first_differing_message(prepared, tmp_path):
    rows = study_replay.read_rows(prepared / "sft" / "arm_a" / "train.jsonl")[:3]
    tool = next(i for i, m in enumerate(rows[1]["messages"]) if m["role"] == "tool" and "patch applied" in m["content"])
    rows[1]["messages"][tool]["content"] = rows[1]["messages"][tool]["content"].replace("patch applied", "patched")
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    r = runner.invoke(app, ["study", "replay", str(path)])
    assert r.exit_code == 1
    assert f"trace 1 (task {rows[1]['task_id']}): message {tool} differs" in r.output
    assert "stdout:\\npatched" in r.output and "stdout:\\npatch applied" in r.output
    assert r.output.strip().splitlines()[-1] == "replay: 2/3 traces reproduce every observation"


def test_arm_b_traces_do_not_replay_as_arm_a(prepared):
    """A prediction turn is three lines: under Arm A's grammar it is a protocol error."""
    row = study_replay.read_rows(prepared / "sft" / "arm_b" / "train.jsonl")[0]
    r = profile("study").replay_sft(0, row, "a")
    assert not r.ok and r.replayed["end"] == "protocol_error"
    assert r.replayed["error"] == S.ERR_EXTRA_TEXT


@pytest.mark.parametrize("arm", ["a", "b"])
def test_the_study_published_traces_replay(arm):
    folder = os.environ.get("GLYPH_STUDY_SFT_DIR")
    if not folder:
        pytest.skip("set GLYPH_STUDY_SFT_DIR to a folder with the study's sft/arm_{a,b}/train.jsonl")
    path = Path(folder) / "sft" / f"arm_{arm}" / "train.jsonl"  # the study's layout; or the arm folders alone
    path = path if path.is_file() else Path(folder) / f"arm_{arm}" / "train.jsonl"
    assert path.is_file(), f"GLYPH_STUDY_SFT_DIR has no sft/arm_{arm}/train.jsonl"
    r = runner.invoke(app, ["study", "replay", str(path), "--arm", arm])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == "replay: 212/212 traces reproduce every observation"


# ---------------------------------------------------------------- the episode, turn by turn


def call(tool: str, call_id: str, **args: str) -> str:
    return S.CALL_PREFIX + tool + " " + json.dumps({S.ID_KEY: call_id, **args}, separators=S.JSON_SEPARATORS)


def predict(outcome: str, decision: str, line: str) -> str:
    return "\n".join([S.PREDICTION_LINE.format(outcome=outcome), S.DECISION_LINE.format(decision=decision), line])


class FakeTester:
    """PASS for a solution that defines ``f`` returning 1, else ASSERTION_FAILURE; records each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, source, shadow):
        self.calls.append(shadow)
        return "PASS" if "return 1" in source else "ASSERTION_FAILURE"


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / PROJECT).mkdir(parents=True)
    (tmp_path / SOLUTION).write_text(S.PLACEHOLDER, encoding="utf-8")
    return tmp_path


def episode(workspace, arm="a", budget=S.MAX_TOOL_CALLS):
    return StudyEpisode(arm, budget, None, root=str(workspace), project=PROJECT)


def patch(ep, tester, call_id, replace, context=None):
    return ep.turn(call(S.APPLY_PATCH, call_id, file_path=SOLUTION, find=S.PLACEHOLDER if call_id == "c1" else
                        "return 2", replace=replace), tester, context)


def test_observation_is_a_tool_message_with_the_study_result_block(workspace):
    ep, t = episode(workspace), FakeTester()
    step = ep.turn(call(S.READ_FILE, "c1", file_path=SOLUTION), t)
    assert ep.observation(step) == {"role": "tool", "tool_call_id": "c1",
                                    "content": "RESULT c1:\nstatus: success\nstdout:\n" + S.PLACEHOLDER.strip()}
    step = ep.turn(call(S.APPLY_PATCH, "c2", file_path=SOLUTION, find="absent", replace="x"), t)
    assert step[2] == "RESULT c2:\nstatus: failed\nstderr:\nfind must occur exactly once; found 0"


def test_read_file_is_cut_at_8000_characters(workspace):
    (workspace / PROJECT / "big.txt").write_text("x" * 9000, encoding="utf-8")
    step = episode(workspace).turn(call(S.READ_FILE, "c1", file_path=f"{PROJECT}/big.txt"), FakeTester())
    assert step[2] == "RESULT c1:\nstatus: success\nstdout:\n" + "x" * S.READ_FILE_MAX_CHARS


def test_an_unknown_tool_costs_one_call_and_the_episode_goes_on(workspace):
    ep, t = episode(workspace), FakeTester()
    call_, status, block = ep.turn(call("run_shell", "c1", cmd="ls"), t)
    assert (status, block) == ("failed", "RESULT c1:\nstatus: failed\nstderr:\nunknown tool: run_shell")
    assert ep.budget == S.MAX_TOOL_CALLS - 1 and ep.end is None
    assert ep.turn(call(S.READ_FILE, "c2", file_path=SOLUTION), t)[1] == "success"


def test_a_missing_argument_is_a_failed_call_that_costs_one(workspace):
    ep, t = episode(workspace), FakeTester()
    _, status, block = ep.turn(call(S.APPLY_PATCH, "c1", file_path=SOLUTION, find=S.PLACEHOLDER), t)
    assert block == "RESULT c1:\nstatus: failed\nstderr:\n" + S.PATCH_NEEDS_ARGS
    assert ep.budget == S.MAX_TOOL_CALLS - 1 and ep.end is None
    assert (workspace / SOLUTION).read_text(encoding="utf-8") == S.PLACEHOLDER


def test_a_multi_line_turn_is_a_protocol_error(workspace):
    ep = episode(workspace)
    assert ep.turn("Let me read it.\n" + call(S.READ_FILE, "c1", file_path=SOLUTION), FakeTester()) is None
    assert (ep.end, ep.error) == ("protocol_error", S.ERR_EXTRA_TEXT)
    assert ep.budget == S.MAX_TOOL_CALLS  # nothing ran
    ep2 = episode(workspace)
    assert ep2.turn(S.FINAL_TURN + "\nthanks", FakeTester()) is None and ep2.error == S.ERR_ONE_CALL_OR_FINAL


def test_python_test_answers_with_the_study_strings(workspace):
    ep, t = episode(workspace), FakeTester()
    patch(ep, t, "c1", "def f():\n    return 2\n")
    assert ep.turn(call(S.PYTHON_TEST, "c2", project_path=PROJECT), t)[1:] == (
        "ASSERTION_FAILURE", "RESULT c2:\nstatus: failed\nstderr:\ntests failed")
    timeouts = StudyEpisode("a", 8, None, root=str(workspace), project=PROJECT, timeout_s=30)
    step = timeouts.turn(call(S.PYTHON_TEST, "c1", project_path=PROJECT), lambda s, shadow: "TIMEOUT")
    assert step[2] == "RESULT c1:\nstatus: failed\ntimed_out: true\nstderr:\ntests timed out after 30s"
    sft = StudyEpisode("a", 8, None, root=str(workspace), project=PROJECT, timeout_text="sft")
    assert sft.turn(call(S.PYTHON_TEST, "c1"), lambda s, shadow: "TIMEOUT")[2] == (
        "RESULT c1:\nstatus: failed\nstderr:\ntests timed out")


def test_the_budget_is_eight_calls_and_a_ninth_ends_the_episode(workspace):
    ep, t = episode(workspace), FakeTester()
    for i in range(1, 9):
        assert ep.turn(call(S.READ_FILE, f"c{i}", file_path=SOLUTION), t) is not None
    assert ep.budget == 0
    assert ep.turn(call(S.READ_FILE, "c9", file_path=SOLUTION), t) is None
    assert (ep.end, ep.error) == ("budget_exhausted", S.ERR_BUDGET)


def test_arm_b_python_test_with_no_pending_candidate_is_a_protocol_error(workspace):
    ep, t = episode(workspace, "b"), FakeTester()
    assert ep.turn(call(S.PYTHON_TEST, "c1", project_path=PROJECT), t) is None
    assert (ep.end, ep.error) == ("protocol_error", S.ERR_TEST_BEFORE_KEEP)
    assert t.calls == [] and ep.budget == S.MAX_TOOL_CALLS


def test_arm_b_revise_then_read_file_is_a_protocol_error_that_still_shadow_tests(workspace):
    ep, t = episode(workspace, "b"), FakeTester()
    assert patch(ep, t, "c1", "def f():\n    return 2\n")[1] == "success"
    assert ep.expect_prediction
    reply = predict("ASSERTION_FAILURE", S.REVISE, call(S.READ_FILE, "c2", file_path=SOLUTION))
    assert ep.turn(reply, t, [{"role": "system", "content": "ctx"}]) is None
    assert ep.error == S.ERR_DECISION_TOOL.format(decision=S.REVISE, expected=S.APPLY_PATCH, tool=S.READ_FILE)
    [target] = ep.trace.prediction_targets
    assert (target.candidate_call, target.sampled_label, target.verified_label, target.shadow) == (
        "c1", "ASSERTION_FAILURE", "ASSERTION_FAILURE", True)
    assert t.calls == [True]


def test_arm_b_revise_shadow_tests_then_patches_and_keep_tests_visibly(workspace):
    ep, t = episode(workspace, "b"), FakeTester()
    patch(ep, t, "c1", "def f():\n    return 2\n")
    step = ep.turn(predict("ASSERTION_FAILURE", S.REVISE, call(S.APPLY_PATCH, "c2", file_path=SOLUTION,
                                                                  find="return 2", replace="return 1")), t)
    assert step[2] == "RESULT c2:\nstatus: success\nstdout:\npatch applied" and ep.pending == "c2"
    step = ep.turn(predict("PASS", S.KEEP, call(S.PYTHON_TEST, "c3", project_path=PROJECT)), t)
    assert step[2] == "RESULT c3:\nstatus: success\nstdout:\ntests passed" and ep.pending is None
    assert [(x.verified_label, x.shadow) for x in ep.trace.prediction_targets] == [
        ("ASSERTION_FAILURE", True), ("PASS", False)]
    assert t.calls == [True, False]
    assert ep.turn(S.FINAL_TURN, t) is None and ep.end == "final"


def test_a_prediction_turn_at_budget_exhaustion_still_records_a_target(workspace):
    ep, t = episode(workspace, "b", budget=2), FakeTester()
    ep.turn(call(S.READ_FILE, "c1", file_path=SOLUTION), t)
    ep.turn(call(S.APPLY_PATCH, "c2", file_path=SOLUTION, find=S.PLACEHOLDER, replace="def f():\n    return 1\n"), t)
    assert ep.budget == 0 and ep.expect_prediction
    assert ep.turn(predict("PASS", S.KEEP, call(S.PYTHON_TEST, "c3", project_path=PROJECT)), t) is None
    assert (ep.end, ep.error) == ("budget_exhausted", S.ERR_BUDGET)
    [target] = ep.trace.prediction_targets
    assert (target.candidate_call, target.sampled_label, target.verified_label, target.shadow) == (
        "c2", "PASS", "PASS", True)


def test_a_malformed_prediction_turn_still_records_a_target(workspace):
    ep, t = episode(workspace, "b"), FakeTester()
    patch(ep, t, "c1", "def f():\n    return 2\n")
    assert ep.turn(predict("MAYBE", S.KEEP, call(S.PYTHON_TEST, "c2")), t) is None
    assert ep.error == S.ERR_UNKNOWN_PREDICTION.format(prediction="MAYBE")
    assert [(x.sampled_label, x.verified_label) for x in ep.trace.prediction_targets] == [
        ("MAYBE", "ASSERTION_FAILURE")]


def test_the_program_config_profile_picks_the_episode():
    from glyph.agent import profiles
    from glyph.agent.profiles.glyph import GlyphEpisode
    from glyph.agent.trace import StudyTrace, Trace

    cfg = {"arm": "b", "max_tool_calls": 8, "test_cost": 1, "revise_feedback": "none", "project": PROJECT,
           "limits": {"cpu_s": 30, "wall_s": 30}}
    assert type(profiles.get("glyph").episode(cfg, Trace())) is GlyphEpisode
    study = profiles.get("study")
    ep = study.episode(cfg, study.trace_type())
    assert isinstance(ep, StudyEpisode) and isinstance(ep.trace, StudyTrace) and ep.timeout_s == 30 and ep.budget == 8
    with pytest.raises(ValueError, match="profile"):
        profiles.get("other")
