"""glyph-conventions: the taskset, the single-turn program as shipped, what
the harness writes into the runtime, and vf-eval end to end (``eval`` in
PRIME-RL's pinned verifiers, through tests/test_pin.py) against the
reference policies. The vf-eval runs start together (one module fixture) and
each test reads its own, to keep the file fast on two cores."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import secrets
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from glyph.agent import single_turn
from glyph.data import conventions
from glyph.envs import bundle
from glyph.envs.conventions.harness import (SINGLE_TURN, ConventionsHarness, ConventionsHarnessConfig,
    runtime_files)
from glyph.envs.conventions.taskset import ConventionsTaskset, ConventionsTasksetConfig, read_lessons
from glyph.envs.mbpp.harness import BUNDLE
from glyph.policies.server import PolicyServer
from glyph.vfcompat import eval_command

TASKS = conventions.load_tasks()


def two_modes() -> tuple[str, str]:
    """Two modes of glyph's data with a lesson and at least two tasks each."""
    counts = {m: sum(t.mode == m for t in TASKS) for m in conventions.MODE_LESSONS}
    a, b = sorted(m for m, n in counts.items() if n >= 2)[:2]
    return a, b


def hidden_checks(task: conventions.ConventionTask) -> list[str]:
    """The hidden test's assert lines: none of them may reach the runtime."""
    return [line.strip() for line in task.hidden_test.splitlines() if line.strip().startswith("assert")]


def holdout(n: int) -> list[conventions.ConventionTask]:
    return conventions.split(TASKS, "holdout")[:n]


# ---------------------------------------------------------------- vf-eval runs, started together


def _runs(tmp: Path) -> dict[str, dict]:
    mode_a, mode_b = two_modes()
    picked = [t for m in (mode_a, mode_b) for t in [t for t in TASKS if t.mode == m][:2]]
    subset = tmp / "subset.jsonl"
    subset.write_text("".join(json.dumps(dataclasses.asdict(t)) + "\n" for t in picked))
    run_json = tmp / "run.json"
    run_json.write_text(json.dumps({"lessons": [
        {"round": 1, "mode": mode_a, "text": conventions.MODE_LESSONS[mode_a], "kept": True},
        {"round": 2, "mode": mode_b, "text": conventions.MODE_LESSONS[mode_b], "kept": False}]}))
    bad = tmp / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "mode": "m", "split": "holdout"}) + "\n")
    plans = {
        "lessons": ("conv-lessons", len(picked), ["--env.taskset.data-path", str(subset),
                                                  "--env.taskset.split", "all",
                                                  "--env.taskset.lessons-path", str(run_json)]),
        "agent": ("conv-fixed", 1, ["--env.taskset.protocol", "agent",
                                    "--env.agent.harness.tool-timeout", "3"]),
        "fault": ("fault-500", 1, []),
        "bad_path": ("conv-fixed", 1, ["--env.taskset.data-path", str(bad)]),
    }
    env = _eval_env(tmp)

    def run(name: str) -> dict:
        policy, n, extra = plans[name]
        out = tmp / name
        with PolicyServer({}, record=True) as server:
            cmd = eval_command("glyph-conventions", "-m", policy, "--client.base-url", server.base_url,
                               "--no-push", "--no-rich", "-n", str(n), "-r", "1", "-o", str(out), *extra)
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
            received = list(server.received)
        return {"proc": proc, "out": out, "received": received, "picked": picked, "modes": (mode_a, mode_b),
                "bad": bad}

    done = {"bad_path": run("bad_path")}  # alone first: it fills the bytecode cache the others then read
    with ThreadPoolExecutor(len(plans)) as pool:
        futures = {name: pool.submit(run, name) for name in plans if name not in done}
        return done | {name: f.result() for name, f in futures.items()}


def _eval_env(tmp: Path) -> dict[str, str]:
    """The eval processes' environment. Where the venv holds no bytecode for
    verifiers (and the machine sets PYTHONDONTWRITEBYTECODE), each process
    would compile it again, seconds each: they share a private cache instead."""
    import verifiers
    env = dict(os.environ, PRIME_RUNS_MODE="disabled")
    if not (Path(verifiers.__file__).parent / "__pycache__").is_dir():
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    return _runs(tmp_path_factory.mktemp("conventions-eval"))


