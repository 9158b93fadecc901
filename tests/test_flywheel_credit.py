"""Snapshot/replay credit assignment (``glyph flywheel credit``).

Trajectories are produced by glyph's real agent program (``program.run``)
with a scripted model and glyph's sandbox grader as its tester, saved as the
program's ``.glyph/trace.json``, then credited. Each plants its bad step at a
known index."""

from __future__ import annotations

import contextlib
import json

import pytest
from typer.testing import CliRunner

from glyph.agent import program, protocol
from glyph.credit import replay as credit
from glyph.credit.trajectory import load_trajectory, resolve_task
from glyph.envs.mbpp.harness import GlyphHarnessConfig, program_config
from glyph.grading import grade
from glyph.sandbox import Limits

TASK = "mbpp_11"
LIMITS = Limits(cpu_s=5, wall_s=10)


@pytest.fixture(scope="module")
def task(mbpp_tasks):
    return mbpp_tasks[TASK]


def mutant(task) -> str:
    """The reference with its last line wrong: a good partial solution, one hunk from correct."""
    assert task.code.endswith("return s ")
    return task.code[: -len("return s ")] + "return s[::-1]"


def junk_body(source: str) -> tuple[str, str]:
    """(find, replace): every other line of the function body replaced by junk,
    so the state is many hunks away from the reference."""
    lines = source.splitlines(keepends=True)
    body = lines[1:]
    junk = [ln if j % 2 == 0 else f"    s = s.swapcase()  # junk {j}\r\n" for j, ln in enumerate(body)]
    return "".join(body), "".join(junk)


def call(cid: int, tool: str, **args: str) -> str:
    return protocol.Call(str(cid), tool, args).line()


def keep(text: str, arm: str) -> str:
    return f"<PREDICTION>PASS</PREDICTION>\n<DECISION>KEEP</DECISION>\n{text}" if arm == "b" else text


def run_program(tmp_path, monkeypatch, task, replies: list[str], arm: str = "a", budget: int = 8):
    """Run glyph's agent program on scripted replies; return the path of its saved trace."""
    def chat(endpoint, messages, timeout, secret):
        turn = sum(m["role"] == "assistant" for m in messages)
        return replies[turn] if turn < len(replies) else "FINAL: done."

    def tester(source: str, shadow: bool) -> str:  # glyph's sandbox grader, as the local service would
        return grade(source, task.test_setup_code, "\n".join(task.test_list), limits=LIMITS).outcome.value

    monkeypatch.setattr(program, "chat", chat)
    monkeypatch.setattr(program, "Tester", lambda spec, secret, timeout: tester)
    ws = tmp_path / "ws"
    ws.mkdir(parents=True)
    (ws / "solution.py").write_text(protocol.PLACEHOLDER)
    cfg = program_config(GlyphHarnessConfig(profile="glyph", max_tool_calls=budget), arm, task.text, task.test_list,
                         {"kind": "local"}, {})
    with contextlib.chdir(ws):
        program.save_trace(program.run(cfg, ""))
    return ws / ".glyph" / "trace.json"


def junk_replies(task, arm: str) -> list[str]:
    find, replace = junk_body(mutant(task))
    return [call(1, "read_file", path="solution.py"),
            call(2, "apply_patch", path="solution.py", find=protocol.PLACEHOLDER, replace=mutant(task)),
            keep(call(3, "python_test"), arm),
            call(4, "apply_patch", path="solution.py", find=find, replace=replace),  # the planted bad step
            keep(call(5, "python_test"), arm),
            "FINAL: done."]


@pytest.mark.parametrize("arm", ["a", "b"])
def test_a_step_that_destroys_the_body_is_the_earliest_unreachable(tmp_path, monkeypatch, task, arm):
    path = run_program(tmp_path, monkeypatch, task, junk_replies(task, arm), arm)
    assert json.loads(path.read_text())["end"] == "final"
    # The premise: the junk state is >= 3 hunks from correct (needs test + 3 patches + test = 5 > 4 left),
    # while the partial state before it is one hunk away (needs 3).
    find, replace = junk_body(mutant(task))
    assert len(credit.repair_patches(mutant(task).replace(find, replace), task.code)) >= 3
    assert len(credit.repair_patches(mutant(task), task.code)) == 1

    traj = load_trajectory(path)
    found, notes = resolve_task(traj, {TASK: task})
    report = credit.assign(traj, found, notes=notes)
    assert report.divergences == [] and report.notes == []
    assert [r.budget_left for r in report.steps] == [8, 7, 6, 5, 4, 3, 3]
    assert [r.tool for r in report.steps] == ["start", "read_file", "apply_patch", "python_test", "apply_patch",
                                              "python_test", "FINAL"]
    assert [r.continuation.reachable for r in report.steps] == [True, True, True, True, False, False, False]
    assert report.earliest_unreachable == 4
    assert report.steps[3].status == "ASSERTION_FAILURE (recorded)"
    assert report.steps[4].continuation.outcome == "BUDGET_EXHAUSTED"
    assert report.steps[3].continuation.used == 3 and report.steps[3].continuation.hidden == "PASS"
    assert report.steps[4].continuation.needed >= 5 > report.steps[4].budget_left
    # the repair's own estimate agrees with what playing it out gave, at every snapshot
    assert all((r.continuation.needed <= r.budget_left) == r.continuation.reachable for r in report.steps)
    assert report.final_outcome == "SYNTAX_ERROR"  # the junk breaks the indentation
    assert "step 4 (apply_patch solution.py" in report.verdict


