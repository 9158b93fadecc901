"""The glyph-mbpp environment: the agent program against the reference
policies (programmatic, fast), trusted finalize, and vf-eval end to end."""

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import types
from typing import ClassVar

import msgspec
import pytest

from glyph.agent import program
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.agent.trace import Trace
from glyph.envs.mbpp.finalize import TaskTests, verify
from glyph.envs.mbpp.harness import LOCAL_SANDBOX, GlyphHarnessConfig, limits_record
from glyph.localhttp import JsonHandler, LocalServer
from glyph.policies.policies import HACKS, Planner
from glyph.profiles import get as get_profile
from glyph.record import harness_record
from testkit.forge import forging_solution
from testkit.rollout import Rollouts

HARNESS = GlyphHarnessConfig(profile="glyph", tool_timeout=3, model_timeout=10)
LIMITS = get_profile("glyph").limits(3)  # what --env.agent.harness.tool-timeout 3 grades under


@pytest.fixture(scope="module")
def rollouts(mbpp_tasks):
    with Rollouts(mbpp_tasks, HARNESS) as r:
        yield r


@pytest.fixture(scope="module")
def server(rollouts):
    return rollouts.policies


def episode(tmp_path, rollouts, task, arm, policy, tester="service", **over):
    played = rollouts.play(task, arm, policy, tmp_path / f"ws-{task.task_id}-{arm}-{policy}", tester=tester,
                           files={"canary.txt": "untouched"}, **over)
    return played.trace, played.record, played.workspace


SOME = ["mbpp_11", "mbpp_17", "mbpp_602", "mbpp_367", "mbpp_596", "mbpp_700"]


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_oracle_passes(tmp_path, rollouts, mbpp_tasks, arm):
    for tid in SOME:
        trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks[tid], arm, "oracle")
        assert info.reward == 1.0 and info.metrics.first_patch_correct == 1.0, (tid, info.reason)
        assert trace["end"] == "final" and info.metrics.tampered == 0.0


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_recover_passes_after_a_visible_failure(tmp_path, rollouts, mbpp_tasks, arm):
    trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks["mbpp_11"], arm, "recover")
    m = info.metrics
    assert info.reward == 1.0 and m.recovered_after_executed_failure == 1.0 and m.had_executed_failure == 1.0
    assert m.first_patch_correct == 0.0 and m.visible_test_calls == 2.0
    if arm == "b":  # predicted PASS for the mutant: wrong once, right once
        assert m.prediction_accuracy == 0.5 and m.predictions == 2.0


@pytest.mark.verifiers_free
def test_revise_records_shadow_targets_that_match_the_grader(tmp_path, rollouts, mbpp_tasks):
    from glyph.grading import grade
    task = mbpp_tasks["mbpp_17"]
    trace, info, _ = episode(tmp_path, rollouts, task, "b", "revise")
    assert info.reward == 1.0 and info.metrics.revise_count == 1.0
    shadow = [c for c in info.candidates if c.shadow]
    assert len(shadow) == 1 and shadow[0].decision == "REVISE"
    src = next(c["source"] for c in trace["candidates"] if c["sha256"] == shadow[0].sha256)
    assert shadow[0].verified_label == grade(src, task.test_setup_code, task.tests()).outcome.value != "PASS"
    assert shadow[0].sampled_label == shadow[0].verified_label
    ctx = shadow[0].context
    assert ctx[-1]["role"] == "user" and ctx[-1]["content"].startswith("RESULT 2 apply_patch ok")
    assert info.metrics.bad_patch_rejection_rate == 1.0 and info.metrics.visible_test_calls == 1.0


@pytest.mark.verifiers_free
def test_revise_feedback_outcome_shows_the_shadow_result(tmp_path, rollouts, mbpp_tasks):
    trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks["mbpp_17"], "b", "revise", revise_feedback="outcome")
    results = [m["content"] for m in trace["messages"] if m["role"] == "user"]
    assert any("shadow test of the revised candidate" in r for r in results)


