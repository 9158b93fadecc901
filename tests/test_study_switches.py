"""The study profile's switches: each of glyph's departures turned on alone
(``study_episode.Switches``, ``GlyphHarnessConfig``'s ``budget_line``,
``free_text``, ``feedback``, ``bad_call``; ``GlyphTasksetConfig.split_key``),
and the ``glyph`` bundle refusing them. Every switch off is the study's rule,
which ``test_study_replay`` proves against the study's traces."""

import pytest
from pydantic import ValidationError
from test_study_replay import PROJECT, SOLUTION, FakeTester, call, patch, predict

from glyph.agent import profiles
from glyph.agent import study as S
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.study import StudyEpisode, Switches, prompt, system_messages
from glyph.data import mbpp, study
from glyph.envs.mbpp.finalize import ModelReplies, replies_account
from glyph.envs.mbpp.harness import GlyphHarnessConfig, program_config
from glyph.envs.mbpp.taskset import GlyphTaskset, GlyphTasksetConfig


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / PROJECT).mkdir(parents=True)
    (tmp_path / SOLUTION).write_text(S.PLACEHOLDER, encoding="utf-8")
    return tmp_path


def episode(workspace, arm="a", **switches):
    return StudyEpisode(arm, S.MAX_TOOL_CALLS, None, root=str(workspace), project=PROJECT, switches=Switches(**switches))


def test_every_switch_is_off_by_default_and_unknown_ones_are_refused():
    assert Switches() == Switches.from_dict(None) == Switches.from_dict({})
    assert Switches.from_dict(Switches(free_text=True).as_dict()) == Switches(free_text=True)
    with pytest.raises(ValueError, match="unknown switches: tell_budget"):
        Switches.from_dict({"tell_budget": True})
    with pytest.raises(ValueError, match="feedback"):
        Switches(feedback="class")


def test_budget_line_tells_the_budget_in_the_system_prompt_and_after_each_result(workspace):
    opening = prompt("a", "text", "assert f() == 1\n", S.PROJECT_PATH.format(task_id=7))
    assert system_messages(opening, Switches(), 8) == opening  # the study: never told
    told = system_messages(opening, Switches(budget_line=True), 6)
    assert told[0]["content"].endswith(protocol.BUDGET_SENTENCE.format(budget=6)) and told[1:] == opening[1:]
    ep, quiet = episode(workspace, budget_line=True), episode(workspace)
    step = ep.turn(call(S.READ_FILE, "c1", file_path=SOLUTION), FakeTester())
    assert protocol.budget_left(step[2]) == 7 and step[2].endswith("budget: 7 tool calls left")
    assert protocol.budget_left(quiet.turn(call(S.READ_FILE, "c1", file_path=SOLUTION), FakeTester())[2]) is None


@pytest.mark.parametrize("reply", ["I will read the file first.\n{line}", "{line}\nthen I test it", "Plan:\n{line}\n"])
def test_free_text_accepts_text_around_one_call(workspace, reply):
    line = call(S.READ_FILE, "c1", file_path=SOLUTION)
    assert episode(workspace).turn(reply.format(line=line), FakeTester()) is None  # the study: an error
    ep = episode(workspace, free_text=True)
    step = ep.turn(reply.format(line=line), FakeTester())
    assert step is not None and step[1] == "success" and ep.budget == S.MAX_TOOL_CALLS - 1


def test_free_text_still_needs_exactly_one_call_or_final(workspace):
    ep = episode(workspace, free_text=True)
    two = call(S.READ_FILE, "c1", file_path=SOLUTION) + "\n" + call(S.READ_FILE, "c2", file_path=SOLUTION)
    assert ep.turn(two, FakeTester()) is None and ep.error == S.ERR_ONE_CALL
    ep = episode(workspace, free_text=True)
    assert ep.turn("nothing to do", FakeTester()) is None and ep.error == S.ERR_ONE_CALL_OR_FINAL
    ep = episode(workspace, free_text=True)
    assert ep.turn("All done.\n" + S.FINAL_TURN, FakeTester()) is None and ep.end == "final"


def test_free_text_arm_b_prediction_turn_with_prose(workspace):
    ep, t = episode(workspace, "b", free_text=True), FakeTester()
    patch(ep, t, "c1", "def f():\n    return 2\n")
    reply = "I think this fails.\n" + predict("ASSERTION_FAILURE", S.KEEP, call(S.PYTHON_TEST, "c2")) + "\nok"
    step = ep.turn(reply, t)
    assert step is not None and step[1] == "ASSERTION_FAILURE"
    [target] = ep.trace.prediction_targets
    assert (target.sampled_label, target.verified_label) == ("ASSERTION_FAILURE", "ASSERTION_FAILURE")
    strict, t2 = episode(workspace, "b"), FakeTester()
    (workspace / SOLUTION).write_text(S.PLACEHOLDER, encoding="utf-8")
    patch(strict, t2, "c1", "def f():\n    return 2\n")
    assert strict.turn(reply, t2) is None and strict.error == S.ERR_PREDICTION_SHAPE


