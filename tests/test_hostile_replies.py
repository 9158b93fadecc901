"""Model text never raises on the trusted side (issue 34, item 4).

Whatever a model replies, the turn is a protocol error or a failed tool call,
never an exception: in the agent program, in finalize's replay of the
interception's record, in credit and in the SFT replays, under both profiles
and both arms; the rollout ends scored (exit 0, no fault, nothing tampered),
and a tester's fault is the one exception a turn passes on.

Property-based (hypothesis): replies built from the pieces that broke turns
(NUL bytes, lone surrogates raw and as JSON escapes, a name's escaped byte,
control and bidi characters, U+FFFD, names and paths past the system's limits,
integers past Python's digit limit, 1e999 and NaN, non-string arguments, JSON
nested past the stack, stray protocol tags, both grammars' CALL lines).
Derandomized with a fixed number of examples and no deadline: the same
examples every run, on a loaded machine too. The catalogue of
``glyph.redteam.replies`` is played whole through the program and finalize;
the ``hostile`` policy plays it through ``vf-eval``."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glyph.agent import program, single_turn
from glyph.agent.profiles import PROFILES as AGENTS
from glyph.agent.profiles.base import Call
from glyph.agent.profiles.base import TesterFault as Fault  # not Test*: pytest would collect it
from glyph.agent.trace import BUDGET_EXHAUSTED, FINAL, INFRA_ENDS, PROTOCOL_ERROR, Trace
from glyph.credit import replay as credit
from glyph.credit.trajectory import Trajectory
from glyph.data.replay import replay as sft_replay
from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.outcomes import Outcome
from glyph.profiles import get as get_profile
from glyph.redteam.replies import ENDS, GOES_ON, REPLIES
from glyph.text import source_bytes
from testkit.rollout import Rollouts, Scripted

PROFILES = ("glyph", "study")
TASK = "mbpp_11"
MODEL_ENDS = (FINAL, PROTOCOL_ERROR, BUDGET_EXHAUSTED)
OUTCOMES = [o.value for o in Outcome]


def fixed(examples: int):
    """Deterministic for CI: the same examples every run (derandomized, no example database), a bounded
    number of them, no deadline (a loaded two-core machine is slow, not wrong)."""
    return settings(derandomize=True, database=None, max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


# ---------------------------------------------------------------- hostile text

ODD = ["\x00", "\x01", "\x1b[2J", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u202e", "\x7f", "\ufffd",
       "\udcff", "\ud800", "\udfff", "\t", "\n", " "]
odd_char = st.one_of(st.sampled_from(ODD), st.characters(codec=None, categories=["Cs"]), st.characters())
odd_text = st.lists(odd_char, max_size=30).map("".join)  # ODD holds escape sequences, not only characters
NAMES = ["solution.py", "data/blueprints/mbpp_11/solution.py", ".", "..", "../" * 6 + "etc/passwd",
         "/etc/passwd", "/", ".glyph/trace.json", ".glyph", "data", "data/blueprints/mbpp_11",
         "solution.py/x", "a/" * 2100 + "x"]
DEPTHS = st.sampled_from([2, 100, 990, 1000, 3000, 4000])  # past the stack from about 1,000
json_value = st.one_of(
    odd_text.map(json.dumps),  # lone surrogates and NUL as JSON escapes
    odd_text.map(lambda t: json.dumps(t, ensure_ascii=False)),  # raw characters in the JSON string
    st.sampled_from(NAMES).map(json.dumps),
    st.sampled_from([255, 256, 300, 4097]).map(lambda n: json.dumps("x" * n)),  # past NAME_MAX, PATH_MAX
    st.sampled_from([4300, 4301, 5000]).map(lambda n: "9" * n),  # Python reads 4,300 digits at most
    st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "true", "false", "null", "[]", "{}", "0", "-0.0"]),
    DEPTHS.map(lambda n: "[" * n + "]" * n),
    DEPTHS.map(lambda n: '{"a":' * n + "1" + "}" * n),
)
KEYS = ["id", "tool", "args", "path", "file_path", "find", "replace", "project_path"]
key = st.one_of(st.sampled_from(KEYS), odd_text)
tool = st.sampled_from(["read_file", "apply_patch", "python_test", "exec", ""])


@st.composite
def glyph_call(draw) -> str:
    args = draw(st.dictionaries(key, json_value, max_size=3))
    body = {"id": draw(json_value), "tool": json.dumps(draw(tool)),
            "args": "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in args.items()) + "}"}
    keep = draw(st.sets(st.sampled_from(sorted(body)), min_size=1))
    return "CALL {" + ", ".join(f'"{k}": {body[k]}' for k in sorted(keep)) + "}"


@st.composite
def study_call(draw) -> str:
    args = draw(st.dictionaries(key, json_value, max_size=3))
    args.setdefault("id", draw(json_value))
    return f"CALL {draw(tool)} " + "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in args.items()) + "}"


_MARK = "@hostile-value@"


@st.composite
def grammar_call(draw) -> str:
    """A call as a profile's own grammar writes it (``AgentProfile.turn_text``, its tools and keys), with
    hostile argument values, one of them possibly raw JSON of any kind: what reaches the tools."""
    agent = AGENTS[draw(st.sampled_from(PROFILES))]
    name = draw(st.sampled_from(["read_file", "apply_patch", "python_test"]))
    text = st.one_of(odd_text, st.sampled_from(NAMES), st.sampled_from([256, 300]).map(lambda n: "x" * n))
    path, find, replace = draw(text), draw(st.one_of(st.none(), text)), draw(st.one_of(st.none(), text))
    raw = draw(st.one_of(st.none(), json_value))
    args = agent.args(name, _MARK if raw is not None else path, agent.project(11), find, replace)
    call_id = draw(st.one_of(st.just(agent.call_id(1)), odd_text))
    arm_b = st.fixed_dictionaries({"prediction": st.sampled_from(OUTCOMES),
                                   "decision": st.sampled_from(["KEEP", "REVISE"])})
    tags = draw(st.one_of(st.just({}), arm_b))
    turn = agent.turn_text(Call(call_id, name, args), **tags)
    return turn if raw is None else turn.replace(json.dumps(_MARK), raw)


line = st.one_of(
    grammar_call(), grammar_call(), glyph_call(), study_call(), odd_text,
    odd_text.map(lambda t: "FINAL: " + t),
    st.sampled_from(OUTCOMES + ["", "pass", "MAYBE"]).map(lambda o: f"<PREDICTION>{o}</PREDICTION>"),
    st.sampled_from(["KEEP", "REVISE", "", "STOP"]).map(lambda d: f"<DECISION>{d}</DECISION>"),
    st.sampled_from(["<think>", "</think>", "<PREDICTION>", "</DECISION>", "CALL", "CALL {", "FINAL:"]),
)
reply = st.one_of(grammar_call(), st.lists(line, max_size=5).map("\n".join))  # a call alone reaches the tools
reply_or_big = st.one_of(reply, st.integers(60_000, 70_000).map(lambda n: "x" * n + "\nFINAL: done"))


# ---------------------------------------------------------------- episodes, turn by turn


def _episode(profile: str, arm: str, root: str, switches: dict | None = None, feedback: str = "none"):
    agent = AGENTS[profile]
    project = agent.project(int(TASK.split("_")[1]))
    agent.lay_out(root, project)
    cfg = {"arm": arm, "max_tool_calls": 8, "test_cost": 1, "revise_feedback": feedback, "project": project,
           "switches": switches, "limits": {"cpu_s": 1.0, "wall_s": 1.0}}
    return agent, agent.episode(cfg, agent.trace_type(), root)


def _files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


study_switches = st.fixed_dictionaries({"free_text": st.booleans(),
                                        "bad_call": st.sampled_from(["costs_one", "ends"]),
                                        "budget_line": st.booleans(),
                                        "feedback": st.sampled_from(["study", "outcome"])})


@fixed(400)
@given(profile=st.sampled_from(PROFILES), arm=st.sampled_from("ab"),
       replies=st.lists(reply_or_big, min_size=1, max_size=5), outcome=st.sampled_from(OUTCOMES),
       switches=study_switches, feedback=st.sampled_from(["none", "outcome"]))
def test_a_turn_never_raises_and_every_observation_can_be_sent(profile, arm, replies, outcome, switches,
                                                              feedback):
    """Both profiles' parsers and tools, turn after turn: the episode goes on with an observation an endpoint
    takes (UTF-8: no lone surrogate), or ends on the model's account; no file appears but solution.py."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "ws")
        os.makedirs(root)
        Path(tmp, "outside.txt").write_text("untouched")
        agent, ep = _episode(profile, arm, root, switches if profile == "study" else None, feedback)
        before = _files(root)
        for r in replies:
            step = ep.turn(r[:program.REPLY_CAP], lambda source, shadow: outcome, [])
            if step is None:
                assert ep.end in MODEL_ENDS and (ep.end == FINAL or ep.error)
                break
            assert ep.end is None
            json.dumps(ep.observation(step), ensure_ascii=False).encode("utf-8")
        assert _files(root) == before and Path(tmp, "outside.txt").read_text() == "untouched"
        json.dumps(ep.trace.to_json())  # the program saves it after every turn