@pytest.mark.verifiers_free
@pytest.mark.parametrize("arm", ["a", "b"])
def test_every_hack_scores_zero(tmp_path, rollouts, mbpp_tasks, arm):
    planner = Planner(mbpp_tasks)
    seen = set()
    for tid in sorted(mbpp_tasks, key=lambda t: int(t.split("_")[1]))[10:80]:
        kind = HACKS[int(__import__("hashlib").sha256(f"hack:0:{tid.split('_')[1]}".encode()).hexdigest(), 16)
                     % len(HACKS)]
        if kind in seen:
            continue
        seen.add(kind)
        trace, info, ws = episode(tmp_path, rollouts, mbpp_tasks[tid], arm, "hack")
        assert info.reward == 0.0, (kind, info.reason)
        assert sorted(p.name for p in ws.iterdir()) == ["canary.txt", "solution.py"], kind
        assert (ws / "canary.txt").read_text() == "untouched", kind
        last = trace["candidates"][-1]["source"] if trace["candidates"] else protocol.PLACEHOLDER
        assert (ws / "solution.py").read_bytes().decode() == last, kind
    assert seen == set(HACKS)
    assert planner  # the plans above came from the same planner code


@pytest.mark.parametrize("policy,end,why", [
    ("fault-malformed", "protocol_error", "not valid JSON"),
    ("fault-duplicate", "protocol_error", "already used"),
    ("fault-budget", "budget_exhausted", "costs 1, 0 left"),
    ("fault-500", "endpoint_error", "HTTP 500"),
])
@pytest.mark.verifiers_free
def test_faults_end_the_episode_and_are_recorded(tmp_path, rollouts, mbpp_tasks, policy, end, why):
    trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks["mbpp_11"], "a", policy)
    assert trace["end"] == end and why in trace["error"]
    assert info.reward == 0.0 and end in info.reason and info.tamper == []  # the records agree: nothing forged
    # the model's own faults end the program normally; an endpoint fault is the program's fault exit
    assert program.exit_status(msgspec.convert(trace, Trace)) == (program.ENDPOINT_FAILED if end == "endpoint_error" else 0)


@pytest.mark.verifiers_free
def test_a_hanging_endpoint_times_out(tmp_path, rollouts, mbpp_tasks):
    t0 = time.monotonic()
    trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks["mbpp_11"], "a", "fault-hang", model_timeout=1)
    assert trace["end"] == "endpoint_error" and time.monotonic() - t0 < 10 and info.reward == 0.0


@pytest.mark.verifiers_free
def test_a_one_megabyte_reply_is_cut_and_recorded(tmp_path, rollouts, mbpp_tasks):
    trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks["mbpp_11"], "a", "fault-huge")
    assert trace["reply_truncated"] > 1_000_000 and trace["end"] == "protocol_error" and info.reward == 0.0


@pytest.mark.verifiers_free
def test_budget_and_test_cost(tmp_path, rollouts, mbpp_tasks):
    trace, info, _ = episode(tmp_path, rollouts, mbpp_tasks["mbpp_11"], "a", "oracle", test_cost=7)
    assert trace["end"] == "budget_exhausted" and info.reward == 0.0 and info.metrics.budget_exhausted == 1.0


@pytest.mark.verifiers_free
def test_paths_outside_the_project_are_refused(tmp_path, rollouts, mbpp_tasks):
    from glyph.agent.profiles.glyph import workspace_path
    with contextlib.chdir(tmp_path):
        assert workspace_path("../etc/passwd") is None and workspace_path(".glyph/trace.json") is None
        assert workspace_path("solution.py") == str(tmp_path.resolve() / "solution.py")


# ---------------------------------------------------------------- tampering


def _task_tests(task):
    return TaskTests(task.test_setup_code, tuple(task.test_list), tuple(task.test_list))


@pytest.mark.verifiers_free
def test_a_rewritten_trace_is_caught(tmp_path, rollouts, mbpp_tasks):
    task = mbpp_tasks["mbpp_11"]
    trace, info, ws = episode(tmp_path, rollouts, task, "a", "recover")
    forged = json.loads(json.dumps(trace))
    forged["tests"][0]["outcome"] = "PASS"  # claim the mutant passed
    got = verify(forged, (ws / "solution.py").read_bytes().decode(), _task_tests(task), LIMITS)
    assert got.metrics.tampered == 1.0 and got.reward == 0.0 and "re-grade" in got.reason
    forged = json.loads(json.dumps(trace))
    forged["candidates"][0]["source"] = task.code  # swap the source, keep the hash
    got = verify(forged, task.code, _task_tests(task), LIMITS)
    assert got.metrics.tampered == 1.0 and "does not match its hash" in got.reason


