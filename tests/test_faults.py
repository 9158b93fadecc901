"""Faults are errors, not zeros, and every grading fact has one source.

* One ``Limits`` (``GlyphHarnessConfig.limits()``) grades python_test and
  finalize: a ``--env.agent.harness.tool-timeout`` other than 10 grades a run
  near its limit the same way in both (it used to read as tampered).
* The test service grades a retried python_test POST once, answers a fault
  with a 500 and a JSON body, and keeps rollouts apart.
* A model endpoint that answers 500 or hangs ends the rollout errored
  (``vf-eval``: ``ok`` false, no reward), the cause in ``info.glyph.reason``.
"""

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import types
import urllib.error
import urllib.request

import msgspec
import pytest

from glyph.agent import program
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.agent.trace import Trace
from glyph.envs.mbpp import test_service as service_module
from glyph.envs.mbpp.finalize import TaskTests, verify
from glyph.envs.mbpp.harness import (GlyphHarness, GlyphHarnessConfig, limits_from_record,
    limits_record, program_config)
from glyph.envs.mbpp.taskset import GlyphData
from glyph.localhttp import JsonHandler, LocalServer
from glyph.policies.server import PolicyServer
from glyph.profiles import get as get_profile
from glyph.record import encode, fault_record, harness_record
from glyph.sandbox import Limits
from testkit.rollout import Rollouts

SPIN = "import time as _t\n_s = _t.process_time()\nwhile _t.process_time() - _s < {s}:\n    pass\n"


@pytest.fixture(scope="module")
def rollouts(mbpp_tasks):
    with Rollouts(mbpp_tasks, GlyphHarnessConfig(profile="glyph", tool_timeout=3)) as r:
        yield r


@pytest.fixture(scope="module")
def service(rollouts):
    return rollouts.service


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


# ---------------------------------------------------------------- one Limits


def test_one_limits_source():
    cfg = GlyphHarnessConfig(id="glyph-mbpp", profile="glyph", tool_timeout=3)
    assert (cfg.limits().cpu_s, cfg.limits().wall_s) == (3.0, 6.0)
    assert limits_from_record(limits_record(cfg.limits())) == cfg.limits()
    assert limits_from_record(None) == GlyphHarnessConfig(id="glyph-mbpp").limits() == Limits(cpu_s=30, wall_s=30)
    with pytest.raises(ValueError, match="limits"):
        limits_from_record({"cpu_s": 1})


# What the program's "local" tester runs in a container, in a fresh ``python3 -I -S`` whose sys.path
# holds the stdlib and a copy of what the harness ships (``harness.SHIPPED``), nothing else: the
# shipped set grades on its own. It prints the outcomes, the grader's sandbox record, and every
# imported module from outside the copy and the stdlib (none may be).
_SHIPPED_DRIVER = r"""
import json, os, sys, sysconfig
prog = os.path.abspath(sys.argv[1])
jobs = json.loads(sys.stdin.read())
sys.path.insert(0, prog)
if jobs.get("no_isolation"):  # a container where no isolating mode starts
    from glyph.sandbox import client
    real = client.Sandbox._try_start
    client.Sandbox._try_start = lambda self, mode: real(self, mode) if mode == "bare" else "not here (test)"
from glyph.agent import program
out = {"outcomes": [], "sandboxes": []}
for job in jobs["runs"]:
    tester = program.Tester(job["spec"], "", job["limits"])
    try:
        out["outcomes"].append(tester(job["source"], shadow=False))
    except RuntimeError as exc:
        out["outcomes"].append("fault: " + str(exc))
    out["sandboxes"].append(tester.sandbox)
    tester.close()
roots = [prog] + [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")]
out["outside"] = sorted(n for n, m in list(sys.modules.items()) if getattr(m, "__file__", None)
                        and not any(os.path.abspath(m.__file__).startswith(r + os.sep) for r in roots))
out["grader"] = sys.modules["glyph.grading"].__file__
print(json.dumps(out))
"""


def shipped_copy(dest) -> str:
    """The program and what it imports, laid out as the harness writes them into the runtime."""
    from glyph.envs.mbpp.harness import SHIPPED
    for target, source in SHIPPED.items():
        (dest / target).parent.mkdir(parents=True, exist_ok=True)
        (dest / target).write_bytes(source.read_bytes())
    return str(dest)