@pytest.mark.parametrize("profile", PROFILES)
def test_a_testers_failure_is_the_one_exception_a_turn_passes_on(tmp_path, profile):
    """A tester's exception leaves the turn unchanged, even one the episode's tool code would catch as a
    failed call (the study's catches OSError and ValueError), and a TesterFault the episode raises on what
    its tester answered; the same turn with a tester that answers is a step."""
    agent = AGENTS[profile]
    project = agent.project(11)
    test = agent.turn_text(agent_call(agent, "python_test", project))
    for exc in (Fault("the service is down"), OSError("no space left"), ValueError("a grader bug")):
        _, ep = _episode(profile, "a", str(tmp_path / type(exc).__name__))

        def tester(source, shadow, exc=exc):
            raise exc

        with pytest.raises(type(exc), match=str(exc)):
            ep.turn(test, tester)
    _, ep = _episode(profile, "a", str(tmp_path / "answers"))
    assert ep.turn(test, lambda source, shadow: "PASS") is not None
    _, ep = _episode(profile, "a", str(tmp_path / "garbage"))
    with pytest.raises(Fault, match="'MAYBE', not an outcome class"):  # an answer that is none
        ep.turn(test, lambda source, shadow: "MAYBE")


def agent_call(agent, tool, project, **args):
    return Call(agent.call_id(1), tool, agent.args(tool, agent.solution(project), project, **args))


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", ["a", "b"])
def test_every_catalogued_reply_is_answered_with_what_an_endpoint_takes(tmp_path, profile, arm):
    """Each of ``glyph.redteam.replies``, turn by turn: every observation, every field of it (a tool message's
    ``tool_call_id`` too), is UTF-8 an endpoint takes; the episode goes on from the calls of ``GOES_ON`` and
    ends on the model's account at the last turn of each of ``ENDS``."""
    agent = AGENTS[profile]
    for name, hostile in REPLIES.items():
        root = str(tmp_path / name)
        _, ep = _episode(profile, arm, root)
        turns = hostile.turns(agent, agent.project(11), iter(str(n) for n in range(1, 99)).__next__)
        for k, r in enumerate(turns, 1):
            step = ep.turn(r[:program.REPLY_CAP], lambda source, shadow: "PASS", [])
            if step is None:
                break
            json.dumps(ep.observation(step), ensure_ascii=False).encode("utf-8")
        assert (step is None) == hostile.ends and k == len(turns), (name, ep.end, ep.error)
        assert step is not None or ep.end in MODEL_ENDS, (name, ep.end)


