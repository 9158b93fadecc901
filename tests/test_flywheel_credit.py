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

from glyph.agent import program
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.credit import rates
from glyph.credit import replay as credit
from glyph.credit.trajectory import load_trajectory, resolve_task
from glyph.envs.mbpp.harness import GlyphHarnessConfig, program_config
from glyph.grading import grade
from glyph.report.stats import Z95
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
    return protocol.call_line(Call(str(cid), tool, args))


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
    cfg = program_config(GlyphHarnessConfig(profile="glyph", max_tool_calls=budget), arm, task.text,
                         task.test_setup_code, task.test_list, task.task_id, {"kind": "local"}, {})
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
    assert report.steps[3].status == "ASSERTION_FAILURE"  # graded by the trusted grader, as recorded
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
    rp = credit.replay(load_trajectory(path), task, credit.Grader(task))
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
    rp = credit.replay(load_trajectory(path), task, credit.Grader(task))
    assert len(rp.divergences) == 1 and rp.divergences[0].startswith("step 1: recorded 'RESULT 1 read_file ok'")
    trace["messages"] = trace["messages"][:3]  # cut off after the read, as a killed program leaves it
    path.write_text(json.dumps(trace))
    rp = credit.replay(load_trajectory(path), task, credit.Grader(task))
    assert rp.divergences == [] and rp.notes == ["step 1 has no recorded observation (the trajectory was cut off "
                                                 "after it)"]
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
    asked, seeds = [], []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append((body["model"], [m["role"] for m in body["messages"]]))
            seeds.append((body["model"], body.get("seed"), body.get("temperature")))
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
        forked = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--json", "--mbpp-path", mbpp_path,
                                          "--base-url", url, "--model", "forked", "--forks", "3", "--seed", "5",
                                          "--temperature", "0.7"])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["continuation"] == "model stub" and doc["earliest_unreachable"] == 0
    stub = [a for a in asked if a[0] != "forked"]
    assert len(stub) == 10 and stub[0] == ("stub", ["system", "user"])
    assert stub[4][1] == ["system", "user"] + ["assistant", "user"] * 4
    # a failed model call is an error, never scored as an unreachable snapshot
    assert broken.exit_code == 2 and "HTTP 500" in broken.stderr and len(broken.stderr.strip().splitlines()) == 1
    # forks: each snapshot's forks ask with their own sampling seed, seed + fork
    assert forked.exit_code == 0, forked.output
    doc = json.loads(forked.stdout)
    assert doc["forks"] == 3 and doc["seed"] == 5 and [s["passes"] for s in doc["steps"]] == [0] * 7
    mine = [(seed, t) for m, seed, t in seeds if m == "forked"]
    assert len(mine) == 7 * 3 and sorted(set(mine)) == [(5, 0.7), (6, 0.7), (7, 0.7)]
    assert {seed for m, seed, _ in seeds if m == "stub"} == {0}


def test_credit_assignment_imports_no_verifiers():
    """Credit reads saved episodes: it needs none of verifiers (seconds of import at start-up)."""
    import subprocess
    import sys

    probe = "import sys, glyph.credit.replay, glyph.credit.trajectory; print('verifiers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---------------------------------------------------------------- forks: pass rates per step

def test_pass_rate_and_wilson_bounds_on_a_constructed_case():
    r = rates.rate_of(["PASS"] * 3 + ["BUDGET_EXHAUSTED"] * 4 + ["NO_PASSING_TEST"], [True] * 3 + [False] * 5)
    assert (r.forks, r.passes, r.pass_rate) == (8, 3, 3 / 8)
    assert r.outcomes == {"BUDGET_EXHAUSTED": 4, "NO_PASSING_TEST": 1, "PASS": 3}
    # Wilson's bounds are the two roots p of (rate - p)^2 = z^2 p (1 - p) / n, one each side of the rate
    assert r.wilson_lo < r.pass_rate < r.wilson_hi
    for p in (r.wilson_lo, r.wilson_hi):
        assert abs((r.pass_rate - p) ** 2 - Z95 ** 2 * p * (1 - p) / 8) < 1e-12
    # no pass in n: [0, z^2 / (n + z^2)]; all pass: the mirror image
    for n in (1, 3, 4, 6, 10):
        none, every = rates.rate_of(["X"] * n, [False] * n), rates.rate_of(["PASS"] * n, [True] * n)
        assert none.wilson_lo == 0 and abs(none.wilson_hi - Z95 ** 2 / (n + Z95 ** 2)) < 1e-12
        assert every.wilson_hi == pytest.approx(1) and abs(every.wilson_lo - n / (n + Z95 ** 2)) < 1e-12
    assert round(rates.rate_of(["X"] * 10, [False] * 10).wilson_hi, 4) == 0.2775  # the textbook 0/10


def _rates(*counts: tuple[int, int]) -> list[rates.Rate]:
    return [rates.rate_of(["PASS"] * k + ["X"] * (n - k), [True] * k + [False] * (n - k)) for k, n in counts]


