"""The live path end to end: ``glyph flywheel run --agent openai --writer openai``
against a scripted OpenAI-compatible server on 127.0.0.1 (``testkit.fake_openai``)
that plays good replies and every fault an endpoint makes: 429 with Retry-After,
500/503, torn JSON, a page that is not JSON, no choices, empty and missing
content, replies slower than the client's timeout, dropped connections.

What it pins (issue 21, item 6): every failure is retried, then excluded and
counted, never scored as a wrong answer; the holdout never reaches the writer
(every request the server received is checked); a run interrupted by Ctrl-C
resumes to the run an uninterrupted one writes.

The good replies are the noise-free reference agent's (the fixed reference iff
its mode's lesson is in the prompt) and, for the writer, its cluster's mode
lesson, so what every scored rollout must score is known in advance."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.data import conventions
from glyph.flywheel.agents import ReferenceAgent, unit_draw
from glyph.flywheel.store import fingerprint
from glyph.flywheel.writers import WRITER_SYSTEM
from testkit.fake_openai import FAULTS, OK, FakeOpenAI, Request, Script

MODES = ("case_insensitive", "empty_none", "range_guard")
K, RETRIES, TIMEOUT, RETRY_AFTER = 2, 4, 3.0, 0.25
SEED = 0

AGENT_PLANS = (
    Script(), Script(), Script(), Script(),
    Script(("429",)), Script(("500", "503")), Script(("malformed",)), Script(("not_json",)),
    Script(("no_choices",)), Script(("empty",)), Script(("null_content",)),
    Script(("503", "drop")),  # a dropped connection once the endpoint has answered
    Script(then="500"), Script(("429", "malformed"), then="empty"),  # never answered: excluded
)
SLOW = Script(("slow",))
"""An agent conversation's plan, drawn from a hash of its messages and seed (so
the same in every run, whatever the order or concurrency of the requests); a
few get a reply slower than the client's timeout (SLOW: each costs TIMEOUT)."""
P_SLOW = 0.03


def _plan(conversation: str) -> Script:
    u = unit_draw("plan", conversation)
    return SLOW if u < P_SLOW else AGENT_PLANS[int((u - P_SLOW) / (1 - P_SLOW) * len(AGENT_PLANS))]


FAULT_WORDS = {"429": "HTTP 429", "500": "HTTP 500", "503": "HTTP 503", "malformed": "malformed response",
               "not_json": "malformed response", "no_choices": "no choices", "empty": "empty reply",
               "null_content": "empty reply", "slow": "timed out", "drop": "connection error"}
"""What a rollout's stored reason says when its last try was that fault."""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    rows = [t for t in conventions.load_tasks() if t.mode in MODES]
    path = tmp_path_factory.mktemp("live") / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.__dict__) + "\n" for t in rows), encoding="utf-8")
    return path, rows


def _server(rows) -> FakeOpenAI:
    agent = ReferenceAgent(rows, seed=0, p_lucky=0.0, p_slip=0.0)

    def task_in(text: str):
        return [t for t in rows if t.spec.strip() in text]

    def reply(req: Request) -> str:
        if req.system == WRITER_SYSTEM:
            mode = task_in(req.user)[0].mode
            return f"Lesson: {conventions.MODE_LESSONS[mode]}\n(distilled from the attempts above)"
        return agent.reply(req.messages)

    def script(req: Request) -> Script:
        if req.system == WRITER_SYSTEM:
            if any(t.mode == "range_guard" for t in task_in(req.user)):
                return Script(("503",), then="empty")  # this cluster's writer never answers
            return Script(("malformed", "429"))
        return _plan(req.conversation)

    return FakeOpenAI(reply, script, retry_after=RETRY_AFTER, slow_s=30)


@pytest.mark.parametrize("kind", FAULTS)
def test_each_fault_is_retried_and_then_a_failed_call(kind):
    """One endpoint call: each fault once, then the good reply, is answered on the retry;
    the fault on every try is ModelCallFailed naming it (the loop's exclusion), never a reply."""
    from glyph.flywheel.agents import Endpoint, ModelCallFailed

    plans = {"warm": Script(), "hi": Script((kind,)), "again": Script(then=kind)}
    with FakeOpenAI(lambda r: f"reply to {r.user}", lambda r: plans[r.user], retry_after=0.01, slow_s=30) as server:
        client = Endpoint(server.url, "m", timeout=0.3, retries=1, backoff=0.001).client()
        # the endpoint answers first (a dropped connection before any answer is a setup error)
        assert client.chat([{"role": "user", "content": "warm"}]) == "reply to warm"
        assert client.chat([{"role": "user", "content": "hi"}]) == "reply to hi"
        assert [r.kind for r in server.served()] == [OK, kind, OK]
        with pytest.raises(ModelCallFailed, match=re.escape(FAULT_WORDS[kind]) + r".*\(after 2 tries\)"):
            client.chat([{"role": "user", "content": "again"}])
        assert [r.kind for r in server.served()][3:] == [kind, kind]