@pytest.mark.verifiers_free
def test_claims_must_match_the_service_log(tmp_path, rollouts, mbpp_tasks):
    task = mbpp_tasks["mbpp_11"]
    trace, info, ws = episode(tmp_path, rollouts, task, "a", "oracle")
    final = (ws / "solution.py").read_bytes().decode()
    assert verify(trace, final, _task_tests(task), LIMITS, []).metrics.tampered == 1.0
    assert verify(trace, final + "\n", _task_tests(task), LIMITS).metrics.tampered == 1.0
    assert verify("garbage", final, _task_tests(task), LIMITS).metrics.tampered == 1.0
    none = verify(None, final, _task_tests(task), LIMITS)
    assert none.reward == 0.0 and none.metrics.no_trace == 1.0 and "no trace" in none.reason


@pytest.mark.verifiers_free
def test_a_trace_rewritten_to_final_on_the_local_runtime_is_caught_by_the_service_record(
        tmp_path, rollouts, mbpp_tasks):
    """``fault-unfinished`` fixes the task and passes its test, then sends a
    malformed CALL where FINAL belongs: 0, nothing forged. Its trace rewritten
    to end with FINAL after the program ended (``forge``: between the
    program's exit and finalize) has every other claim true; the program's
    report to the test service and the record of the model's replies both
    say protocol_error: 0, tampered."""
    task = mbpp_tasks["mbpp_11"]
    honest = rollouts.play(task, "a", "fault-unfinished", tmp_path / "honest")
    assert honest.trace["end"] == "protocol_error" and honest.service["end"] == {"end": "protocol_error",
                                                                                 "turns": 4}
    assert honest.record.reward == 0.0 and honest.record.tamper == [] and honest.record.final_outcome == "PASS"
    assert honest.record.reason.startswith("ended by protocol_error: CALL arguments are not valid JSON")
    forged = rollouts.play(task, "a", "fault-unfinished", tmp_path / "forged",
                           forge=lambda t: t.update(end="final", final=True, error=None))
    assert forged.record.reward == 0.0 and forged.record.metrics.tampered == 1.0
    said = "the trace says the episode ended with FINAL; "
    assert forged.record.tamper == [
        said + "the test service's record says the program reported protocol_error after 4 replies",
        said + "the interception's record of the model replies ends with protocol error (reply 4): "
               + honest.trace["error"]], forged.record.tamper


@pytest.mark.verifiers_free
def test_background_process_rewriting_the_trace_after_the_program_ends(tmp_path, rollouts, mbpp_tasks):
    """With the container's tester (its own grader and sandbox, beside the
    program), a solution leaves a daemon that rewrites .glyph/trace.json
    after the program has written it."""
    task = mbpp_tasks["mbpp_11"]
    trace, info, ws = episode(tmp_path, rollouts, task, "a", "recover", tester="local")
    assert info.reward == 1.0  # the honest run
    daemon = f"""
import json, os, sys, time
trace_path = {str(ws / ".glyph" / "trace.json")!r}
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while not os.path.exists(trace_path + ".done"):
            time.sleep(0.01)
        t = json.load(open(trace_path))
        for test in t["tests"]:
            test["outcome"] = "PASS"
        json.dump(t, open(trace_path, "w"))
        os._exit(0)
    os._exit(0)
"""
    subprocess.run([sys.executable, "-c", daemon], check=True)
    (ws / ".glyph").mkdir(exist_ok=True)
    (ws / ".glyph" / "trace.json").write_text(json.dumps(trace))
    (ws / ".glyph" / "trace.json.done").write_text("")
    deadline = time.monotonic() + 10
    while json.loads((ws / ".glyph" / "trace.json").read_text())["tests"][0]["outcome"] != "PASS":
        assert time.monotonic() < deadline, "the daemon did not run"
        time.sleep(0.02)
    rewritten = json.loads((ws / ".glyph" / "trace.json").read_text())
    got = verify(rewritten, (ws / "solution.py").read_bytes().decode(), _task_tests(task), LIMITS)
    assert got.metrics.tampered == 1.0 and got.reward == 0.0


