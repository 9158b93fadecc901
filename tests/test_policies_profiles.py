"""The reference policies speak both protocol profiles, one server for both:
each study-profile play runs the study's episode (``StudyEpisode``) on the
local runtime's wiring (``Rollouts``) and is judged by finalize; the turns of
``oracle`` are the study's own direct SFT trace's."""

import json
import urllib.error
import urllib.request

import pytest

from glyph.agent import study as S
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.study import prompt
from glyph.data import study
from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.policies.policies import FAULTS, HACKS, POLICIES, Planner, UnknownTask, profile_of
from testkit.rollout import Rollouts

STUDY = GlyphHarnessConfig(profile="study", tool_timeout=5, model_timeout=30)
TASKS = ["mbpp_11", "mbpp_17", "mbpp_602"]


@pytest.fixture(scope="module")
def rollouts(mbpp_tasks):
    with Rollouts(mbpp_tasks, STUDY) as r:
        yield r


def play(rollouts, tmp_path, task, arm, policy):
    return rollouts.play(task, arm, policy, tmp_path / f"ws-{task.task_id}-{arm}-{policy}")


def assistant(messages):
    return [m["content"] for m in messages if m["role"] == "assistant"]


def test_the_profile_is_read_from_the_system_prompt(mbpp_tasks):
    task = mbpp_tasks["mbpp_11"]
    st = study.from_mbpp(task)
    for arm in ("a", "b"):
        p, got = profile_of(prompt(arm, st.text, st.test_code, st.project))
        assert (p.name, got) == ("study", arm)
        p, got = profile_of(protocol.messages(arm, task.text, task.test_list, budget=5))
        assert (p.name, got) == ("glyph", arm)
    with pytest.raises(UnknownTask, match="no profile's system prompt"):
        profile_of([{"role": "user", "content": "hi"}])


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_oracle_plays_the_study_direct_trace(rollouts, tmp_path, mbpp_tasks, arm):
    task = mbpp_tasks["mbpp_11"]
    played = play(rollouts, tmp_path, task, arm, "oracle")
    row = study.sft_row(study.from_mbpp(task), arm, None, None)
    assert assistant(played.trace["messages"]) == assistant(row["messages"])
    assert played.record.reward == 1.0 and played.trace["protocol_errors"] == [], played.record.reason


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_oracle_recover_and_revise_pass_under_the_study_profile(rollouts, tmp_path, mbpp_tasks, arm):
    planner = Planner(mbpp_tasks)
    for tid in TASKS:
        task = mbpp_tasks[tid]
        mutant = planner.mutant(task)
        for policy in ("oracle", "recover", "revise"):
            played = play(rollouts, tmp_path, task, arm, policy)
            rec, trace = played.record, played.trace
            assert rec.reward == 1.0 and rec.tamper == [], (tid, policy, rec.reason)
            assert trace["end"] == "final" and trace["protocol_errors"] == []
            for turn in assistant(trace["messages"]):  # the study's grammar: action lines only
                lines = turn.splitlines()
                assert lines[-1].startswith((S.CALL_PREFIX, S.FINAL_PREFIX)) and len(lines) in (1, 3), turn
            if policy == "oracle" or mutant is None:
                continue
            if policy == "revise" and arm == "b":
                [shadow] = [c for c in rec.candidates if c.shadow]
                assert shadow.sampled_label == shadow.verified_label == mutant.outcome.value
                assert rec.metrics.visible_test_calls == 1.0
            else:
                assert rec.metrics.had_executed_failure == 1.0
                assert [t["outcome"] for t in trace["tests"]] == [mutant.outcome.value, "PASS"]


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_every_hack_scores_zero_under_the_study_profile(rollouts, tmp_path, mbpp_tasks, arm):
    import hashlib

    seen = set()
    for tid in sorted(mbpp_tasks, key=lambda t: int(t.split("_")[1]))[10:80]:
        kind = HACKS[int(hashlib.sha256(f"hack:0:{tid.split('_')[1]}".encode()).hexdigest(), 16) % len(HACKS)]
        if kind in seen:
            continue
        seen.add(kind)
        played = play(rollouts, tmp_path, mbpp_tasks[tid], arm, "hack")
        assert played.record.reward == 0.0, (kind, played.record.reason)
        st = study.from_mbpp(mbpp_tasks[tid])
        last = played.trace["candidates"][-1]["source"] if played.trace["candidates"] else S.PLACEHOLDER
        assert (played.workspace / st.solution_path).read_text() == last, kind  # nothing else was written
    assert seen == set(HACKS)


@pytest.mark.verifiers_free
@pytest.mark.parametrize("policy,end,error", [
    ("fault-malformed", "protocol_error", S.ERR_MALFORMED_CALL),
    ("fault-duplicate", "protocol_error", S.ERR_DUPLICATE_ID.format(id="c1")),
    ("fault-budget", "budget_exhausted", S.ERR_BUDGET),
    ("fault-huge", "protocol_error", S.ERR_ONE_CALL_OR_FINAL),  # cut before its CALL line
    ("fault-unfinished", "protocol_error", S.ERR_MALFORMED_CALL),
])
def test_faults_end_the_study_episode(rollouts, tmp_path, mbpp_tasks, policy, end, error):
    played = play(rollouts, tmp_path, mbpp_tasks["mbpp_11"], "a", policy)
    assert played.trace["end"] == end and error in played.trace["error"], played.trace["error"]
    assert played.record.reward == 0.0 and played.record.tamper == [], played.record.reason
    if policy == "fault-huge":
        assert played.trace["reply_truncated"] > 1_000_000


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_one_server_answers_each_profile_in_its_grammar(rollouts, mbpp_tasks):
    task = mbpp_tasks["mbpp_17"]
    url = rollouts.policies.base_url
    st = study.from_mbpp(task)
    status, body = _post(url, {"model": "oracle", "messages": prompt("b", st.text, st.test_code, st.project)})
    assert status == 200
    assert body["choices"][0]["message"]["content"] == (
        S.CALL_PREFIX + S.READ_FILE + " " + json.dumps({S.ID_KEY: "c1", "file_path": st.solution_path},
                                                       separators=S.JSON_SEPARATORS))
    status, body = _post(url, {"model": "oracle", "messages": protocol.messages("b", task.text, task.test_list)})
    turn = body["choices"][0]["message"]["content"]
    assert status == 200 and protocol.parse_turn(turn).call.args == {"path": protocol.SOLUTION_FILE}
    status, body = _post(url, {"model": "orakle", "messages": protocol.messages("a", task.text, task.test_list)})
    message = body["error"]["message"]
    assert status == 404 and "'orakle'" in message
    assert all(p in message for p in POLICIES + FAULTS)