def test_burning_the_budget_with_reads(tmp_path, monkeypatch, task):
    """Reads until the budget is gone: the read that leaves less than a
    one-hunk repair needs (3) is the earliest unreachable step; the last
    read is refused for budget, unexecuted."""
    replies = [call(1, "read_file", path="solution.py"),
               call(2, "apply_patch", path="solution.py", find=protocol.PLACEHOLDER, replace=mutant(task)),
               call(3, "python_test")] + [call(i, "read_file", path="solution.py") for i in range(4, 10)]
    path = run_program(tmp_path, monkeypatch, task, replies)
    assert json.loads(path.read_text())["end"] == "budget_exhausted"
    traj = load_trajectory(path)
    report = credit.assign(traj, resolve_task(traj, {TASK: task})[0])
    assert [r.budget_left for r in report.steps] == [8, 7, 6, 5, 4, 3, 2, 1, 0, 0]
    assert report.steps[-1].status.startswith("budget exhausted") and not report.steps[-1].changed
    assert report.earliest_unreachable == 6
    assert report.divergences == []


def test_a_failure_still_recoverable_at_the_end_reports_none(tmp_path, monkeypatch, task):
    replies = [call(1, "read_file", path="solution.py"),
               call(2, "apply_patch", path="solution.py", find=protocol.PLACEHOLDER, replace=mutant(task)),
               call(3, "python_test"), "FINAL: done."]
    path = run_program(tmp_path, monkeypatch, task, replies)
    traj = load_trajectory(path)
    report = credit.assign(traj, resolve_task(traj, {TASK: task})[0])
    assert report.final_outcome == "ASSERTION_FAILURE"  # the episode failed ...
    assert all(r.continuation.reachable for r in report.steps)  # ... but no step made it unreachable
    assert report.earliest_unreachable is None and report.verdict.startswith("reachable at the end")


def test_failed_patch_and_malformed_call_are_replayed_faithfully(tmp_path, monkeypatch, task):
    replies = [call(1, "read_file", path="solution.py"),
               call(2, "apply_patch", path="solution.py", find="no such text", replace="x"),  # fails: no change
               call(3, "apply_patch", path="solution.py", find=protocol.PLACEHOLDER, replace=mutant(task)),
               'CALL {"id": "4", "tool": "python_test", "args": {}',  # malformed: the program stops here
               call(5, "python_test")]
    path = run_program(tmp_path, monkeypatch, task, replies)
    assert json.loads(path.read_text())["end"] == "protocol_error"
    rp = credit.replay(load_trajectory(path))
    assert rp.divergences == []
    s = rp.steps
    assert s[1].status.startswith("error: find text occurs 0 times") and not s[1].changed and s[1].budget_left == 6
    assert rp.snapshots[2].solution == protocol.PLACEHOLDER
    assert s[2].changed and rp.snapshots[3].solution == mutant(task)
    assert s[3].tool == "-" and s[3].status.startswith("protocol error") and s[3].budget_left == 5
    assert rp.snapshots[4].solution == mutant(task) and len(s) == 4  # nothing after the episode's end
    report = credit.assign(load_trajectory(path), task)
    assert report.earliest_unreachable is None


def test_a_replay_that_differs_from_the_record_is_reported(tmp_path, monkeypatch, task):
    replies = [call(1, "read_file", path="solution.py"), "FINAL: done."]
    path = run_program(tmp_path, monkeypatch, task, replies)
    trace = json.loads(path.read_text())
    trace["messages"][3]["content"] = trace["messages"][3]["content"].replace("# TODO", "# EDITED")
    path.write_text(json.dumps(trace))
    rp = credit.replay(load_trajectory(path))
    assert len(rp.divergences) == 1 and rp.divergences[0].startswith("step 1: recorded 'RESULT 1 read_file ok'")
    trace["messages"] = trace["messages"][:3]  # cut off after the read, as a killed program leaves it
    path.write_text(json.dumps(trace))
    rp = credit.replay(load_trajectory(path))
    assert rp.divergences == [] and rp.notes == ["step 1 has no recorded RESULT (the trajectory was cut off after it)"]
    assert [s.budget_left for s in rp.steps] == [7]


def test_a_continuation_is_pluggable(tmp_path, monkeypatch, task):
    """A model that always gives up: success is reachable from no snapshot, so no step is to blame."""
    path = run_program(tmp_path, monkeypatch, task, junk_replies(task, "a"))
    seen = []

    def give_up(messages):
        seen.append(len(messages))
        return "FINAL: I give up."

    report = credit.assign(load_trajectory(path), task, credit.ChatContinuation(give_up, "give-up"))
    assert report.earliest_unreachable == 0 and report.verdict.startswith("unreachable from the start")
    assert {r.continuation.outcome for r in report.steps} == {"NO_PASSING_TEST"}
    assert seen == [2, 4, 6, 8, 10, 12, 12]  # the conversation up to each snapshot (FINAL adds no RESULT)