def test_every_episode_turn_is_guarded():
    """Every registered profile's episode applies turns through ``model_turn``."""
    for name, agent in AGENTS.items():
        with tempfile.TemporaryDirectory() as root:
            _, ep = _episode(name, "a", root)
            assert getattr(type(ep).turn, "model_turn", False), name


# -------------------------------------------------------- rollouts: the program, the service, finalize


@pytest.fixture(scope="module", params=PROFILES)
def rollouts(request, mbpp_tasks):
    harness = GlyphHarnessConfig(profile=request.param, tool_timeout=3, model_timeout=10)
    with Rollouts(mbpp_tasks, harness) as r:
        yield r


def _scored(played, reason: str = ""):
    """The rollout ended on the model's account and is scored: exit 0, no fault, the records agree."""
    trace, rec = played.trace, played.record
    assert trace["end"] in MODEL_ENDS and trace["end"] not in INFRA_ENDS, \
        (reason, trace["end"], trace["error"])
    assert program.exit_status(msgspec.convert(trace, Trace)) == 0, reason
    assert rec.fault is None and rec.reward == 0.0 and rec.tamper == [], (reason, rec.reason, rec.tamper)
    json.dumps(trace)


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_every_catalogued_hostile_reply_ends_its_rollout_scored(rollouts, tmp_path, mbpp_tasks, arm):
    """``glyph.redteam.replies`` through the program, the test service and finalize: each one under both
    profiles (the module's two fixtures) and both arms is scored 0, the program exits 0, finalize's replay
    agrees with the program, and nothing is written but solution.py."""
    task = mbpp_tasks[TASK]
    agent = AGENTS[rollouts.harness.profile]
    project = agent.project(task.task_id)
    for name, hostile in REPLIES.items():
        played = rollouts.play(task, arm, f"hostile-{name}", tmp_path / f"{arm}-{name}",
                               files={"canary.txt": "x"})
        _scored(played, name)
        trace = played.trace
        if hostile.ends:  # it ended the episode at its last turn
            assert trace["turns"] == len(hostile.turns(agent, project, lambda: "1")), (name, trace["error"])
        else:  # a call answered (failed, but for the odd id), then the FINAL after it ended the episode
            status = trace["calls"][0]["status"]
            assert status in ("ok", "success") if name == "surrogate_id" else \
                status == "failed" or status.startswith("error: "), (name, status)
            assert trace["turns"] == 2 and trace["end"] == FINAL, (name, trace["error"])
        files = {str(p.relative_to(played.workspace)) for p in played.workspace.rglob("*") if p.is_file()}
        assert files == {"canary.txt", agent.solution(project)}, (name, files)
    played = rollouts.play(task, arm, "hostile", tmp_path / f"{arm}-hostile")
    _scored(played, "hostile")
    assert played.trace["turns"] == 5