def run_shipped_testers(tmp_path, runs: list[dict], no_isolation: bool = False) -> dict:
    prog = shipped_copy(tmp_path / "prog")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", _SHIPPED_DRIVER, prog], cwd=tmp_path,
                          input=json.dumps({"runs": runs, "no_isolation": no_isolation}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["outside"] == [] and out["grader"].startswith(prog + os.sep), out
    return out


def _local(task, sandbox: str = "auto-or-bare") -> dict:
    return {"kind": "local", "sandbox": sandbox, "setup": task.test_setup_code, "tests": list(task.test_list)}


@pytest.mark.verifiers_free
def test_the_shipped_grader_grades_under_the_same_limits(tmp_path, mbpp_tasks):
    """The container's python_test: glyph's grader from the shipped copy, under
    the harness's limits (CPU = ``cpu_s``, wall clock = ``wall_s``; either
    reached is TIMEOUT), in the strongest sandbox mode this machine starts."""
    from glyph.envs.mbpp.harness import LOCAL_SANDBOX
    task = mbpp_tasks["mbpp_11"]
    slow = SPIN.format(s=1.5) + task.code
    sleeper = types.SimpleNamespace(test_setup_code="", test_list=["assert True"])
    out = run_shipped_testers(tmp_path, [
        {"spec": _local(task, LOCAL_SANDBOX), "limits": {"cpu_s": 1, "wall_s": 30}, "source": slow},  # CPU
        {"spec": _local(task, LOCAL_SANDBOX), "limits": {"cpu_s": 10, "wall_s": 30}, "source": slow},
        {"spec": _local(sleeper, LOCAL_SANDBOX), "limits": {"cpu_s": 10, "wall_s": 1},
         "source": "import time\ntime.sleep(30)\n"},  # wall clock
        {"spec": _local(task, LOCAL_SANDBOX), "limits": {"cpu_s": 10, "wall_s": 30},
         "source": task.code.replace("return", "return None and", 1)},
    ])
    assert out["outcomes"] == ["TIMEOUT", "PASS", "TIMEOUT", "ASSERTION_FAILURE"], out
    from glyph.sandbox import get_sandbox
    here = get_sandbox().protections().record()["mode"]  # what auto starts on this machine
    assert {s["mode"] for s in out["sandboxes"]} == {here} and here != "bare"
    assert all(s["choice"] == "auto-or-bare" and "fallback" not in s for s in out["sandboxes"])


def test_the_shipped_grader_falls_back_to_bare_only_when_the_harness_chose_it(tmp_path, mbpp_tasks):
    """In a container where no isolating mode starts, ``auto-or-bare`` (the
    harness's choice) grades in ``bare`` and records why; ``auto`` (the
    grader's default) never does: python_test is a tester fault."""
    task = mbpp_tasks["mbpp_11"]
    limits = {"cpu_s": 10, "wall_s": 30}
    runs = [{"spec": _local(task, choice), "limits": limits, "source": task.code}
            for choice in ("auto-or-bare", "auto", "nonsense")]
    out = run_shipped_testers(tmp_path, runs, no_isolation=True)
    ok, refused, bad = out["outcomes"]
    assert ok == "PASS" and out["sandboxes"][0]["mode"] == "bare"
    assert "not here (test)" in out["sandboxes"][0]["fallback"]
    assert out["sandboxes"][0]["choice"] == "auto-or-bare"
    assert refused.startswith("fault: the grader failed: SandboxUnavailable") and out["sandboxes"][1] is None
    assert bad.startswith("fault: the grader failed: RuntimeError: tester.sandbox is 'nonsense'")


class ScriptedEndpoint:
    """An OpenAI-compatible endpoint that plays one task's fixed turns (the
    task found from the prompt): ``turns(task)``, by default write
    ``make_source(task)``, python_test, FINAL."""

    def __init__(self, tasks: dict, make_source=None, turns=None) -> None:
        from glyph.policies.policies import Planner
        planner = Planner(tasks)

        def default(task) -> list[str]:
            patch = {"path": protocol.SOLUTION_FILE, "find": protocol.PLACEHOLDER, "replace": make_source(task)}
            return [protocol.GLYPH.turn_text(Call("1", "apply_patch", patch)),
                    protocol.GLYPH.turn_text(Call("2", "python_test", {})), protocol.GLYPH.turn_text(None)]

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.read_json(64 << 20)
                plan = (turns or default)(planner.task_of(body["messages"]))
                turn = sum(m["role"] == "assistant" for m in body["messages"])
                self.send_json(200, {"id": f"scripted-{turn}", "object": "chat.completion", "created": 0,
                                     "model": body["model"],
                                     "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                         "role": "assistant", "content": plan[min(turn, len(plan) - 1)]}}],
                                     "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}})

        self.httpd = LocalServer(Handler)
        self.httpd.start("scripted-endpoint")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.port}/v1"


def _eval(tmp_path, base_url: str, model: str, mbpp_path: str, extra: list[str]) -> list[dict]:
    from glyph.demo import read_rollouts, vf_eval_command
    cmd = vf_eval_command(base_url, model, "a", 1, tmp_path, mbpp_path, extra, profile="glyph")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PRIME_RUNS_MODE="disabled"),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_rollouts(tmp_path)


def _traces(tmp_path) -> list[dict]:
    [path] = tmp_path.glob("**/traces.jsonl")
    return [t for line in path.read_text().splitlines() if line.strip() for t in json.loads(line)["traces"]]


def test_vf_eval_tool_timeout_1_grades_a_slow_solution_honestly(tmp_path, mbpp_tasks, mbpp_path):
    """A correct solution that spends 1.5 s of CPU at import: over a 1 s limit
    (``--env.agent.harness.tool-timeout 1``), under the default 10 s. The
    service and finalize both grade it TIMEOUT: scored 0, not tampered (with
    finalize's old fixed 10 s it re-graded PASS and read as tampered)."""
    endpoint = ScriptedEndpoint(mbpp_tasks, lambda t: SPIN.format(s=1.5) + t.code)
    try:
        rows = _eval(tmp_path, endpoint.base_url, "scripted", mbpp_path,
                     ["--env.agent.harness.tool-timeout", "1"])
    finally:
        endpoint.httpd.close()
    assert len(rows) == 1 and rows[0]["ok"], rows
    assert rows[0]["reward"] == 0.0 and rows[0]["metrics"]["tampered"] == 0.0, rows[0]["reason"]
    assert rows[0]["reason"] == "no visible test passed", rows[0]["reason"]
    [t] = _traces(tmp_path)
    assert harness_record(t["info"]).limits == {"cpu_s": 1.0, "wall_s": 2.0}
    assert [e["outcome"] for e in harness_record(t["info"]).service_log] == ["TIMEOUT"]
    g = t["info"]["glyph"]
    assert g["final_outcome"] == "TIMEOUT" and g["visible_gradings"] == 0  # the test's outcome came from the log


# ---------------------------------------------------------------- the service


@pytest.mark.verifiers_free
def test_a_retried_post_is_graded_once(service, mbpp_tasks):
    task = mbpp_tasks["mbpp_11"]
    secret = secrets.token_hex(8)
    service.register(secret, task.test_setup_code, list(task.test_list), get_profile("glyph").limits(3))
    source = SPIN.format(s=0.3) + task.code  # slow enough that the retries arrive while it is graded
    body = {"secret": secret, "request": "1:visible:x", "source": source, "shadow": False}
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(_post(service.url, body))) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    answers.append(_post(service.url, body))  # and once more after it finished
    record = service.release(secret)
    assert answers == [(200, {"outcome": "PASS"})] * 4
    assert record["gradings"] == 1 and len(record["log"]) == 1 and record["faults"] == []