def _args(out, tasks_path, url) -> list[str]:
    return ["flywheel", "run", "--out", str(out), "--tasks", str(tasks_path), "-K", str(K), "--seed", str(SEED),
            "--agent", "openai", "--base-url", url, "--model", "scripted", "--writer", "openai",
            "--timeout", str(TIMEOUT), "--retries", str(RETRIES), "--backoff", "0.01", "--quiet"]


def _rollouts(out) -> list[dict]:
    return [json.loads(x) for x in (Path(out) / "rollouts.jsonl").read_text(encoding="utf-8").splitlines()]


def _comparable(doc: dict) -> dict:
    """The run document but the endpoint's address (a fresh server, a fresh port)."""
    return doc | {"agent": doc["agent"] | {"base_url": None}, "writer": doc["writer"] | {"base_url": None}}


@pytest.fixture(scope="module")
def live_run(tasks, tmp_path_factory):
    path, rows = tasks
    out = tmp_path_factory.mktemp("live") / "run"
    with _server(rows) as server:
        t0 = time.perf_counter()
        r = CliRunner().invoke(app, _args(out, path, server.url))
        seconds = time.perf_counter() - t0
        assert r.exit_code == 0, r.output + r.stderr
        log = server.served()
    return {"out": out, "doc": json.loads((out / "run.json").read_text()), "log": log, "rows": rows,
            "seconds": seconds}


def test_every_failure_is_retried_then_excluded_and_counted_never_scored(live_run):
    doc, log, rows, out = live_run["doc"], live_run["log"], live_run["rows"], live_run["out"]
    by_id = {t.id: t for t in rows}
    agent = ReferenceAgent(rows, seed=0, p_lucky=0.0, p_slip=0.0)
    served = Counter(r.kind for r in log)
    assert set(served) == {OK, *FAULTS}, served  # the script played every fault

    conversations: dict[str, list[Request]] = {}
    for r in log:
        conversations.setdefault(r.conversation, []).append(r)
    for reqs in conversations.values():  # the retries resend the conversation, one try after another
        assert [r.attempt for r in reqs] == list(range(len(reqs)))
        assert len(reqs) <= RETRIES + 1 and all(r.kind != OK for r in reqs[:-1])
        for before, after in itertools.pairwise(reqs):
            if before.kind == "429":  # the server's Retry-After is waited out (the backoff is 10 ms)
                assert after.received - before.received >= RETRY_AFTER * 0.99

    agent_convs = {}
    for reqs in conversations.values():
        first = reqs[0]
        if first.system != WRITER_SYSTEM:
            agent_convs[(agent.identify(first.messages).id, first.body["seed"])] = reqs
    stored = _rollouts(out)
    lesson_lists = {fingerprint(doc["kept_lessons"][:i] + extra): doc["kept_lessons"][:i] + extra
                    for i in range(len(doc["kept_lessons"]) + 1)
                    for extra in ([], *[[les["text"]] for les in doc["lessons"] if les["text"]])}
    assert len(stored) == len(agent_convs)  # one stored rollout per conversation, none lost or doubled
    for rec in stored:
        seed = int(unit_draw(SEED, rec["phase"], rec["round"], rec["task"], rec["k"]) * 2**31)
        reqs = agent_convs[(rec["task"], seed)]
        task, last = by_id[rec["task"]], reqs[-1]
        assert task.split == rec["split"]
        if last.kind == OK:  # answered: scored, and as the reply it got
            assert not rec["excluded"] and rec["reason"] == ""
            in_context = conventions.MODE_LESSONS[task.mode] in lesson_lists[rec["lessons"]]
            assert rec["reply"] == agent.reply(last.messages) and rec["reward"] == int(in_context), rec
        else:  # every try failed: excluded with the last failure's reason, never a wrong answer
            assert len(reqs) == RETRIES + 1, rec
            assert rec["excluded"] and rec["reward"] is None and rec["code"] is None and rec["outcome"] is None
            assert FAULT_WORDS[last.kind] in rec["reason"] and f"(after {RETRIES + 1} tries)" in rec["reason"]
    excluded = [r for r in stored if r["excluded"]]
    never = [reqs for reqs in agent_convs.values() if reqs[-1].kind != OK]
    assert excluded and doc["excluded"]["rollouts"] == len(excluded) == len(never)
    by_phase = Counter(r["phase"] for r in excluded)
    assert doc["excluded"]["by_phase"] == dict(sorted(by_phase.items()))
    assert {FAULT_WORDS[reqs[-1].kind] for reqs in never} == {"HTTP 500", "empty reply"}

    # the writer: the range_guard cluster's calls never answer: one writer failure, counted, not a rejection
    assert doc["excluded"]["writer_failures"] == 1
    failed = [les for les in doc["lessons"] if les["error"]]
    assert [les["mode"] for les in failed] == ["range_guard"] and not failed[0]["kept"]
    assert "empty reply" in failed[0]["error"] and f"(after {RETRIES + 1} tries)" in failed[0]["error"]
    assert doc["kept_lessons"] == [conventions.MODE_LESSONS["case_insensitive"], conventions.MODE_LESSONS["empty_none"]]
    assert doc["stop"] == "no untried failure cluster"
    # the rates are over the scored rollouts only: no lesson fixes nothing, both fix all but range_guard
    assert doc["baseline"] == 0.0
    final = [r for r in stored if r["phase"] == "holdout" and r["lessons"] == fingerprint(doc["kept_lessons"])
             and not r["excluded"]]
    want = sum(by_id[r["task"]].mode != "range_guard" for r in final) / len(final)
    assert doc["final"] == pytest.approx(want, abs=1e-6) and 0 < want < 1