def test_threshold_verdict_names_where_the_rate_stays_below_with_its_range():
    # a dip that recovers (step 1) is not the verdict: the rate must stay below from there on
    v = rates.threshold_verdict(_rates((8, 8), (1, 8), (7, 8), (2, 8), (0, 8), (0, 8)), 0.5)
    assert (v.earliest_below_possible, v.earliest_below, v.earliest_below_certain) == (3, 3, 4)
    # 2/8's interval reaches above 50% ([7%, 59%]), 0/8's does not ([0, 32%])
    assert _rates((2, 8))[0].wilson_hi > 0.5 > _rates((0, 8))[0].wilson_hi
    # a rate that ends at or above the threshold: no step, though the interval allows one
    v = rates.threshold_verdict(_rates((8, 8), (4, 8)), 0.5)
    assert v.earliest_below is None and v.earliest_below_certain is None and v.earliest_below_possible == 1
    assert "no step took it below" in rates.describe(v, 8, ["the start", "step 1 (x)"])
    # one fork: 0/1 is never certainly below 50% (its interval is [0, 79%]), and 1/1's reaches below ([21%, 1])
    v = rates.threshold_verdict(_rates((1, 1), (0, 1), (0, 1)), 0.5)
    assert (v.earliest_below, v.earliest_below_certain, v.earliest_below_possible) == (1, None, 0)
    text = rates.describe(v, 1, ["the start", "step 1 (a)", "step 2 (b)"])
    assert text.startswith("step 1 (a) is the earliest") and "likely, not certain" in text
    assert "allow from the start to none" in text
    v = rates.threshold_verdict(_rates((0, 6), (0, 6)), 0.5)
    assert v.earliest_below == 0 == v.earliest_below_certain
    with pytest.raises(ValueError):
        rates.threshold_verdict(_rates((1, 1)), 0.0)


def test_the_original_flywheels_fields():
    doc = rates.original_fields(_rates((6, 6), (6, 6), (5, 6), (0, 6), (0, 6)))
    assert doc["forks"] == 6 and doc["experiment"] == "credit-assignment"
    assert doc["checkpoints"][2] == {"checkpoint": 2, "forks": 6, "pass": 5, "passRate": 5 / 6}
    assert doc["pivot"] == 3 and doc["located"] == 2  # the largest drop: into checkpoint 3, step index 2 (0-based)
    flat = rates.original_fields(_rates((2, 4), (2, 4)))
    assert flat["pivot"] is None and flat["located"] is None


def burn_trace(tmp_path, monkeypatch, task):
    """The budget-burning reads of test_burning_the_budget_with_reads: snapshot k >= 3 has the
    mutant (one hunk from correct: a repair needs 3 calls) and 8 - k calls left."""
    replies = [call(1, "read_file", path="solution.py"),
               call(2, "apply_patch", path="solution.py", find=protocol.PLACEHOLDER, replace=mutant(task)),
               call(3, "python_test")] + [call(i, "read_file", path="solution.py") for i in range(4, 10)]
    return run_program(tmp_path, monkeypatch, task, replies)


@pytest.mark.parametrize("forks,certain,possible", [(3, None, 0), (4, 6, 6)])
def test_forks_of_the_deterministic_repair_and_the_verdicts_certainty(tmp_path, monkeypatch, task, forks, certain,
                                                                      possible):
    """slip 0: every fork plays alike, so the rates are 0 or 1. 0/3 is not certainly below 50%
    (its Wilson upper bound is 56%), and 3/3 could be (its lower bound is 44%); 4 forks settle
    both (0/4: below 49%; 4/4: above 51%)."""
    traj = load_trajectory(burn_trace(tmp_path, monkeypatch, task))
    seen = []
    report = credit.assign(traj, task, forks=forks, on_progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 10 * forks) for i in range(1, 10 * forks + 1)]
    assert [r.forks for r in report.steps] == [forks] * 10
    assert [r.passes for r in report.steps] == [forks] * 6 + [0] * 4
    assert report.earliest_unreachable == 6
    v = report.rate_verdict
    assert (v.earliest_below, v.earliest_below_certain, v.earliest_below_possible) == (6, certain, possible)
    assert report.rate_verdict_text.startswith("step 6 (read_file solution.py, 2 calls left after it) is the earliest")