def test_empty_solution_has_no_anchor():
    assert credit.repair_patches("", "def f():\n    return 1\n") is None
    assert credit.repair_patches("x = 1\n", "x = 1\n") == []
    src, ref = "a\nb\na\nc\n", "a\nB\na\nC\n"
    patches = credit.repair_patches(src, ref)
    out = src
    for find, replace in patches:
        out = protocol.apply_patch(out, find, replace)
    assert out == ref and len(patches) == 2


def _episode(trace: dict, task_name: str, score: float) -> dict:
    nodes = [{"message": m, **({"parent": i - 1} if i else {})} for i, m in enumerate(trace["messages"])]
    return {"env": {"id": "glyph-mbpp"}, "ok": True, "traces": [{"ok": True,
        "task": {"data": {"name": task_name, "arm": trace["arm"]}},
        "agent": {"config": {"harness": {"max_tool_calls": 8, "test_cost": 1}}},
        "nodes": nodes, "rewards": {"passed": {"score": score}}, "metrics": {"tampered": 0.0},
        "info": {"glyph": {"reason": "passed" if score else "the final solution fails"}}}]}


def test_cli_json_on_an_eval_output(tmp_path, monkeypatch, task, mbpp_path):
    from glyph.cli.app import app

    good = run_program(tmp_path / "good", monkeypatch, task, [
        call(1, "apply_patch", path="solution.py", find=protocol.PLACEHOLDER, replace=task.code),
        call(2, "python_test"), "FINAL: done."])
    bad = run_program(tmp_path / "bad", monkeypatch, task, junk_replies(task, "a"))
    out_dir = tmp_path / "eval"
    out_dir.mkdir()
    (out_dir / "traces.jsonl").write_text("".join(
        json.dumps(_episode(json.loads(p.read_text()), TASK, s)) + "\n" for p, s in ((good, 1.0), (bad, 0.0))))
    runner = CliRunner()
    saved = tmp_path / "credit.json"
    r = runner.invoke(app, ["flywheel", "credit", str(out_dir), "--task", TASK, "--json", "--out", str(saved),
                            "--mbpp-path", mbpp_path])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["earliest_unreachable"] == 4 and doc["source"].endswith("traces.jsonl:2")  # the failed one
    assert json.loads(saved.read_text()) == doc
    assert [s["continuation"]["reachable"] for s in doc["steps"]][3:5] == [True, False]
    r = runner.invoke(app, ["flywheel", "credit", str(out_dir), "--task", TASK, "--index", "0", "--json",
                            "--mbpp-path", mbpp_path])
    assert r.exit_code == 0 and json.loads(r.stdout)["earliest_unreachable"] is None
    r = runner.invoke(app, ["flywheel", "credit", str(out_dir), "--task", "mbpp_12", "--mbpp-path", mbpp_path])
    assert r.exit_code == 2 and "no rollout of mbpp_12" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_table_on_a_program_trace(tmp_path, monkeypatch, task, mbpp_path):
    from glyph.cli.app import app

    path = run_program(tmp_path, monkeypatch, task, junk_replies(task, "a"))
    r = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--mbpp-path", mbpp_path])
    assert r.exit_code == 0, r.output
    assert "earliest" in r.stdout and "step 4 (apply_patch" in r.stdout


def test_cli_continues_with_a_model_endpoint(tmp_path, monkeypatch, task, mbpp_path):
    """--base-url/--model: each continuation turn is a chat completion on the
    conversation up to the snapshot (here a stub on 127.0.0.1 that gives up)."""
    import http.server
    import threading

    from glyph.cli.app import app

    path = run_program(tmp_path, monkeypatch, task, junk_replies(task, "a"))
    monkeypatch.undo()  # the program's own chat client again: it is what the model continuation uses
    asked = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append((body["model"], [m["role"] for m in body["messages"]]))
            if body["model"] == "broken":
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": "FINAL: I give up."}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        r = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--json", "--mbpp-path", mbpp_path,
                                     "--base-url", url, "--model", "stub"])
        broken = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--mbpp-path", mbpp_path,
                                          "--base-url", url, "--model", "broken"])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["continuation"] == "model stub" and doc["earliest_unreachable"] == 0
    assert len(asked) == 10 and asked[0] == ("stub", ["system", "user"])
    assert asked[4][1] == ["system", "user"] + ["assistant", "user"] * 4
    # a failed model call is an error, never scored as an unreachable snapshot
    assert broken.exit_code == 2 and "HTTP 500" in broken.stderr and len(broken.stderr.strip().splitlines()) == 1


def test_credit_assignment_imports_no_verifiers():
    """Credit reads saved episodes: it needs none of verifiers (seconds of import at start-up)."""
    import subprocess
    import sys

    probe = "import sys, glyph.credit.replay, glyph.credit.trajectory; print('verifiers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