def test_the_holdout_never_reaches_the_writer(live_run):
    log, rows = live_run["log"], live_run["rows"]
    holdout = [t for t in rows if t.split == "holdout"]
    train = [t for t in rows if t.split == "train"]
    writer = [r for r in log if r.system == WRITER_SYSTEM]
    agent_holdout = [r for r in log if r.system != WRITER_SYSTEM and any(t.spec.strip() in r.user for t in holdout)]
    assert writer and agent_holdout  # both reached the server: the check below is not vacuous
    for r in writer:
        text = r.text()
        assert any(t.spec.strip() in text for t in train)
        for t in holdout:
            for secret in (t.spec.strip(), t.hidden_test.strip(), t.reference_fixed.strip(), t.id):
                assert secret not in text, (t.id, secret[:60])


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, state)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                data = Path(f"/proc/{name}/stat").read_bytes()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2:].split()
            if fields[0] != b"Z":
                out[int(name)] = (int(fields[1]), fields[0].decode())
    return out


def _descendants(pid: int) -> set[int]:
    procs = _processes()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (parent, _) in procs.items() if parent in frontier} - found
        found |= frontier
    return found


def test_an_interrupted_run_resumes_to_the_uninterrupted_result(live_run, tasks, tmp_path):
    """Ctrl-C (SIGINT) in a real ``glyph flywheel run`` process, mid-run, then the same
    command again: the run it writes is the uninterrupted run's (a fresh server with
    the same script)."""
    path, rows = tasks
    out = tmp_path / "run"
    total = len(_rollouts(live_run["out"]))
    with _server(rows) as server:
        proc = subprocess.Popen([sys.executable, "-c", "from glyph.cli.app import app; app()",
                                 *_args(out, path, server.url)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                done = out / "rollouts.jsonl"
                if done.exists() and done.read_text().count("\n") >= total // 3:
                    break
                time.sleep(0.02)
            children = _descendants(proc.pid)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stderr = " ".join(stderr.split())
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr and "rerun the same command to resume" in stderr
        assert not (out / "run.json").exists()
        partial = len(_rollouts(out))
        assert total // 3 <= partial < total
        deadline = time.monotonic() + 10  # what the process started is gone with it
        while set(_processes()) & children and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children and not set(_processes()) & children

        first = len(server.served())
        r = CliRunner().invoke(app, _args(out, path, server.url))
        assert r.exit_code == 0, r.output + r.stderr
        resumed = server.served()[first:]
    assert f"{partial} stored rollout(s) reused" in " ".join(r.stderr.split())
    assert len({x.conversation for x in resumed if x.system != WRITER_SYSTEM}) <= total - partial
    doc = json.loads((out / "run.json").read_text())
    assert _comparable(doc) == _comparable(live_run["doc"])
    assert doc["excluded"]["rollouts"] > 0

    def outcomes(where):
        return {(r["phase"], r["round"], r["task"], r["k"], r["lessons"]): (r["excluded"], r["reward"], r["reply"])
                for r in _rollouts(where)}
    assert outcomes(out) == outcomes(live_run["out"])