def test_forks_of_the_slipping_repair_draw_apart_reproducibly(tmp_path, monkeypatch, task):
    """With detours, snapshot k of the burning trace passes iff at most (8 - k) - 3 of the repair's
    3 planned calls are preceded by a detour: each fork draws its own, the seed fixes them."""
    traj = load_trajectory(burn_trace(tmp_path, monkeypatch, task))
    grader = credit.Grader(task)
    forks, slip = 40, 0.3
    report = credit.assign(traj, task, credit.Repair(slip=slip, seed=7), forks=forks, grader=grader)
    again = credit.assign(traj, task, credit.Repair(slip=slip, seed=7), forks=forks, grader=grader)
    other = credit.assign(traj, task, credit.Repair(slip=slip, seed=8), forks=forks, grader=grader)
    assert report.continuation == "repair, slip 0.3" and report.forks == forks and report.seed == 7
    assert [r.outcomes for r in again.steps] == [r.outcomes for r in report.steps]  # reproducible
    assert [r.passes for r in other.steps] != [r.passes for r in report.steps]  # another seed, other draws
    grid = credit.Repair(slip=slip, seed=7)
    snaps = credit.replay(traj, task, grader).snapshots
    detours = []
    for r, snap in zip(report.steps, snaps):
        assert r.forks == forks and sum(r.outcomes.values()) == forks
        # every fork plays the repair's 3 calls plus its detours (read_file): it passes iff they fit the budget
        for fork in range(forks):
            a = credit.continue_from(snap, traj, task, grid, grader, fork)
            w = sum(c.startswith("read_file") for c in a.calls)
            assert a.reachable == (3 + w <= r.budget_left), (r.index, fork, a.calls)
            if r.index <= 2:  # budget for every detour: all 3 draws are seen
                detours.append(w)
    # the detours are drawn at the rate asked: 360 draws, 0.3 +- 3.5 standard deviations
    assert abs(sum(detours) / (3 * len(detours)) - slip) < 3.5 * (slip * (1 - slip) / (3 * len(detours))) ** 0.5
    # where the slack is 1 or 0 call, the forks drew apart
    assert [r.index for r in report.steps if 0 < r.pass_rate < 1] == [4, 5]
    assert {k for r in report.steps[4:6] for k in r.outcomes} == {"PASS", "BUDGET_EXHAUSTED"}
    # success stays possible up to step 5, but there the pass rate (34% expected) is already below half
    v = report.rate_verdict
    assert report.earliest_unreachable == 6 and v.earliest_below == 5 == v.earliest_below_certain
    assert v.earliest_below_possible == 4  # seed 7 drew 22/40 at step 4 (78% expected): its interval reaches below


def test_cli_forks_write_json_png_and_html(tmp_path, monkeypatch, task, mbpp_path):
    from glyph.cli.app import app

    path = burn_trace(tmp_path, monkeypatch, task)
    out, png, html = tmp_path / "c" / "credit.json", tmp_path / "c" / "credit.png", tmp_path / "c" / "credit.html"
    r = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--forks", "5", "--seed", "3", "--threshold",
                                 "0.6", "--json", "--out", str(out), "--png", str(png), "--html", str(html),
                                 "--mbpp-path", mbpp_path])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert json.loads(out.read_text()) == doc
    assert doc["forks"] == 5 and doc["seed"] == 3 and doc["continuation"] == "repair, slip 0.2"  # the forks' default
    assert all(s["forks"] == 5 and sum(s["outcomes"].values()) == 5 for s in doc["steps"])
    for s in doc["steps"]:
        assert s["wilson_lo"] <= s["pass_rate"] == s["passes"] / 5 <= s["wilson_hi"]
    assert [c["checkpoint"] for c in doc["checkpoints"]] == list(range(10)) and doc["backend"] == "glyph"
    assert [c["pass"] for c in doc["checkpoints"]] == [s["passes"] for s in doc["steps"]]
    assert doc["located"] == doc["pivot"] - 1 and doc["experiment"] == "credit-assignment"
    v = doc["rate_verdict"]
    assert v["threshold"] == 0.6 and v["level"] == 0.95 and doc["rate_verdict_text"]
    assert v["earliest_below_possible"] <= v["earliest_below"] <= v["earliest_below_certain"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
    assert page.count("<tr") == 11 and "5/5" in page  # a header and one row per snapshot
    table = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--forks", "4", "--slip", "0",
                                     "--mbpp-path", mbpp_path])
    assert table.exit_code == 0, table.output
    assert "4/4" in table.stdout and "0/4" in table.stdout and "play alike" in table.stdout
    assert "pass rate: step 6 (read_file" in table.stdout
    bad = CliRunner().invoke(app, ["flywheel", "credit", str(path), "--threshold", "0", "--mbpp-path", mbpp_path])
    assert bad.exit_code == 2 and "--threshold 0" in bad.stderr


def test_credit_grades_as_the_rollouts_profile_does(task):
    """A solution whose ``__main__`` block exits non-zero passes under glyph's semantics and fails
    under the study's (its classifier read the exit status): credit's grader on a study rollout
    (``assign`` builds it from ``traj.profile``) gives the study's verdict, on a glyph one glyph's."""
    source = task.code + '\n\nif __name__ == "__main__":\n    raise SystemExit(1)\n'
    assert credit.Grader(task).visible(source) == "PASS"
    assert credit.Grader(task, profile="study").visible(source) != "PASS"