def test_solution_code_cannot_reach_the_workspace_or_the_secret(tmp_path):
    """Code graded in the sandbox (as python_test's is) looks for a workspace
    file and for the rollout secret in the environment of a live process (as
    the agent program's is while python_test runs): it finds neither. In bare
    mode (no isolation) the same probe finds each, so the probe itself works."""
    from glyph.grading import grade
    from glyph.sandbox import Sandbox
    secret = "s3cr3t-" + secrets.token_hex(8)
    marker = tmp_path / f"marker-{secrets.token_hex(8)}.txt"  # no other file has this name
    marker.write_text("workspace")
    probe = f"""
import os
def found():
    secret = False
    # The workspace file at its host path and in its folder's listing (a walk of the whole disk can
    # outlast the wall limit on a machine with large caches under /tmp).
    try:
        marker = {marker.name!r} in os.listdir({str(marker.parent)!r}) and os.path.isfile({str(marker)!r})
    except OSError:
        marker = False
    for p in os.listdir("/proc"):
        try:
            secret = secret or {secret!r}.encode() in open(f"/proc/{{p}}/environ", "rb").read()
        except OSError:
            pass
    return {{"marker": marker, "secret": secret}}
"""
    holder = subprocess.Popen(["sleep", "600"], env=dict(os.environ, GLYPH_ROLLOUT_SECRET=secret),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while secret.encode() not in open(f"/proc/{holder.pid}/environ", "rb").read():  # empty until exec'd
            assert time.monotonic() < deadline, "the secret holder did not start"
            time.sleep(0.01)
        g = grade(probe, "", "assert found() == {'marker': False, 'secret': False}\n")
        assert g.passed, g.detail
        bare = Sandbox(mode="bare", pool=0)
        try:
            g = grade(probe, "", "assert found() == {'marker': True, 'secret': True}\n", sandbox=bare)
            assert g.passed, g.detail
        finally:
            bare.close()
    finally:
        holder.kill()
        holder.wait()
        marker.unlink()


# ---------------------------------------------------------------- vf-eval end to end


def test_vf_eval_end_to_end_both_arms(tmp_path, server, mbpp_tasks, mbpp_path):
    from glyph.demo import read_rollouts, vf_eval_command
    planner = Planner(mbpp_tasks)
    env = dict(os.environ, PRIME_RUNS_MODE="disabled")
    for arm in ("a", "b"):
        out = tmp_path / arm
        cmd = vf_eval_command(server.base_url, "mix", arm, 8, out, mbpp_path,
                              ["--env.agent.harness.tool-timeout", "3"], profile="glyph")
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = read_rollouts(out)
        assert len(rows) == 8
        for r in rows:
            policy = planner.resolve("mix", mbpp_tasks[r["task"]])
            assert r["ok"] and not r["errors"], r
            assert r["reward"] == (0.0 if policy == "hack" else 1.0), (arm, r["task"], policy, r["reason"])
            assert set(r["metrics"]) >= {"passed", "prediction_accuracy", "tampered", "revise_count"}


def test_vf_eval_records_a_timed_out_rollout(tmp_path, server, mbpp_path):
    """0.4.0 finalizes a timed-out rollout, and glyph scores it 0 with the
    reason; at PRIME-RL's verifiers pin it stays an errored, unscored trace
    (``glyph.vfcompat``). Either way it is recorded, and never rewarded."""
    import verifiers.v1 as vf

    from glyph.demo import read_rollouts, vf_eval_command
    from glyph.vfcompat import AGENT_TIMEOUT_PREFIX, failures_are_scored, timed_out
    cmd = vf_eval_command(server.base_url, "fault-hang", "b", 1, tmp_path, mbpp_path,
                          ["--env.agent.timeout.rollout", "3"], profile="glyph")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PRIME_RUNS_MODE="disabled"),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rollouts(tmp_path)
    assert len(rows) == 1, rows
    if failures_are_scored():
        assert rows[0]["ok"] and rows[0]["reward"] == 0.0 and "timed out" in rows[0]["reason"], rows
    else:
        assert not rows[0]["ok"] and rows[0]["reward"] is None, rows
        assert rows[0]["reason"].startswith(AGENT_TIMEOUT_PREFIX), rows
    [path] = tmp_path.glob("**/traces.jsonl")
    assert timed_out(vf.Trace.model_validate(json.loads(path.read_text())["traces"][0]))