@pytest.mark.verifiers_free
@fixed(40)
@given(replies=st.lists(reply_or_big, min_size=1, max_size=4), arm=st.sampled_from("ab"))
def test_any_reply_ends_its_rollout_scored(rollouts, mbpp_tasks, replies, arm):
    """Arbitrary replies served over HTTP (JSON: what an endpoint can send) to the real program, its tester
    the trusted test service, then finalize with the interception's record replayed: every rollout is
    scored (reward 0, not errored, exit 0, not tampered), under both profiles (the module's fixtures)."""
    agent = AGENTS[rollouts.harness.profile]
    replies = replies + [agent.turn_text(None)]  # FINAL ends any episode still going (or breaks the protocol)
    with Scripted(replies) as model, tempfile.TemporaryDirectory() as tmp:
        played = rollouts.play(mbpp_tasks[TASK], arm, "scripted", Path(tmp) / "ws", model=model)
    _scored(played)


@pytest.mark.parametrize("profile", PROFILES)
def test_hostile_rollouts_through_vf_eval_are_scored_zero(tmp_path, mbpp_tasks, mbpp_path, profile):
    """The ``hostile`` policy through the environment (``vf-eval``, ``GlyphTask.finalize``), in Arm B: the
    k-th conversation plays four calls the episode goes on from and the k-th reply that ends it, so nine
    tasks play every one of ``ENDS`` and 36 of the calls. Every rollout is scored 0, none errored (an
    errored one is dropped by PRIME-RL: the policy would never be penalised for the reply)."""
    from glyph.demo import read_rollouts, vf_eval_command
    from glyph.policies.server import PolicyServer
    server = PolicyServer(mbpp_tasks).start()
    try:
        cmd = vf_eval_command(server.base_url, "hostile", "b", len(ENDS), tmp_path, mbpp_path,
                              ["--env.agent.harness.tool-timeout", "3"], profile=profile)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, PRIME_RUNS_MODE="disabled"))
        assert proc.returncode == 0, proc.stderr[-3000:]
        draws = sorted(server.planner.hostile_draws.values())
    finally:
        server.close()
    rows = read_rollouts(tmp_path)
    assert len(rows) == len(ENDS) and len({k % len(ENDS) for k in draws}) == len(ENDS), (rows, draws)
    for r in rows:
        assert r["ok"] and not r["errors"] and r["reward"] == 0.0, r
        assert r["metrics"]["tampered"] == 0, r


# -------------------------------------------------------- credit, the SFT replay, the single-turn program


class _Grader:
    """Credit's grader without a sandbox: every source fails (the continuation's text is what is tested)."""

    def visible(self, source: str) -> str:
        return Outcome.ASSERTION_FAILURE.value

    def hidden(self, source: str) -> str:
        return Outcome.ASSERTION_FAILURE.value


@fixed(60)
@given(profile=st.sampled_from(PROFILES), arm=st.sampled_from("ab"), recorded=st.lists(reply, max_size=3),
       continued=st.lists(reply_or_big, max_size=4))
def test_credit_replays_and_continues_any_replies(mbpp_tasks, profile, arm, recorded, continued):
    """Credit replays a recorded trajectory of arbitrary replies and continues from every snapshot with a
    model that replies arbitrary text: a report, never an exception."""
    task = mbpp_tasks[TASK]
    p = get_profile(profile)
    opening = p.agent.messages(arm, task.text, "", list(task.test_list), p.agent.project(task.task_id), 8)
    messages = tuple(opening) + tuple(m for r in recorded for m in ({"role": "assistant", "content": r},
                                                                    {"role": "user", "content": "RESULT"}))
    traj = Trajectory("hypothesis", messages, arm, 8, 1, TASK, "", profile)

    def chat(msgs: list[dict]) -> str:  # the k-th continuation turn from any snapshot: continued[k]
        k = sum(m["role"] == "assistant" for m in msgs) - len(recorded)
        return continued[k] if 0 <= k < len(continued) else p.agent.turn_text(None)

    chat = credit.ChatContinuation(chat)
    report = credit.assign(traj, task, chat, grader=_Grader())
    assert len(report.steps) >= 1 and report.final_outcome == Outcome.ASSERTION_FAILURE.value