def rollouts(run: dict) -> list[dict]:
    from glyph.demo import read_rollouts
    proc = run["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [t for path in run["out"].glob("**/traces.jsonl") for line in path.read_text().splitlines()
            for t in json.loads(line)["traces"]]
    assert len(rows) == len(read_rollouts(run["out"]))
    return rows


def reward(trace: dict) -> float | None:
    return trace.get("rewards", {}).get("passed", {}).get("score")


def test_vf_eval_kept_lessons_fix_exactly_their_mode(runs):
    """conv-lessons answers a task with its reference_fixed when its mode's
    lesson is in the prompt, else with its reference_broken: the kept lesson's
    mode passes, the rejected lesson's mode fails, each graded by the hidden test."""
    run = runs["lessons"]
    mode_a, mode_b = run["modes"]
    traces = rollouts(run)
    assert len(traces) == len(run["picked"]) == 4
    got = {t["task"]["data"]["name"]: (t["info"]["glyph"]["mode"], reward(t)) for t in traces}
    assert got == {t.id: (t.mode, 1.0 if t.mode == mode_a else 0.0) for t in run["picked"]}
    for t in traces:
        g = t["info"]["glyph"]
        assert t["ok"] and g["split"] in ("train", "holdout") and g["protocol"] == "single", g
        if g["mode"] == mode_a:
            assert g["outcome"] == "PASS" and g["reason"] == "passed" and t["metrics"]["outcome_pass"] == 1.0
        else:
            assert g["outcome"] != "PASS" and g["reason"].startswith(g["outcome"]), g
            assert t["metrics"][f"outcome_{g['outcome'].lower()}"] == 1.0
            assert t["metrics"]["outcome_pass"] == 0.0
    for msgs in run["received"]:  # the kept lesson is in every prompt, the rejected one in none
        user = msgs[-1]["content"]
        assert conventions.MODE_LESSONS[mode_a] in user and conventions.MODE_LESSONS[mode_b] not in user


def test_vf_eval_agent_protocol_end_to_end(runs):
    traces = rollouts(runs["agent"])
    assert len(traces) == 1
    t = traces[0]
    g = t["info"]["glyph"]
    assert t["ok"] and reward(t) == 1.0 and g["protocol"] == "agent", g
    user = runs["agent"]["received"][0][1]["content"]
    assert user.startswith(holdout(1)[0].spec.strip()) and "assert solution.__name__" in user
    assert len(runs["agent"]["received"]) == 3  # patch, test, FINAL


def test_vf_eval_failed_model_call_is_not_scored(runs):
    """A model call that failed for good leaves an errored, unscored rollout
    (in both verifiers versions) with the reason recorded."""
    traces = rollouts(runs["fault"])
    assert len(traces) == 1
    t = traces[0]
    assert not t["ok"] and reward(t) is None and t["errors"], t.get("errors")
    # the endpoint's own words after the status (verifiers' wrapping of the upstream's body undone)
    assert t["info"]["glyph"]["reason"] == ("endpoint_error: model call failed: HTTP 500: upstream 500: "
                                            "injected failure")
    assert t["info"]["glyph"]["reward"] is None


def test_vf_eval_bad_data_path_names_the_option_and_the_row(runs):
    run = runs["bad_path"]
    proc = run["proc"]
    assert proc.returncode != 0 and not list(run["out"].glob("**/traces.jsonl"))
    squeeze = lambda s: re.sub(r"[\s│─╭╮╰╯]", "", s)  # noqa: E731  (the CLI boxes and wraps config errors)
    text = squeeze(proc.stdout + proc.stderr)
    assert "--env.taskset.data-path" in text
    why = "missing fields spec, hidden_test, reference_broken, reference_fixed"
    assert squeeze(f"{run['bad']}:1: {why}") in text


def test_no_request_carries_a_hidden_test(runs):
    checks = [c for t in TASKS for c in hidden_checks(t)]
    sent = json.dumps([runs[name]["received"] for name in ("lessons", "agent")])
    assert sent.count('"role": "user"') >= 7
    assert not [c for c in checks if json.dumps(c)[1:-1] in sent]