@pytest.mark.verifiers_free
def test_the_program_retries_a_dropped_answer_and_it_is_graded_once(tmp_path, rollouts, mbpp_tasks):
    """A proxy drops the connection after the service answered the first
    POST: the program retries it, the service answers from its record, and
    finalize finds one log entry per test: rewarded, not tampered."""
    task = mbpp_tasks["mbpp_11"]
    seen = []

    class Dropper(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            req = urllib.request.Request(rollouts.service.url, raw, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as resp:
                answer = json.loads(resp.read())
            seen.append(json.loads(raw)["request"])
            if len(seen) == 1:
                self.close_connection = True  # graded, but the answer never arrives
                return
            self.send_json(200, answer)

    proxy = LocalServer(Dropper)
    proxy.start("dropper")
    try:
        played = rollouts.play(task, "a", "oracle", tmp_path, service_url=f"http://127.0.0.1:{proxy.port}/test")
    finally:
        proxy.close()
    trace, info, record = played.trace, played.record, played.service
    assert trace["end"] == "final" and len(seen) == 2 and seen[0] == seen[1]
    assert record["gradings"] == 1 and len(record["log"]) == 1
    assert info.reward == 1.0 and info.metrics.tampered == 0.0, info.reason
    # a log that repeats an entry under one request id (a retry) is not tampering; a second request is
    final, limits = (tmp_path / "solution.py").read_bytes().decode(), rollouts.harness.limits()
    tests = TaskTests(task.test_setup_code, tuple(task.test_list), tuple(task.test_list))
    ended = {"service_end": record["end"], "replies": played.replies}
    doubled = verify(trace, final, tests, limits, record["log"] * 2, **ended)
    assert doubled.reward == 1.0 and doubled.metrics.tampered == 0.0
    other = dict(record["log"][0], request="2:visible:x")
    assert verify(trace, final, tests, limits, record["log"] + [other], **ended).metrics.tampered == 1.0


@pytest.mark.verifiers_free
def test_a_service_fault_is_a_500_with_a_body_and_stays_in_its_rollout(service, mbpp_tasks, monkeypatch):
    """The grader raises for one rollout's source while another rollout is
    graded at the same time: the first gets a 500 naming the fault (recorded
    in its faults, and graded again on a retry), the second its outcome."""
    task = mbpp_tasks["mbpp_11"]
    real = service_module.grade

    def grade(source, *args, **kw):
        if "BOOM" in source:
            raise RuntimeError("the sandbox server died")
        return real(source, *args, **kw)

    monkeypatch.setattr(service_module, "grade", grade)
    bad, good = secrets.token_hex(8), secrets.token_hex(8)
    for s in (bad, good):
        service.register(s, task.test_setup_code, list(task.test_list), get_profile("glyph").limits(3))
    answers = {}
    jobs = {bad: {"secret": bad, "request": "1:visible:b", "source": "# BOOM\n" + task.code, "shadow": False},
            good: {"secret": good, "request": "1:visible:g", "source": task.code, "shadow": False}}
    threads = [threading.Thread(target=lambda s=s: answers.__setitem__(s, _post(service.url, jobs[s])))
               for s in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert answers[good] == (200, {"outcome": "PASS"})
    code, body = answers[bad]
    assert code == 500 and "RuntimeError: the sandbox server died" in body["error"]
    monkeypatch.setattr(service_module, "grade", real)
    assert _post(service.url, jobs[bad]) == (200, {"outcome": "PASS"})  # a faulted request is graded on retry
    bad_record, good_record = service.release(bad), service.release(good)
    assert [f["error"] for f in bad_record["faults"]] == ["RuntimeError: the sandbox server died"]
    assert bad_record["gradings"] == 2 and len(bad_record["log"]) == 1
    assert good_record["faults"] == [] and len(good_record["log"]) == 1
    assert _post(service.url, {"secret": "nobody", "source": "", "shadow": False})[0] == 403


@pytest.mark.verifiers_free
def test_a_service_fault_ends_the_program_with_its_fault_exit(tmp_path, rollouts, mbpp_tasks, monkeypatch):
    task = mbpp_tasks["mbpp_11"]
    def grade(*args, **kw):
        raise OSError("no space left")

    monkeypatch.setattr(service_module, "grade", grade)
    monkeypatch.setattr(program.time, "sleep", lambda s: None)  # the retries, without the back-off
    played = rollouts.play(task, "a", "oracle", tmp_path)
    trace, record = played.trace, played.service
    assert trace["end"] == "tester_error"
    assert trace["error"] == ("the test service answered HTTP 500: "
                              "the test service failed to grade: OSError: no space left")
    assert program.exit_status(msgspec.convert(trace, Trace)) == program.TESTER_FAILED
    assert len(record["faults"]) == program.RETRIES and record["log"] == []


@pytest.mark.verifiers_free
def test_the_service_keeps_one_end_per_rollout(service):
    """The program's report of how the episode ended: kept once (a retried
    POST is answered again), a different one refused; what release returns."""
    secret, silent = secrets.token_hex(8), secrets.token_hex(8)
    for s in (secret, silent):
        service.register(s, "", ["assert True"], get_profile("glyph").limits(3))
    end = {"secret": secret, "end": "final", "turns": 3}
    assert _post(service.end_url, end) == (200, {"end": "final"})
    assert _post(service.end_url, end) == (200, {"end": "final"})  # a retried POST
    assert _post(service.end_url, dict(end, end="protocol_error"))[0] == 409
    assert _post(service.end_url, dict(end, secret="nobody"))[0] == 403
    assert _post(service.end_url, dict(end, turns="3"))[0] == 403
    assert _post(service.end_url, {"secret": secret})[0] == 403
    assert service.release(secret)["end"] == {"end": "final", "turns": 3}
    assert service.release(silent)["end"] is None  # never reported: finalize reads no FINAL


@pytest.mark.verifiers_free
@pytest.mark.parametrize("answer", [200, 500])
def test_the_program_reports_its_end_before_it_saves_it(tmp_path, policy_server, mbpp_tasks, answer):
    """The shipped program, run as the harness runs it, tells the test
    service how the episode ended before it saves the trace with that end:
    a saved end was reported first. A report the service does not take is
    the program's tester fault (exit 98, its reason on stderr), the trace
    still saved."""
    task = mbpp_tasks["mbpp_11"]
    ws = tmp_path / "ws"
    (ws / ".glyph").mkdir(parents=True)
    (ws / protocol.SOLUTION_FILE).write_text(protocol.PLACEHOLDER)
    reports = []

    class Service(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.read_json(64 << 20)
            if self.path == "/test":
                return self.send_json(200, {"outcome": "PASS"})
            saved = ws / program.TRACE
            reports.append((body, json.loads(saved.read_text())["end"] if saved.exists() else "no trace"))
            self.send_json(answer, {"end": body["end"]} if answer == 200 else {"error": "down"})

    fake = LocalServer(Service)
    fake.start("fake-service")
    url = f"http://127.0.0.1:{fake.port}"
    cfg = program_config(GlyphHarnessConfig(profile="glyph", tool_timeout=3), "a", task.text, task.test_setup_code,
                         task.test_list, task.task_id,
                         {"kind": "service", "url": url + "/test", "end_url": url + "/end"},
                         {"base_url": policy_server.base_url, "model": "oracle"})
    (ws / program.CONFIG).write_text(json.dumps(cfg))
    prog = shipped_copy(tmp_path / "prog")
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", f"{prog}/glyph/agent/program.py"], cwd=ws,
                              env={"PATH": os.environ["PATH"], "GLYPH_ROLLOUT_SECRET": "s3"},
                              capture_output=True, text=True, timeout=120)
    finally:
        fake.close()
    trace = json.loads((ws / program.TRACE).read_text())
    assert trace["end"] == "final" and trace["turns"] == 4
    body, on_disk = reports[0]
    assert body == {"secret": "s3", "end": "final", "turns": 4} and on_disk is None  # saved mid-episode only
    if answer == 200:
        assert proc.returncode == 0 and len(reports) == 1 and trace["report_error"] is None, proc.stderr
    else:
        assert proc.returncode == program.TESTER_FAILED and len(reports) == program.RETRIES
        assert proc.stderr.strip().splitlines()[-1] == ("tester_error: could not report the end (final): the test "
                                                         "service answered HTTP 500: down")
        assert trace["report_error"] == "the test service answered HTTP 500: down"


# ---------------------------------------------------------------- the harness's fault exits


class FakeRuntime:
    """Answers run_program as the program would have; holds nothing else."""

    def __init__(self, exit_code: int, stderr: str) -> None:
        self.exit_code, self.stderr = exit_code, stderr

    async def write(self, path: str, data: bytes) -> None:
        pass

    async def run_program(self, argv, env):
        from verifiers.v1 import ProgramResult
        return ProgramResult(exit_code=self.exit_code, stdout="", stderr=self.stderr)


def _calls(*errors):
    """``trace.calls`` as verifiers' interception server records them (its own
    ``ModelCall``/``Error``): one per exchange, ``None`` for a call that committed a turn."""
    from verifiers.v1.trace import Error, ModelCall
    return [ModelCall(endpoint="/chat/completions", error=None if e is None else Error(**e)) for e in errors]


E500 = {"type": "ProviderError", "message": "upstream 500: x", "status_code": 500}


def _launch(monkeypatch, local: bool, code: int, line: str, calls=(), stop=None):
    from glyph.envs.mbpp import harness
    monkeypatch.setattr(harness, "_subprocess_runtime", lambda: FakeRuntime if local else type(None))
    trace = types.SimpleNamespace(info={}, calls=list(calls), stop_condition=stop)
    h = GlyphHarness(GlyphHarnessConfig(id="glyph-mbpp", profile="glyph", tool_timeout=2))
    res = asyncio.run(h.launch(types.SimpleNamespace(model="m"), trace, FakeRuntime(code, f"noise\n{line}\n"),
                               "http://x/v1", "s", {}, GlyphData(name="t", profile="glyph")))
    assert harness_record(trace.info).limits == {"cpu_s": 2.0, "wall_s": 4.0}
    return res, trace


@pytest.mark.parametrize("local", [True, False])
@pytest.mark.parametrize("code,line", [(97, "endpoint_error: model call failed: HTTP 500"),
                                       (98, "tester_error: the test service answered HTTP 500: x")])
def test_the_harness_errors_a_fault_exit_only_where_it_is_trusted(monkeypatch, local, code, line):
    """Local runtime: the fault exit fails the rollout with its reason. A
    container runtime (solution code runs beside the program) with no trusted
    record of a failed model call: scored by finalize instead."""
    res, trace = _launch(monkeypatch, local, code, line)
    if local:
        assert res.exit_code == code and trace.info["glyph"] == encode(
            fault_record(line.split(":")[0], line))
    else:
        assert res.exit_code == 0 and "glyph" not in trace.info


@pytest.mark.parametrize("calls,stop,errored", [
    ([None, E500], None, True),  # the last exchange failed upstream: 5xx
    ([dict(E500, status_code=429)], None, True),
    ([dict(E500, type="CancelledError", status_code=None)], None, True),  # raised or cancelled: no status
    ([dict(E500, status_code=400)], None, False),  # a 4xx: a request code beside the program could send
    ([E500, None], None, False),  # a later exchange committed a turn
    ([], None, False),  # no exchange recorded (the upstream call still running, or none made)
    ([E500], "max_turns", False),  # a @stop ended the rollout: verifiers' own account
])
def test_a_container_endpoint_fault_is_errored_only_when_the_interception_recorded_it(
        monkeypatch, calls, stop, errored):
    line = "endpoint_error: model call failed: HTTP 500"
    res, trace = _launch(monkeypatch, False, program.ENDPOINT_FAILED, line, _calls(*calls), stop)
    confirmed = harness_record(trace.info).endpoint_fault_confirmed
    if errored:
        last = calls[-1]
        assert confirmed.startswith(f"the interception server recorded: {last['type']}")
        assert res.exit_code == program.ENDPOINT_FAILED and res.stderr == line
        assert trace.info["glyph"] == encode(fault_record("endpoint_error", line, confirmed))
    else:
        assert confirmed is None and res.exit_code == 0 and "glyph" not in trace.info
    # a tester fault is never confirmed by a model call's record
    res, trace = _launch(monkeypatch, False, program.TESTER_FAILED, "tester_error: x", _calls(*calls), stop)
    assert res.exit_code == 0 and "glyph" not in trace.info


# ---------------------------------------------------------------- vf-eval: endpoint faults are errored


@pytest.fixture(scope="module")
def policy_server(mbpp_tasks):
    with PolicyServer(mbpp_tasks) as s:
        yield s


@pytest.mark.parametrize("policy,extra,why", [
    ("fault-500", [], "endpoint_error: model call failed: HTTP 500"),
    ("fault-hang", ["--env.agent.harness.model-timeout", "2"], "endpoint_error: endpoint unreachable or too slow"),
])
def test_vf_eval_an_endpoint_fault_is_an_errored_rollout(tmp_path, policy_server, mbpp_path, policy, extra, why):
    """In both verifiers versions (``glyph.vfcompat``, 3. and 5.): errored,
    unscored, the cause recorded; never a 0 that training would learn from."""
    rows = _eval(tmp_path, policy_server.base_url, policy, mbpp_path, extra)
    assert len(rows) == 1, rows
    r = rows[0]
    assert not r["ok"] and r["reward"] is None and r["errors"], r
    assert r["reason"].startswith(why), r["reason"]
    [t] = _traces(tmp_path)
    assert t["info"]["glyph"]["reward"] is None and t["info"]["glyph"]["fault"] == "endpoint_error"


def test_eval_with_no_model_says_why_at_the_first_failed_call(tmp_path, mbpp_path):
    """Nothing listens at ``--client.base-url`` (a closed port on 127.0.0.1): the eval CLI
    (``vf-eval``; ``eval`` at the pin, its rollouts in an env-server worker) prints on stderr,
    within 2 s of verifiers' log of the first failed model call, what failed and how to run
    against glyph's reference policies, and at the end how many calls failed
    (``glyph.envs.model_faults``); the rollouts are still errored with their cause."""
    import time

    from glyph.demo import read_rollouts, vf_eval_command
    from glyph.vfcompat import eval_cli

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = vf_eval_command(f"http://127.0.0.1:{port}/v1", "mix", "a", 2, tmp_path, mbpp_path, [],
                          profile="glyph")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PRIME_RUNS_MODE="disabled"))
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)
    reader.start()
    lines: list[tuple[float, str]] = []
    try:
        for line in proc.stderr:
            lines.append((time.monotonic(), line.rstrip("\n")))
        proc.wait(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    reader.join(10)
    err = "\n".join(line for _, line in lines)
    assert proc.returncode == 0, err[-3000:]
    logged = [t for t, line in lines if "model call failed: id=" in line]  # verifiers' own console log
    said = [t for t, line in lines if line.startswith("glyph-mbpp: a model call failed: connection refused")]
    assert logged and len(said) == 1, err[-3000:]
    assert abs(said[0] - logged[0]) < 2, err[-3000:]
    text = " ".join(err.split())
    assert f"endpoint: http://127.0.0.1:{port}/v1/chat/completions" in text
    assert f"uv run {eval_cli()} glyph-mbpp -m mix --client.base-url http://127.0.0.1:8000/v1" in text
    assert "failed in 2 rollout(s), the first: connection refused" in text, err[-3000:]
    rows = read_rollouts(tmp_path)
    assert len(rows) == 2 and all(not r["ok"] and r["reward"] is None for r in rows), rows
    assert all(r["reason"].startswith("endpoint_error: model call failed: HTTP 50") for r in rows), rows


@pytest.mark.parametrize("policy,extra,errored", [
    ("fault-500", [], True),
    ("fault-hang", ["--env.agent.harness.model-timeout", "2"], False),
])
def test_vf_eval_a_container_endpoint_fault_is_errored_when_the_interception_confirms_it(
        tmp_path, policy_server, mbpp_path, policy, extra, errored):
    """The real verifiers (its interception server, trace and rollout) with
    glyph's harness taking its container branch (the runtime check flipped in
    the eval process; python_test would use the shipped grader). An upstream
    500: the interception server recorded it on the trace, so the program's
    exit 97 is trusted: errored, unscored. A model call the program gave up on
    (model_timeout 2 s, the upstream still hanging) has no record yet: scored,
    0, as any untrusted exit."""
    from glyph.demo import read_rollouts, vf_eval_command
    from glyph.vfcompat import in_process_args
    cmd = vf_eval_command(policy_server.base_url, policy, "a", 1, tmp_path, mbpp_path,
                          [*extra, *in_process_args()], profile="glyph")  # the patch below: this process only
    assert cmd[1] == "-c"
    cmd[2] = "import glyph.envs.mbpp.harness as h; h._subprocess_runtime = lambda: type(None); " + cmd[2]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env=dict(os.environ, PRIME_RUNS_MODE="disabled"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [r] = read_rollouts(tmp_path)
    [t] = _traces(tmp_path)
    assert harness_record(t["info"]).program["exit_code"] == program.ENDPOINT_FAILED
    confirmed = harness_record(t["info"]).endpoint_fault_confirmed  # written by the container branch only
    if errored:
        assert not r["ok"] and r["reward"] is None
        # the reason, with what verifiers recorded of the upstream's answer (glyph.report.load)
        # the program's fault reason carries the endpoint's own words, so the report adds nothing to it
        assert r["reason"] == "endpoint_error: model call failed: HTTP 500: upstream 500: injected failure"
        assert confirmed.startswith("the interception server recorded: ProviderError (HTTP 500)")
        assert t["info"]["glyph"]["confirmed_by"] == confirmed
        assert t["calls"][-1]["error"]["status_code"] == 500
    else:
        assert confirmed is None and r["ok"] and r["reward"] == 0.0, r
        assert "endpoint_error" in r["reason"], r["reason"]


@pytest.mark.parametrize("forge", [False, True], ids=["honest", "forged"])
def test_vf_eval_on_a_container_final_is_read_from_the_interceptions_record(
        tmp_path, mbpp_tasks, mbpp_path, forge):
    """The real verifiers (its interception server records the model's
    replies: ``glyph.vfcompat``, 8.), glyph's harness on its container branch
    (the runtime check flipped in the eval process) with python_test graded
    bare, as where no isolating mode starts. Honest: patch, test, FINAL:
    rewarded. Forged: the patch is a correct solution that escapes
    python_test (``testkit.forge``), tested twice, then a malformed
    CALL; its daemon rewrites the trace to end with FINAL after the program
    exits (finalize waits for it here): 0, tampered, the reason naming the
    interception's record of the model replies."""
    from glyph.demo import read_rollouts, vf_eval_command
    from glyph.vfcompat import in_process_args
    from testkit.forge import forging_solution
    pidfile, done = tmp_path / "daemon.pid", tmp_path / "daemon.done"
    malformed = 'CALL {"id": "4", "tool": "read_file", "args": {"path": solution.py}}'

    def turns(task) -> list[str]:
        source = forging_solution(task.code, str(pidfile), str(done)) if forge else task.code
        patch = Call("1", "apply_patch", {"path": protocol.SOLUTION_FILE, "find": protocol.PLACEHOLDER,
                                          "replace": source})
        tests = [protocol.GLYPH.turn_text(Call(str(i), "python_test", {})) for i in (2, 3)]
        first = protocol.GLYPH.turn_text(patch)
        return [first, *tests, malformed] if forge else [first, tests[0], "FINAL: done"]

    endpoint = ScriptedEndpoint(mbpp_tasks, turns=turns)
    cmd = vf_eval_command(endpoint.base_url, "scripted", "a", 1, tmp_path / "out", mbpp_path, in_process_args(),
                          profile="glyph")
    assert cmd[1] == "-c"
    cmd[2] = f"""import asyncio, os, time
import glyph.envs.mbpp.harness as h, glyph.envs.mbpp.taskset as ts
from glyph.record import harness_record
h._subprocess_runtime = lambda: type(None)
h.LOCAL_SANDBOX = "bare"
_finalize = ts.GlyphTask.finalize
async def _after_the_daemon(self, trace, runtime):
    end = time.monotonic() + 60
    while {forge!r} and not os.path.exists({str(done)!r}) and time.monotonic() < end:
        await asyncio.sleep(0.05)
    return await _finalize(self, trace, runtime)
ts.GlyphTask.finalize = _after_the_daemon
""" + cmd[2]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env=dict(os.environ, PRIME_RUNS_MODE="disabled"), timeout=300)
    finally:
        endpoint.httpd.close()
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [r] = read_rollouts(tmp_path / "out")
    [t] = _traces(tmp_path / "out")
    g = t["info"]["glyph"]
    assert r["ok"] and g["final_outcome"] == "PASS", r
    assert harness_record(t["info"]).interception.calls == (4 if forge else 3)
    if not forge:
        assert r["reward"] == 1.0 and g["tamper"] == [], g["reason"]
        return
    assert done.exists(), "the daemon did not rewrite the trace"
    assert r["reward"] == 0.0 and r["metrics"]["tampered"] == 1.0
    assert g["tamper"] == [("the trace says the episode ended with FINAL; the interception's record of the model "
                            "replies ends with protocol error (reply 4): CALL arguments are not valid JSON: "
                            "Expecting value at column 51")], g


# ---------------------------------------------------------------- disagreements are a metric


def _scripted_grades(monkeypatch, outcomes: list[str]) -> list[str]:
    """finalize's visible gradings answer ``outcomes`` in turn (what a
    non-deterministic solution, or one near its limit, does)."""
    from glyph.envs.mbpp.finalize import regrade as verify_module
    from glyph.outcomes import Outcome
    left = list(outcomes)
    monkeypatch.setattr(verify_module, "grade",
                        lambda *a, **k: types.SimpleNamespace(outcome=Outcome(left.pop(0)), detail=""))
    return left


def _claims(outcome: str) -> dict:
    src = "def f():\n    return 1\n"
    sha = program.sha256(src)
    return {"candidates": [{"index": 0, "call": "1", "source": src, "sha256": sha, "verified_label": outcome,
                            "shadow": False}],
            "tests": [{"call": "2", "sha256": sha, "outcome": outcome}],
            "calls": [{"id": "1", "tool": "apply_patch", "status": "ok"}, {"id": "2", "tool": "python_test", "status": "PASS"}],
            "end": "final", "final": True}


@pytest.mark.verifiers_free
def test_a_claim_an_honest_regrade_reproduces_is_a_disagreement_not_a_tamper(monkeypatch):
    tests = TaskTests("", ("assert f() == 1",), ("assert f() == 1",))
    left = _scripted_grades(monkeypatch, ["TIMEOUT", "PASS"])
    info = verify(_claims("PASS"), None, tests, get_profile("glyph").limits(1))
    assert info.metrics.tampered == 0.0 and info.metrics.grade_disagreements == 1.0 and left == []
    _scripted_grades(monkeypatch, ["ASSERTION_FAILURE"] * 3)  # a forged PASS no grading gives
    info = verify(_claims("PASS"), None, tests, get_profile("glyph").limits(1))
    assert info.metrics.tampered == 1.0
    assert "recorded PASS, re-grade ASSERTION_FAILURE" in info.tamper[0]
    # the service logged two outcomes for one source: trusted as logged, counted, never graded again
    _scripted_grades(monkeypatch, [])
    trace = _claims("PASS")
    trace["tests"].insert(0, {"call": "0", "sha256": trace["tests"][0]["sha256"], "outcome": "TIMEOUT"})
    log = [{"request": f"{i}:visible:x", "sha256": t["sha256"], "outcome": t["outcome"], "shadow": False}
           for i, t in enumerate(trace["tests"])]
    trace["candidates"][0]["verified_label"] = "TIMEOUT"
    info = verify(trace, None, tests, get_profile("glyph").limits(1), log, service_end={"end": "final", "turns": 3})
    assert info.metrics.tampered == 0.0 and info.metrics.grade_disagreements == 1.0
    assert info.visible_gradings == 0