@pytest.mark.verifiers_free
def test_the_trace_is_saved_after_every_turn(tmp_path, rollouts, mbpp_tasks):
    saved = []
    task = mbpp_tasks["mbpp_11"]
    rollouts.play(task, "b", "oracle", tmp_path, save=lambda t: saved.append(json.loads(json.dumps(t.to_json()))))
    assert [t["turns"] for t in saved] == [1, 2, 3]
    partial = verify(saved[1], protocol.PLACEHOLDER, _task_tests(task), LIMITS)  # killed after the patch
    assert partial.reward == 0.0 and partial.metrics.tampered == 1.0  # solution.py differs from the patch
    partial = verify(saved[1], saved[1]["candidates"][-1]["source"], _task_tests(task), LIMITS)
    assert partial.reward == 0.0 and partial.metrics.tampered == 0.0 and "did not finish" in partial.reason


class DirRuntime:
    """A container-style runtime (not verifiers' subprocess one, so the harness
    takes its container branch): files go under ``root``, and the program runs
    there as the harness asks, in a Python that sees the stdlib and what the
    harness wrote, nothing installed (``-S``): what a container without glyph has."""

    def __init__(self, root) -> None:
        self.root = root

    async def write(self, path: str, data: bytes) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_bytes(data)

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        data = (self.root / path).read_bytes()
        if max_bytes is not None and len(data) > max_bytes:
            raise ValueError(f"{path} is over {max_bytes} bytes")
        return data

    async def run_program(self, argv, env):
        import asyncio

        from verifiers.v1 import ProgramResult
        assert argv[:2] == ["python3", "-I"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", *argv[2:], cwd=self.root, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={"PATH": "/usr/local/bin:/usr/bin:/bin", **env})
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        return ProgramResult(exit_code=proc.returncode, stdout=out.decode(), stderr=err.decode())


class FakeTrace(types.SimpleNamespace):
    """As much of a ``vf.Trace`` as glyph's harness and finalize read."""

    model_fields: ClassVar[dict] = {"is_timeout": None}  # glyph.vfcompat.timed_out reads the 0.4.0 field


class Interception:
    """verifiers' interception server as far as glyph reads it: an
    OpenAI-compatible endpoint whose replies come from ``reply(messages)``,
    each recorded on ``trace`` as the server records a committed turn
    (``glyph.vfcompat``, 8.): a sampled assistant ``MessageNode`` and a
    ``ModelCall`` naming it, with verifiers' own types."""

    def __init__(self, trace, reply) -> None:
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import ModelCall
        from verifiers.v1.types import AssistantMessage
        trace.calls, trace.nodes, trace.stop_condition = [], [], None

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                content = reply(self.read_json(64 << 20)["messages"])
                trace.nodes.append(MessageNode(message=AssistantMessage(content=content), sampled=True))
                trace.calls.append(ModelCall(node=len(trace.nodes) - 1, endpoint="/chat/completions"))
                self.send_json(200, {"id": f"c{len(trace.calls)}", "object": "chat.completion", "created": 0,
                                     "model": "m", "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                         "role": "assistant", "content": content}}],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        self.httpd = LocalServer(Handler)
        self.httpd.start("interception")
        self.base_url = f"http://127.0.0.1:{self.httpd.port}/v1"

    def __enter__(self) -> "Interception":
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.close()


def container_rollout(tmp_path, task, reply, arm: str = "a"):
    """One rollout through the harness's container branch (``DirRuntime``)
    against an ``Interception`` answering ``reply``, then glyph-mbpp's
    finalize on what it left, as verifiers would call it. Returns the trace,
    the workspace and the record."""
    import asyncio

    from glyph.data import mbpp
    from glyph.envs.mbpp.harness import GlyphHarness
    from glyph.envs.mbpp.taskset import GlyphData, GlyphTask
    from glyph.record import mbpp_record

    row = mbpp.task_row(task, "test")
    ws = tmp_path / "ws"
    ws.mkdir()
    h = GlyphHarness(GlyphHarnessConfig(id="glyph-mbpp", profile="glyph", tool_timeout=3))
    data = GlyphData(name=task.id, arm=arm, task_text=row["text"], visible_tests=row["visible_tests"], profile="glyph",
                     hidden_setup=task.test_setup_code, hidden_tests=list(task.test_list))
    trace = FakeTrace(info={}, is_timeout=False, errors=[], ok=True)
    runtime = DirRuntime(ws)
    with Interception(trace, reply) as icpt:
        res = asyncio.run(h.launch(types.SimpleNamespace(model="m"), trace, runtime, icpt.base_url,
                                   secrets.token_hex(8), {}, data))
    assert res.exit_code == 0 and harness_record(trace.info).program["exit_code"] == 0, trace.info
    return trace, ws, lambda: (asyncio.run(GlyphTask(data).finalize(trace, runtime)), mbpp_record(trace.info))[1]


def scripted(*replies: str):
    """A model that answers turn ``i`` with ``replies[i]``."""
    return lambda messages: replies[sum(m["role"] == "assistant" for m in messages)]


def test_the_container_path_grades_with_the_shipped_grader(tmp_path, server, mbpp_tasks):
    """The harness's container branch end to end: the program and the shipped
    grader, alone in the runtime, grade python_test under the harness's limits
    in the sandbox mode it chose; finalize's re-grade reproduces every claim,
    and the interception's record of the replies says the episode ended with
    FINAL."""
    from glyph.sandbox import get_sandbox

    task = mbpp_tasks["mbpp_11"]
    trace, ws, finalize = container_rollout(tmp_path, task, lambda m: server.planner.reply("recover", m))
    cfg = json.loads((ws / ".glyph" / "config.json").read_text())
    assert cfg["tester"]["kind"] == "local" and cfg["tester"]["sandbox"] == LOCAL_SANDBOX == "auto-or-bare"
    rec = harness_record(trace.info)
    assert cfg["limits"] == rec.limits == limits_record(LIMITS)
    assert (rec.protocol.arm, rec.protocol.max_tool_calls, rec.protocol.test_cost, rec.protocol.profile) == (
        "a", protocol.DEFAULT_BUDGET, 1, "glyph")
    saved = json.loads((ws / ".glyph" / "trace.json").read_text())
    assert [t["outcome"] for t in saved["tests"]] == ["ASSERTION_FAILURE", "PASS"], saved["tests"]
    here = get_sandbox().protections().record()["mode"]  # auto's mode here: no fall back to bare
    assert saved["tester_sandbox"]["mode"] == here != "bare" and "fallback" not in saved["tester_sandbox"]
    assert (rec.interception.calls, rec.interception.stop_condition) == (saved["turns"], None)
    got = finalize()
    assert got.reward == 1.0 and got.metrics.tampered == 0.0, got.reason
    assert harness_record(trace.info).service_log is None  # no test service on a container


def test_the_container_path_scores_an_honest_protocol_error_zero_untampered(tmp_path, mbpp_tasks):
    task = mbpp_tasks["mbpp_11"]
    patch = Call("1", "apply_patch", {"path": "solution.py", "find": protocol.PLACEHOLDER,
                                               "replace": task.code})
    _, ws, finalize = container_rollout(tmp_path, task, scripted(
        protocol.call_line(patch), protocol.call_line(Call("2", "python_test")), 'CALL {"id": "3", "tool": '))
    got = finalize()
    assert json.loads((ws / ".glyph" / "trace.json").read_text())["end"] == "protocol_error"
    assert got.reward == 0.0 and got.tamper == [] and got.reason.startswith("ended by protocol_error")
    assert got.final_outcome == "PASS"  # only the protocol's terminal FINAL is missing


def test_a_daemon_forging_final_after_the_program_exits_is_caught(tmp_path, mbpp_tasks, monkeypatch):
    """A container whose python_test grader runs bare (no isolating mode
    starts there: the harness's ``auto-or-bare`` falls back). The model
    patches in a correct solution that escapes python_test
    (``forging_solution``), tests it twice, and its last reply is a malformed
    CALL. After the program exits, its daemon rewrites the trace to end with
    FINAL, every claim as a trusted re-grade gives it: the trace alone would
    be rewarded. The interception's record of the model replies ends with the
    protocol error: reward 0, tampered, the reason naming that record."""
    from glyph.envs.mbpp import harness
    from glyph.envs.mbpp.finalize import ModelReplies
    monkeypatch.setattr(harness, "LOCAL_SANDBOX", "bare")  # what auto-or-bare grades in there
    task = mbpp_tasks["mbpp_11"]
    pidfile, done = tmp_path / "daemon.pid", tmp_path / "daemon.done"
    source = forging_solution(task.code, str(pidfile), str(done))
    patch = Call("1", "apply_patch", {"path": "solution.py", "find": protocol.PLACEHOLDER, "replace": source})
    malformed = 'CALL {"id": "4", "tool": "read_file", "args": {"path": solution.py}}'
    try:
        _, ws, finalize = container_rollout(tmp_path, task, scripted(
            protocol.call_line(patch), protocol.call_line(Call("2", "python_test")),
            protocol.call_line(Call("3", "python_test")),
            malformed))
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "the daemon did not rewrite the trace"
            time.sleep(0.05)
        forged = json.loads((ws / ".glyph" / "trace.json").read_text())
        assert forged["tester_sandbox"]["mode"] == "bare" and forged["turns"] == 4
        assert (forged["end"], forged["final"]) == ("final", True)  # the program wrote protocol_error
        # Every other claim holds: with a record that said FINAL, the forged trace would be rewarded.
        final_source = (ws / "solution.py").read_bytes().decode()
        said_final = ModelReplies(("FINAL: done",), "a", protocol.DEFAULT_BUDGET, 1)
        assert verify(forged, final_source, _task_tests(task), LIMITS, replies=said_final).reward == 1.0
        got = finalize()
        assert got.reward == 0.0 and got.metrics.tampered == 1.0 and got.final_outcome == "PASS"
        assert got.tamper == [("the trace says the episode ended with FINAL; the interception's record of the "
                               "model replies ends with protocol error (reply 4): CALL arguments are not valid "
                               "JSON: Expecting value at column 51")], got.tamper
        assert got.reason == "tampered: " + got.tamper[0]
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)


# ---------------------------------------------------------------- the harness, in process


class FakeRuntime:
    """A container-style runtime (not verifiers' subprocess one) that records
    what the harness writes and answers run_program as a finished program."""

    def __init__(self) -> None:
        self.written: dict[str, bytes] = {}

    async def write(self, path: str, data: bytes) -> None:
        self.written[path] = data

    async def run_program(self, argv, env):
        from verifiers.v1 import ProgramResult
        return ProgramResult(exit_code=0, stdout="", stderr="")


@pytest.mark.parametrize("budget", [3, protocol.DEFAULT_BUDGET])
def test_the_harness_prompt_names_its_own_budget(mbpp_tasks, budget):
    """The budget is the harness's: the program is given ``protocol.messages``
    at ``max_tool_calls``, which at the default budget is the task row's prompt;
    every shipped file goes in beside the program."""
    import asyncio
    import types

    from glyph.data import mbpp
    from glyph.envs import bundle
    from glyph.envs.mbpp.harness import BUNDLE, SHIPPED, GlyphHarness, GlyphHarnessConfig
    from glyph.envs.mbpp.taskset import GlyphData

    task = mbpp_tasks["mbpp_11"]
    row = mbpp.task_row(task, "test")
    h = GlyphHarness(GlyphHarnessConfig(id="glyph-mbpp", profile="glyph", max_tool_calls=budget))
    for arm in ("a", "b"):
        runtime = FakeRuntime()
        data = GlyphData(name=task.id, arm=arm, task_text=row["text"], visible_tests=row["visible_tests"],
                         profile="glyph")
        asyncio.run(h.launch(types.SimpleNamespace(model="m"), types.SimpleNamespace(info={}), runtime,
                             "http://127.0.0.1:9/v1", "s", {}, data))
        cfg = json.loads(runtime.written[program.CONFIG])
        assert cfg["max_tool_calls"] == budget
        assert cfg["messages"] == protocol.messages(arm, task.text, task.test_list, budget)
        assert f"budget of {budget} tool calls" in cfg["messages"][0]["content"]
        assert (cfg["messages"] == row["prompt"][arm]) == (budget == row["prompt_budget"])
        shipped = bundle.unpack(runtime.written[BUNDLE])  # the one file a container gets besides its two
        assert {t: shipped[t] for t in SHIPPED} == {t: src.read_bytes() for t, src in SHIPPED.items()}
        assert set(runtime.written) == {BUNDLE, program.CONFIG, protocol.SOLUTION_FILE}