# ---------------------------------------------------------------- in process


class FakeRuntime:
    """Records what a harness writes; answers run_program as the program would have."""

    def __init__(self, exit_code: int = 0, stderr: str = "", files: dict[str, str] | None = None) -> None:
        self.written: dict[str, bytes] = {}
        self.exit_code, self.stderr = exit_code, stderr
        self.files = files or {}

    async def write(self, path: str, data: bytes) -> None:
        self.written[path] = data

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path].encode()

    async def run_program(self, argv, env):
        from verifiers.v1 import ProgramResult
        return ProgramResult(exit_code=self.exit_code, stdout="", stderr=self.stderr)


def _task_data(protocol: str, task: conventions.ConventionTask):
    cfg = ConventionsTasksetConfig(protocol=protocol, data_path=None)
    return next(t for t in ConventionsTaskset(cfg).load() if t.data.name == task.id).data


@pytest.mark.parametrize("protocol", ["single", "agent"])
def test_nothing_written_into_the_runtime_holds_the_hidden_test(protocol):
    """Every task of glyph's data, through the harness (agent: glyph-mbpp's, with
    a container-style tester, whose config would carry any test it is given)."""
    harness = ConventionsHarness(ConventionsHarnessConfig(id="glyph-conventions"))
    loaded = {t.data.name: t.data for t in ConventionsTaskset(ConventionsTasksetConfig(protocol=protocol,
                                                                                       split="all")).load()}
    for task in TASKS:
        data = loaded[task.id]
        assert data.hidden_test == task.hidden_test  # on the trusted side
        runtime = FakeRuntime(files={".glyph/trace.json": json.dumps({"end": "final"})})
        ctx, trace = types.SimpleNamespace(model="conv-fixed"), types.SimpleNamespace(info={})
        res = asyncio.run(harness.launch(ctx, trace, runtime, "http://127.0.0.1:9/v1", "s3cr3t", {}, data))
        assert res.exit_code == 0
        written = dict(runtime.written)
        shipped = bundle.unpack(written.pop(BUNDLE, b"\n[]"))  # each file of the cold start's bundle, pycs too
        blob = b"\n".join([*written.values(), *shipped.values()]).decode("utf-8", "surrogateescape")
        assert json.dumps(task.spec.strip())[1:-1] in blob  # the prompt went in (in the JSON config) ...
        for fragment in [task.hidden_test, task.reference_fixed, task.reference_broken] + hidden_checks(task):
            assert fragment not in blob and json.dumps(fragment)[1:-1] not in blob, (task.id, fragment)
        assert "s3cr3t" not in blob  # the secret travels in the environment only


def test_single_harness_records_a_failed_model_call():
    data = _task_data("single", holdout(1)[0])
    runtime = FakeRuntime(exit_code=single_turn.ENDPOINT_FAILED,
                          stderr="endpoint_error: model call failed: HTTP 503\n")
    trace = types.SimpleNamespace(info={})
    harness = ConventionsHarness(ConventionsHarnessConfig(id="glyph-conventions"))
    ctx = types.SimpleNamespace(model="m")
    res = asyncio.run(harness.launch(ctx, trace, runtime, "http://x/v1", "s", {}, data))
    assert res.exit_code == single_turn.ENDPOINT_FAILED  # verifiers fails the rollout: not scored
    assert trace.info["glyph"]["reward"] is None
    assert trace.info["glyph"]["reason"] == "endpoint_error: model call failed: HTTP 503"


@pytest.fixture(scope="module")
def server():
    with PolicyServer({}, record=True) as s:
        yield s