@fixed(60)
@given(profile=st.sampled_from(PROFILES), arm=st.sampled_from("ab"), replies=st.lists(reply, min_size=1,
                                                                                        max_size=4))
def test_the_sft_replay_takes_any_replies(mbpp_tasks, profile, arm, replies):
    agent = AGENTS[profile]
    project = agent.project(11)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    msgs += [m for r in replies for m in ({"role": "assistant", "content": r},
                                          {"role": "user", "content": "x"})]
    cfg = {"arm": arm, "max_tool_calls": 8, "test_cost": 1, "revise_feedback": "none", "project": project,
           "switches": None, "limits": {"cpu_s": 1.0, "wall_s": 1.0}}
    got = sft_replay(0, {"messages": msgs, "task_id": 11}, agent, cfg, lambda source, shadow: "PASS")
    assert got.ok == (got.index is None)


@fixed(200)
@given(text=st.one_of(odd_text, reply, st.text(max_size=200)))
def test_the_single_turn_program_writes_any_reply(text):
    """glyph-conventions' program: any reply (a lone surrogate too) becomes solution.py; nothing raises."""
    with tempfile.TemporaryDirectory() as root, mock.patch.object(single_turn, "chat", lambda *a: text):
        got = single_turn.run({"endpoint": {}, "messages": []}, "", root)
        assert got["end"] == "answered"
        assert Path(root, "solution.py").read_bytes() == source_bytes(single_turn.extract_code(text))


# -------------------------------------------------------- what is the endpoint's fault, what the model's


@pytest.mark.parametrize("body,got", [
    (b'{"choices": [{"message": {"content": "\xff\xfe not UTF-8"}}]}', "not JSON"),
    (b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}", "not JSON"),
    (b'{"choices": [{"message": {"content": null}}]}', ""),
    (b'{"choices": [{"message": {"content": "\\ud800\\u0000 CALL"}}]}', "\ud800\x00 CALL"),
    (b'{"choices": [{"message": {"content": ["a", "b"]}}]}', "not text"),
])
def test_what_an_endpoint_body_is(body, got):
    """Invalid UTF-8 or JSON nested past the stack is a body the interception server never sends for a
    reply (it writes the model's text as JSON): the endpoint's fault (exit 97). A ``null`` content is the
    model's empty reply (the study's program reads it as ""); escapes in the text are the model's text."""
    with mock.patch.object(program, "_post", lambda *a, **k: body):
        if got in ("not JSON", "not text"):
            with pytest.raises(program.EndpointError, match=got):
                program.chat({"base_url": "http://127.0.0.1:9", "model": "m"}, [], 1.0, "")
        else:
            assert program.chat({"base_url": "http://127.0.0.1:9", "model": "m"}, [], 1.0, "") == got


@pytest.mark.verifiers_free
def test_exit_98_is_only_a_testers_fault(tmp_path, mbpp_tasks):
    """The program's tester-fault exit comes from a TesterFault alone: a reply that nests 3,000 deep (the
    RecursionError the program once took for one) ends the episode as a protocol error, exit 0; the same
    program whose test service is gone ends ``tester_error``, exit 98."""
    deep = 'CALL {"id": "1", "tool": "python_test", "args": ' + "[" * 3000 + "]" * 3000 + "}"
    test = 'CALL {"id": "1", "tool": "python_test", "args": {}}'
    with Rollouts(mbpp_tasks) as r:
        for replies, url, end, code in (([deep], None, PROTOCOL_ERROR, 0),
                                        ([test], "http://127.0.0.1:9/gone", "tester_error",
                                         program.TESTER_FAILED)):
            with Scripted(replies + ["FINAL: done."]) as model:
                played = r.play(mbpp_tasks[TASK], "a", "scripted", tmp_path / end, model=model,
                                service_url=url)
            assert played.trace["end"] == end, played.trace["error"]
            assert program.exit_status(msgspec.convert(played.trace, Trace)) == code


def test_the_catalogue_is_what_it_says():
    assert set(REPLIES) == {r.name for r in GOES_ON} | {r.name for r in ENDS}
    assert len(REPLIES) == len(GOES_ON + ENDS)
    assert not any(r.ends for r in GOES_ON) and all(r.ends for r in ENDS)