def test_feedback_outcome_names_the_class(workspace):
    ep, t = episode(workspace, feedback="outcome"), FakeTester()
    patch(ep, t, "c1", "def f():\n    return 2\n")
    block = ep.turn(call(S.PYTHON_TEST, "c2", project_path=PROJECT), t)[2]
    assert block == "RESULT c2:\nstatus: failed\nstderr:\ntests failed\noutcome: ASSERTION_FAILURE"
    read = ep.turn(call(S.READ_FILE, "c3", file_path=SOLUTION), t)[2]
    assert "outcome:" not in read  # only python_test's RESULT names an outcome


@pytest.mark.parametrize("bad", [call("run_tests", "c1"), call(S.APPLY_PATCH, "c1", file_path=SOLUTION)])
def test_bad_call_ends_the_episode_where_the_study_charges_one_call(workspace, bad):
    study_rule = episode(workspace)
    step = study_rule.turn(bad, FakeTester())
    assert step[1] == "failed" and study_rule.budget == S.MAX_TOOL_CALLS - 1 and study_rule.end is None
    ends = episode(workspace, bad_call="ends")
    assert ends.turn(bad, FakeTester()) is None and ends.end == "protocol_error"
    assert ends.error in (S.UNKNOWN_TOOL.format(tool="run_tests"), S.PATCH_NEEDS_ARGS)
    assert ends.trace.protocol_errors == [ends.error]


def test_the_harness_carries_the_switches_into_the_program_and_the_replay(mbpp_tasks):
    cfg = GlyphHarnessConfig(free_text=True, budget_line=True)
    assert cfg.profile == "study" and cfg.switches() == Switches(free_text=True, budget_line=True).as_dict()
    task = mbpp_tasks["mbpp_11"]
    st = study.from_mbpp(task)
    pc = program_config(cfg, "a", st.text, st.setup, list(st.tests), task.task_id, {"kind": "service", "url": "u"},
                        {"base_url": "b", "model": "m"})
    assert pc["switches"] == cfg.switches() and pc["project"] == st.project
    assert pc["messages"][0]["content"].endswith(protocol.BUDGET_SENTENCE.format(budget=8))
    assert profiles.get(pc["profile"]).episode(pc, None).switches == Switches(free_text=True, budget_line=True)
    replies = ("let me look\n" + call(S.READ_FILE, "c1", file_path=f"{st.project}/{S.SOLUTION_FILE}"),
               "done\n" + S.FINAL_TURN)
    base = dict(replies=replies, arm="a", budget=8, test_cost=1, profile="study", project=st.project)
    assert replies_account(ModelReplies(**base, switches=pc["switches"])).final
    assert not replies_account(ModelReplies(**base)).final  # the study's rules: the first reply is an error


def test_the_glyph_bundle_refuses_a_study_switch():
    for switch in ({"budget_line": True}, {"free_text": False}, {"feedback": "outcome"}, {"bad_call": "ends"}):
        with pytest.raises(ValidationError, match="a switch of the study profile"):
            GlyphHarnessConfig(profile="glyph", **switch)
    with pytest.raises(ValidationError, match="split_key"):
        GlyphTasksetConfig(profile="glyph", split_key="glyph")


def test_split_key_glyph_draws_glyph_splits_of_the_study_rows(mbpp_path):
    source = mbpp.load_source(mbpp_path)
    glyph_ids = mbpp.make_splits({t.task_id: t for t in source.tasks}, mbpp.SEED)
    study_ids = {k: [t.task_id for t in v] for k, v in study.make_splits([study.from_mbpp(t) for t in source.tasks],
                                                                        S.SEED).items()}
    for split in ("rl", "validation"):
        default = [t.data for t in GlyphTaskset(GlyphTasksetConfig(split=split, data_path=mbpp_path)).load()]
        switched = [t.data for t in GlyphTaskset(GlyphTasksetConfig(split=split, data_path=mbpp_path,
                                                                    split_key="glyph")).load()]
        assert [d.task_id for d in default] == study_ids[split]
        assert [d.task_id for d in switched] == glyph_ids[split] != study_ids[split]
        assert all(d.profile == "study" and "\r" not in d.task_text for d in switched)  # the study's rows