def _shipped(tmp_path: Path, server, policy: str, task, timeout: float = 10) -> subprocess.CompletedProcess:
    """The single program exactly as shipped (its cold start in a workspace holding only its files, with
    this Python)."""
    data = _task_data("single", task)
    for path, content in runtime_files(data, server.base_url, policy, timeout).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(content)
    env = {"PATH": os.environ.get("PATH", ""), "GLYPH_ROLLOUT_SECRET": secrets.token_hex(8),
           "GLYPH_CONFIG": ".glyph/config.json"}
    return subprocess.run([sys.executable, *SINGLE_TURN[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("policy,reference,passes", [("conv-fixed", "reference_fixed", True),
                                                     ("conv-broken", "reference_broken", False)])
def test_shipped_program_writes_the_replys_code(tmp_path, server, policy, reference, passes):
    task = holdout(1)[0]
    proc = _shipped(tmp_path, server, policy, task)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "solution.py").read_text() == getattr(task, reference)
    assert json.loads(proc.stdout)["fenced"] is True
    assert conventions.grade(task, (tmp_path / "solution.py").read_text()).passed is passes


def test_shipped_program_exits_97_on_a_failed_call(tmp_path, server):
    proc = _shipped(tmp_path, server, "fault-500", holdout(1)[0])
    assert proc.returncode == single_turn.ENDPOINT_FAILED == 97
    assert proc.stderr.strip() == "endpoint_error: model call failed: HTTP 500: injected failure"
    assert not (tmp_path / "solution.py").exists()


def test_a_hanging_endpoint_ends_the_program_at_its_timeout(tmp_path, server):
    import time
    t0 = time.monotonic()
    proc = _shipped(tmp_path, server, "fault-hang", holdout(1)[0], timeout=1)
    assert proc.returncode == 97 and "too slow" in proc.stderr and time.monotonic() - t0 < 15


def test_extract_code_is_one_function():
    assert conventions.extract_code is single_turn.extract_code
    assert single_turn.extract_code("text\n```python\na = 1\n```\nmore\n```py\nb = 2\n```") == "b = 2\n"
    assert single_turn.extract_code("```python\ncut = 'off") == "cut = 'off"
    assert single_turn.extract_code("x = 1\n") == "x = 1\n"


# ---------------------------------------------------------------- taskset


def test_prompts_are_the_one_builders_and_splits_partition():
    lessons = ["Lesson one.", "Lesson two."]
    for split in ("train", "holdout"):
        tasks = list(ConventionsTaskset(ConventionsTasksetConfig(split=split, lessons=lessons)).load())
        want = conventions.split(TASKS, split)
        assert [t.data.name for t in tasks] == [t.id for t in want]
        for t, c in zip(tasks, want):
            prompt = [m.model_dump(mode="json", exclude_none=True) for m in t.data.prompt]
            assert prompt == conventions.messages(c, lessons)
    every = list(ConventionsTaskset(ConventionsTasksetConfig(split="all")).load())
    assert len(every) == len(TASKS)


def test_lessons_path_and_lessons_are_combined_in_order(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"lessons": [{"text": "A.", "kept": True}, {"text": "B.", "kept": False},
                                           {"text": "C.", "kept": True}]}))
    assert read_lessons(str(run)) == ["A.", "C."]
    cfg = ConventionsTasksetConfig(lessons_path=str(run), lessons=["D."])
    first = next(iter(ConventionsTaskset(cfg).load()))
    assert first.data.lessons == ["A.", "C.", "D."]


@pytest.mark.parametrize("content,why", [
    ("{", "not JSON"),
    ('{"rounds": 2}', 'no "lessons" list'),
    ('{"lessons": [{"text": "A."}]}', 'lessons[0] needs a string "text" and a boolean "kept"'),
])
def test_a_bad_lessons_path_names_the_file(tmp_path, content, why):
    from pydantic import ValidationError
    run = tmp_path / "run.json"
    run.write_text(content)
    with pytest.raises(ValidationError) as err:
        ConventionsTasksetConfig(lessons_path=str(run))
    assert f"{run}: {why}" in str(err.value)


def test_a_bad_data_path_lists_its_bad_rows(tmp_path):
    from pydantic import ValidationError
    good = json.dumps(dataclasses.asdict(TASKS[0]))
    rows = [good, "not json", json.dumps({**dataclasses.asdict(TASKS[1]), "split": "test"})] + \
        [json.dumps({"id": f"x{i}"}) for i in range(3)]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValidationError) as err:
        ConventionsTasksetConfig(data_path=str(path))
    text = str(err.value)
    assert f"{path}:2: not JSON" in text and f"{path}:3: unknown split 'test'" in text
    assert f"and 2 more (`glyph conventions validate --tasks {path}`" in text
