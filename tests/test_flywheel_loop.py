"""The flywheel loop end to end on small task files written here, graded by
glyph's real grader: climbing, rejection, the sealed holdout, resumption,
the OpenAI path against a local stdlib server, and the outputs."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from glyph.data import conventions
from glyph.flywheel import gate
from glyph.flywheel.agents import Endpoint, ModelCallFailed, ReferenceAgent, RolloutKey, reference_lesson
from glyph.flywheel.loop import signature_of
from glyph.flywheel.options import OptionsError, RunOptions
from glyph.flywheel.runner import run_one
from glyph.flywheel.store import ConfigMismatch
from glyph.flywheel.writers import WRITER_SYSTEM, Cluster, Failure, ReferenceWriter, writer_prompt

K = 4


def _task(i: int, mode: str, split: str) -> dict:
    tid = f"{mode or 'nomode'}{i}"
    if mode == "a":  # empty input -> None
        return dict(id=tid, mode=mode, split=split, spec=f"Write `solve(xs)`: the sum of list xs plus {i}. (task {tid})",
                    hidden_test=f"from solution import solve\nassert solve([1]) == {1 + i}\nassert solve([]) is None\n",
                    reference_broken=f"def solve(xs):\n    return sum(xs) + {i}\n",
                    reference_fixed=f"def solve(xs):\n    if not xs:\n        return None\n    return sum(xs) + {i}\n")
    if mode == "b":  # negative results clip to 0
        return dict(id=tid, mode=mode, split=split, spec=f"Write `solve(x)`: x times {i + 1}. (task {tid})",
                    hidden_test=f"from solution import solve\nassert solve(2) == {2 * (i + 1)}\nassert solve(-1) == 0\n",
                    reference_broken=f"def solve(x):\n    return x * {i + 1}\n",
                    reference_fixed=f"def solve(x):\n    return max(0, x * {i + 1})\n")
    # no mode: the largest item, None when empty (the broken one raises ValueError)
    return dict(id=tid, mode="", split=split, spec=f"Write `solve(xs)`: the largest item of xs, minus {i}. (task {tid})",
                hidden_test=f"from solution import solve\nassert solve([5]) == {5 - i}\nassert solve([]) is None\n",
                reference_broken=f"def solve(xs):\n    return max(xs) - {i}\n",
                reference_fixed=f"def solve(xs):\n    return max(xs) - {i} if xs else None\n")


def _write_tasks(path, layout) -> str:
    rows, i = [], 0
    for mode, n_train, n_holdout in layout:
        for split, n in (("train", n_train), ("holdout", n_holdout)):
            for _ in range(n):
                rows.append(_task(i, mode, split))
                i += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


LAYOUT = [("a", 2, 6), ("b", 2, 6), ("", 1, 2)]


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory):
    return _write_tasks(tmp_path_factory.mktemp("tasks") / "tasks.jsonl", LAYOUT)


class Counting:
    """Wraps an agent: counts calls; raises KeyboardInterrupt from call ``crash_after + 1`` on."""

    def __init__(self, inner, crash_after: int | None = None):
        self.inner, self.crash_after, self.calls = inner, crash_after, 0
        self.name = inner.name
        self._lock = threading.Lock()

    def reply(self, messages, key=None):
        with self._lock:
            self.calls += 1
            n = self.calls
        if self.crash_after is not None and n > self.crash_after:
            raise KeyboardInterrupt
        return self.inner.reply(messages, key)


def _run(out, tasks, *, agent=None, writer=None, concurrency=2, **kw):
    options = RunOptions(tasks=tasks, K=kw.pop("K", K), concurrency=concurrency, quiet=True, **kw)
    return run_one(options, out, agent=agent, writer=writer)


def _reference(tasks, **kw):
    """The reference agent with the run's defaults (``RunOptions``) but ``kw``."""
    d = RunOptions()
    return ReferenceAgent(conventions.load_tasks(tasks), **({"seed": d.seed, "p_lucky": d.p_lucky,
                                                             "p_slip": d.p_slip} | kw))


# ---------------------------------------------------------------- the agent and the writer


def test_reference_agent_reads_the_prompt_and_draws_order_free_noise(tasks_file):
    tasks = conventions.load_tasks(tasks_file)
    a0 = next(t for t in tasks if t.mode == "a")
    lesson = reference_lesson("a")
    agent = ReferenceAgent(tasks, seed=3, p_lucky=0.0, p_slip=0.0)
    assert conventions.extract_code(agent.reply(conventions.messages(a0))) == a0.reference_broken.rstrip() + "\n"
    assert conventions.extract_code(agent.reply(conventions.messages(a0, [lesson]))) == \
        a0.reference_fixed.rstrip() + "\n"
    assert conventions.extract_code(agent.reply(conventions.messages(a0, [reference_lesson("b")]))) == \
        a0.reference_broken.rstrip() + "\n"

    noisy = ReferenceAgent(tasks, seed=3, p_lucky=0.5, p_slip=0.5)
    keys = [RolloutKey("train", r, a0.id, k) for r in range(3) for k in range(8)]
    forward = [noisy.reply(conventions.messages(a0), key) for key in keys]
    backward = [noisy.reply(conventions.messages(a0), key) for key in reversed(keys)][::-1]
    assert forward == backward and len(set(forward)) == 2  # deterministic per key, and noisy
    other_seed = ReferenceAgent(tasks, seed=4, p_lucky=0.5, p_slip=0.5)
    assert [other_seed.reply(conventions.messages(a0), key) for key in keys] != forward


def test_signature_and_reference_lessons():
    assert signature_of("RUNTIME_ERROR", "ValueError: max() arg is an empty sequence (raised by the solution)") \
        == "RUNTIME_ERROR:ValueError"
    assert signature_of("ASSERTION_FAILURE", "AssertionError: got 0, expected is None") == "ASSERTION_FAILURE"
    assert signature_of("ASSERTION_FAILURE", "solve([]): got 0, expected None") == "ASSERTION_FAILURE"
    assert signature_of("TIMEOUT", "CPU-time limit reached (5.1s wall, 5.0s CPU)") == "TIMEOUT"
    assert "runtime error (ValueError)" in reference_lesson("RUNTIME_ERROR:ValueError")
    for mode, text in conventions.MODE_LESSONS.items():
        assert ReferenceWriter().write(Cluster(mode, mode, ())) == text


def test_the_writer_only_ever_sees_train_rollouts(tmp_path, tasks_file):
    with pytest.raises(ValueError, match="train rollouts only"):
        Failure(task="x", split="holdout", spec="s", code="c", outcome="PASS", detail="")

    class Spy(ReferenceWriter):
        clusters: list = []

        def write(self, cluster):
            self.clusters.append(cluster)
            return super().write(cluster)

    spy = Spy()
    doc, _ = _run(tmp_path / "run", tasks_file, writer=spy)
    tasks = conventions.load_tasks(tasks_file)
    train = {t.id for t in tasks if t.split == "train"}
    holdout_specs = [t.spec for t in tasks if t.split == "holdout"]
    seen = [f for c in spy.clusters for f in c.failures]
    assert len(spy.clusters) == len(doc["lessons"]) >= 2 and seen
    assert {f.task for f in seen} <= train
    blob = json.dumps([[f.__dict__ for f in c.failures] for c in spy.clusters])
    assert not any(spec in blob for spec in holdout_specs)


# ---------------------------------------------------------------- the loop


def test_reference_loop_climbs_then_plateaus_deterministically(tmp_path, tasks_file):
    doc, fw = _run(tmp_path / "one", tasks_file, seed=7)
    again, _ = _run(tmp_path / "two", tasks_file, seed=7, concurrency=1)
    assert (tmp_path / "one" / "run.json").read_bytes() == (tmp_path / "two" / "run.json").read_bytes()
    assert doc == again

    assert doc["n_holdout"] == 14 and doc["n_train"] == 5 and doc["K"] == K
    assert doc["noise_band_pp"] == pytest.approx(100 * gate.band(14, K), abs=1e-4)
    kept = [les["mode"] for les in doc["lessons"] if les["kept"]]
    assert sorted(kept) == ["a", "b"]  # both real conventions are learnt ...
    rejected = [les for les in doc["lessons"] if not les["kept"]]
    assert [les["mode"] for les in rejected] == ["RUNTIME_ERROR:ValueError"]  # ... the mode-less cluster is not
    assert doc["final"] > doc["baseline"] + doc["noise_band_pp"] / 100
    levels = [c["accepted"] for c in doc["curve"]]
    assert levels == sorted(levels) and levels[-1] == doc["final"]  # climbs, then stays
    assert levels[-1] == levels[-2]  # the plateau: the last candidate changed nothing
    assert doc["stop"] == "no untried failure cluster"
    assert fw.grades.gradings <= 2 * 19  # the reference agent emits two codes per task
    for les in doc["lessons"]:
        assert les["kept"] == (les["gain_pp"] > les["band_pp"])


def test_a_lesson_with_no_true_effect_is_rejected(tmp_path, tasks_file):
    class Platitude(ReferenceWriter):
        def write(self, cluster):
            return "Write clean, readable code and test it carefully."

    for noise in ({"p_lucky": 0.0, "p_slip": 0.0}, {}):
        for g in ("band", "paired"):
            doc, _ = _run(tmp_path / f"{g}-{len(noise)}", tasks_file, writer=Platitude(), gate=g, **noise)
            assert [les["kept"] for les in doc["lessons"]] == [False, False]
            assert doc["stop"] == "2 consecutive rejections" and doc["final"] == doc["baseline"]
            if noise:  # noise-free: the agent answers exactly as without the lesson
                assert all(les["gain_pp"] == 0 for les in doc["lessons"])


def test_paired_gate_keeps_the_real_lessons(tmp_path, tasks_file):
    doc, _ = _run(tmp_path / "run", tasks_file, gate="paired", seed=7)
    assert doc["gate"] == "paired"
    assert {"a", "b"} <= {les["mode"] for les in doc["lessons"] if les["kept"]}
    for les in doc["lessons"]:
        assert les["kept"] == (les["paired"]["lo_pp"] is not None and les["paired"]["lo_pp"] > 0)


def test_resume_after_a_crash_requests_only_what_is_missing(tmp_path, tasks_file):
    full = Counting(_reference(tasks_file, seed=1))
    doc, _ = _run(tmp_path / "full", tasks_file, seed=1, agent=full)
    total = full.calls

    crashing = Counting(_reference(tasks_file, seed=1), crash_after=100)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "crashed", tasks_file, seed=1, agent=crashing, concurrency=1)
    assert not (tmp_path / "crashed" / "run.json").exists()
    assert len((tmp_path / "crashed" / "rollouts.jsonl").read_text().splitlines()) == 100

    resumed = Counting(_reference(tasks_file, seed=1))
    _, fw = _run(tmp_path / "crashed", tasks_file, seed=1, agent=resumed, concurrency=1)
    assert resumed.calls == total - 100 and fw.reused == 100
    assert (tmp_path / "crashed" / "run.json").read_bytes() == (tmp_path / "full" / "run.json").read_bytes()

    # a torn last line (a crash mid-write) is dropped, and only that rollout is requested again
    log = tmp_path / "full" / "rollouts.jsonl"
    data = log.read_bytes()
    log.write_bytes(data[:-40])  # cut into the last line
    again = Counting(_reference(tasks_file, seed=1))
    _, fw = _run(tmp_path / "full", tasks_file, seed=1, agent=again)
    assert again.calls == 1
    lines = log.read_text().splitlines()
    assert len(lines) == data.count(b"\n") and all(json.loads(x) for x in lines)
    assert json.loads((tmp_path / "full" / "run.json").read_text()) == doc


class Surrogates:
    """Wraps an agent or a writer: its text gets a lone surrogate (an endpoint's JSON
    can carry one), outside the code fence, and the broken code of the mode-less
    tasks raises with one in its message."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name

    def reply(self, messages, key=None):
        return "note \ud800\n" + re.sub(r"return max\(xs\) - (\d+)\n", "if not xs:\n        raise ValueError("
                                          r'"empty \\udcff \\ud800")\n    return max(xs) - \1\n',
                                          self.inner.reply(messages, key))

    def write(self, cluster):
        return self.inner.write(cluster) + " \udcff"


def test_surrogate_text_is_stored_escaped_and_a_resumed_run_matches(tmp_path, tasks_file):
    """Replies, details and lessons with lone surrogates: the run, a crashed run and
    its resumption store them escaped, and the resumed run's result is the same."""
    full = Counting(Surrogates(_reference(tasks_file, seed=1)))
    doc, _ = _run(tmp_path / "full", tasks_file, seed=1, agent=full, writer=Surrogates(ReferenceWriter()))
    rows = [json.loads(x) for x in (tmp_path / "full" / "rollouts.jsonl").read_text(encoding="utf-8").splitlines()]
    assert all(r["reply"].startswith("note \\ud800\n") for r in rows if not r["excluded"])
    raised = [r for r in rows if r["signature"] == "RUNTIME_ERROR:ValueError"]
    assert raised and all(r["detail"].startswith("ValueError: empty \\udcff \\ud800") for r in raised)
    assert doc["lessons"] and all(les["text"].endswith(" \\udcff") for les in doc["lessons"])

    crashing = Counting(Surrogates(_reference(tasks_file, seed=1)), crash_after=60)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "crashed", tasks_file, seed=1, agent=crashing, writer=Surrogates(ReferenceWriter()),
             concurrency=1)
    _, fw = _run(tmp_path / "crashed", tasks_file, seed=1, agent=Surrogates(_reference(tasks_file, seed=1)),
                 writer=Surrogates(ReferenceWriter()), concurrency=1)
    assert fw.reused == 60
    assert (tmp_path / "crashed" / "run.json").read_bytes() == (tmp_path / "full" / "run.json").read_bytes()


def test_a_store_holding_an_escaped_lone_surrogate_resumes(tmp_path, tasks_file):
    """A line whose JSON holds ``\\ud800`` (json.loads gives the lone surrogate
    back, as a store written elsewhere may hold) is read escaped: the lessons
    written on resume send the writer only what an HTTP client can encode."""

    class Sending(ReferenceWriter):
        sent = 0

        def write(self, cluster):  # as httpx encodes an OpenAI writer's request body
            json.dumps(writer_prompt(cluster), ensure_ascii=False).encode("utf-8")
            self.sent += 1
            return super().write(cluster)

    _run(tmp_path / "run", tasks_file, seed=1, max_rounds=1)
    log = tmp_path / "run" / "rollouts.jsonl"
    rows = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["detail"] = r["detail"] + " \ud800" if r["detail"] else r["detail"]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")  # ensure_ascii: \ud800
    assert "\\ud800" in log.read_text(encoding="utf-8")
    (tmp_path / "run" / "lessons.jsonl").unlink()  # so the writer is asked again
    again, writer = Counting(_reference(tasks_file, seed=1)), Sending()
    doc, fw = _run(tmp_path / "run", tasks_file, seed=1, max_rounds=1, agent=again, writer=writer)
    assert again.calls == 0 and fw.reused == len(rows) and writer.sent == len(doc["lessons"]) == 1


def test_a_different_configuration_is_refused(tmp_path, tasks_file):
    _run(tmp_path / "run", tasks_file, max_rounds=1)
    with pytest.raises(ConfigMismatch, match=r"K: 4 in config.json, 2 now"):
        _run(tmp_path / "run", tasks_file, max_rounds=1, K=2)
    from glyph.cli.app import app
    r = CliRunner().invoke(app, ["flywheel", "run", "--out", str(tmp_path / "run"), "--tasks", tasks_file,
                                 "--K", "4", "--max-rounds", "1", "--seed", "5", "--quiet"])
    assert r.exit_code == 2 and "seed: 0 in config.json, 5 now" in r.stderr


# ---------------------------------------------------------------- the options (glyph.flywheel.options)


def test_every_run_option_is_a_flag_with_the_models_default_and_help():
    from enum import Enum

    import typer.main

    from glyph.cli.app import app
    from glyph.flywheel.options import flag

    group = typer.main.get_command(app).commands["flywheel"]
    for command in ("run", "replicate", "sweep"):
        params = {p.name: p for p in group.commands[command].params}
        text = CliRunner().invoke(app, ["flywheel", command, "--help"], env={"COLUMNS": "300"}).output
        for name, field in RunOptions.model_fields.items():
            assert flag(name) in text, (command, name)
            if command == "sweep" and name == "K":  # sweep's own --K: a list of K values
                assert params["ks"].opts == ["--K", "-K"] and params["ks"].default == [4, 8, 12, 16]
                continue
            p = params[name]
            assert flag(name) in p.opts and p.help == field.description, (command, name)
            default = p.default.value if isinstance(p.default, Enum) else p.default
            assert default == field.default and p.show_default is not False, (command, name)
            if field.default not in (None, False):
                shown = field.default.value if isinstance(field.default, Enum) else field.default
                assert f"[default: {shown}]" in text, (command, name)
        if command != "sweep":
            assert params["K"].opts == ["--K", "-K"]


def test_options_that_cannot_make_a_run_name_the_flag(tmp_path, tasks_file):
    from glyph.cli.app import app

    with pytest.raises(OptionsError, match="--tasks .*absent.jsonl: no such file"):
        RunOptions(tasks=tmp_path / "absent.jsonl").config()
    with pytest.raises(OptionsError, match="--writer openai needs --writer-base-url"):
        RunOptions(tasks=tasks_file, writer="openai").config()
    assert RunOptions(tasks=tasks_file, writer="openai", base_url="http://u/v1", model="m").config().writer_model == "m"
    for args, message in ((["--agent", "openai", "--base-url", "http://127.0.0.1:9/v1"],
                           "error: --agent openai needs --base-url and --model"),
                          (["--tasks", str(tmp_path / "absent.jsonl")], "absent.jsonl: no such file")):
        r = CliRunner().invoke(app, ["flywheel", "run", "--out", str(tmp_path / "run"), *args])
        assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "run").exists()


# The config.json of two runs written by the code before glyph.flywheel.options, in a folder holding
# tasks_file's tasks as tasks.jsonl: `glyph flywheel run --out DIR --tasks tasks.jsonl --max-rounds 1`, and
# the same with `--K 2 --seed 3 --agent openai --base-url http://127.0.0.1:9/v1 --model m --temperature 0.7
# --max-tokens 512 --writer openai --gate paired --retries 0` (its endpoint down).
OLD_REFERENCE_CONFIG = """{
  "tasks": "tasks.jsonl",
  "tasks_sha256": "b3762597c58f59a6a441120de0b3a4a0b0a2a94c3d0129b8922c510a6c68dec6",
  "K": 8,
  "seed": 0,
  "agent": "reference",
  "base_url": null,
  "model": null,
  "temperature": null,
  "max_tokens": null,
  "writer": "reference",
  "writer_base_url": null,
  "writer_model": null,
  "gate": "band",
  "max_rounds": 1,
  "p_lucky": 0.1,
  "p_slip": 0.05
}
"""
OLD_OPENAI_CONFIG = """{
  "tasks": "tasks.jsonl",
  "tasks_sha256": "b3762597c58f59a6a441120de0b3a4a0b0a2a94c3d0129b8922c510a6c68dec6",
  "K": 2,
  "seed": 3,
  "agent": "openai",
  "base_url": "http://127.0.0.1:9/v1",
  "model": "m",
  "temperature": 0.7,
  "max_tokens": 512,
  "writer": "openai",
  "writer_base_url": "http://127.0.0.1:9/v1",
  "writer_model": "m",
  "gate": "paired",
  "max_rounds": 1,
  "p_lucky": null,
  "p_slip": null
}
"""


@pytest.fixture
def old_layout(tmp_path, tasks_file, monkeypatch):
    import hashlib
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    data = Path(tasks_file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == json.loads(OLD_REFERENCE_CONFIG)["tasks_sha256"], \
        "_task or LAYOUT changed: the stored configurations name other tasks"
    Path("tasks.jsonl").write_bytes(data)
    for name, text in (("old-reference", OLD_REFERENCE_CONFIG), ("old-openai", OLD_OPENAI_CONFIG)):
        Path(name).mkdir()
        (Path(name) / "config.json").write_text(text)
    return Path(".")


def test_a_run_directory_of_the_previous_version_resumes(old_layout):
    from glyph.cli.app import app

    runner = CliRunner()
    for out in ("old-reference", "fresh"):
        r = runner.invoke(app, ["flywheel", "run", "--out", out, "--tasks", "tasks.jsonl", "--max-rounds", "1",
                                "--quiet"])
        assert r.exit_code == 0, r.output + r.stderr
        assert (old_layout / out / "config.json").read_text() == OLD_REFERENCE_CONFIG  # the format is the same
    assert (old_layout / "old-reference" / "run.json").read_bytes() == (old_layout / "fresh" / "run.json").read_bytes()


def test_a_stored_identity_is_compared_on_what_changes_results_only(old_layout):
    from glyph.flywheel.store import Store

    opts = RunOptions(tasks="tasks.jsonl", K=2, seed=3, agent="openai", base_url="http://127.0.0.1:9/v1",
                      model="m", temperature=0.7, max_tokens=512, writer="openai", gate="paired", max_rounds=1,
                      retries=0)
    with Store("fresh", opts.config()):
        pass
    assert (old_layout / "fresh" / "config.json").read_text() == OLD_OPENAI_CONFIG
    calls = {"timeout": 1.0, "retries": 9, "concurrency": 1, "quiet": True, "retry_excluded": True}
    for o in (opts, opts.replace(**calls), opts.replace(tasks=old_layout.resolve() / "tasks.jsonl")):
        with Store("old-openai", o.config()):
            pass
    with pytest.raises(ConfigMismatch, match=r"temperature: 0.7 in config.json, 0.8 now"):
        Store("old-openai", opts.replace(temperature=0.8).config())
    reference = RunOptions(tasks="tasks.jsonl", max_rounds=1)
    with Store("old-reference", reference.config()):
        pass
    for other in ({"p_lucky": 0.5}, {"temperature": 0.1}, {"max_tokens": 5}, {"base_url": "http://x/v1"}):
        with pytest.raises(OptionsError, match="goes with --agent"):  # read by the other agent only: refused
            (opts if "p_lucky" in other else reference).replace(**other).config()
    with pytest.raises(ConfigMismatch, match=r"p_slip: 0.05 in config.json, 0.2 now"):
        Store("old-reference", reference.replace(p_slip=0.2).config())


# ---------------------------------------------------------------- the OpenAI path, against 127.0.0.1


class _Endpoint(ThreadingHTTPServer):
    """An OpenAI-compatible chat server: the reference agent (noise-free) and a
    reference writer that reads the task from the writer's prompt; the first
    ``fail_first`` statuses are answered to every rollout request before it
    succeeds, and prompts containing ``always_fail`` always get a 500. Each
    failure carries ``retry-after-ms: retry_after_ms`` (which the SDK honours,
    so the tests do not wait out its own backoff), unless that is None."""

    daemon_threads = True

    def __init__(self, tasks, fail_first=(), always_fail=None, retry_after_ms=5):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.agent = ReferenceAgent(tasks, seed=0, p_lucky=0.0, p_slip=0.0)
        self.tasks, self.fail_first, self.always_fail = tasks, list(fail_first), always_fail
        self.retry_after_ms = retry_after_ms
        self.requests, self.writer_prompts, self.lock = 0, [], threading.Lock()
        self._attempts: dict[str, int] = {}

    def answer(self, body: dict) -> tuple[int, str]:
        msgs = body["messages"]
        user = msgs[-1]["content"]
        with self.lock:
            self.requests += 1
            if msgs[0]["content"] == WRITER_SYSTEM:
                self.writer_prompts.append(user)
                task = next(t for t in self.tasks if t.spec.strip() in user)
                return 200, reference_lesson(task.mode or "RUNTIME_ERROR:ValueError")
            if self.always_fail and self.always_fail in user:
                return 500, ""
            rollout = f"{user}\x00{body.get('seed')}"  # the agent sends a seed per rollout key
            n = self._attempts[rollout] = self._attempts.get(rollout, 0) + 1
            if n <= len(self.fail_first):
                return self.fail_first[n - 1], ""
        return 200, self.agent.reply(msgs)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, text = self.server.answer(body)
        if status == 200:
            payload = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        else:
            payload = {"error": {"message": f"injected {status}", "type": "server_error"}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        if status != 200 and self.server.retry_after_ms is not None:
            self.send_header("retry-after-ms", str(self.server.retry_after_ms))
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def endpoint(tasks_file):
    servers = []

    def start(**kw):
        server = _Endpoint(conventions.load_tasks(tasks_file), **kw)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _openai_options(tasks_file, url, **kw) -> RunOptions:
    return RunOptions(**{"tasks": tasks_file, "K": 1, "agent": "openai", "base_url": url, "model": "m",
                         "writer": "openai", "timeout": 10, "retries": 2, "concurrency": 4,
                         "quiet": True} | kw)


def _openai_run(out, tasks_file, url, **kw):
    return run_one(_openai_options(tasks_file, url, **kw), out)


def test_openai_agent_retries_429_and_500_then_scores(tmp_path, tasks_file, endpoint):
    server, url = endpoint(fail_first=[429, 500])
    doc, fw = _openai_run(tmp_path / "run", tasks_file, url)
    assert doc["excluded"] == {"rollouts": 0, "by_phase": {}, "tasks_dropped": 0, "writer_failures": 0}
    assert fw.calls * 3 + len(server.writer_prompts) == server.requests  # every rollout: 429, 500, then 200
    assert sorted(les["mode"] for les in doc["lessons"] if les["kept"]) == ["a", "b"]
    assert doc["baseline"] == 0.0 and doc["final"] == pytest.approx(12 / 14, abs=1e-6)
    tasks = conventions.load_tasks(tasks_file)
    for prompt in server.writer_prompts:  # the writer's requests never carry a holdout task
        assert not any(t.spec.strip() in prompt for t in tasks if t.split == "holdout")
        assert any(t.spec.strip() in prompt for t in tasks if t.split == "train")


def test_a_call_that_keeps_failing_is_excluded_and_counted_not_scored(tmp_path, tasks_file, endpoint):
    tasks = conventions.load_tasks(tasks_file)
    victim = next(t for t in tasks if t.split == "holdout" and t.mode == "a")
    server, url = endpoint(always_fail=f"(task {victim.id})")
    doc, _ = _openai_run(tmp_path / "run", tasks_file, url)
    holdout_phases = 1 + sum(1 for les in doc["lessons"] if les["candidate"] is not None)
    assert doc["excluded"]["rollouts"] == holdout_phases  # K = 1
    assert doc["excluded"]["by_phase"] == {"baseline": 1, "holdout": holdout_phases - 1}
    assert doc["excluded"]["tasks_dropped"] == holdout_phases - 1
    rows = [json.loads(x) for x in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    mine = [r for r in rows if r["task"] == victim.id]
    assert mine and all(r["excluded"] and r["reward"] is None and "HTTP 500" in r["reason"]
                        and "3 tries" in r["reason"] for r in mine)
    assert doc["final"] == pytest.approx(11 / 13, abs=1e-6)  # rates over the 13 scored tasks
    assert all(les["band_pp"] == pytest.approx(100 * gate.band_for(13), abs=1e-4)
               for les in doc["lessons"] if les["band_pp"] is not None)


def test_model_calls_retry_5xx_and_stop_at_setup_errors(endpoint, tasks_file):
    """5xx is retried (glyph's backoff where the server names no delay); what
    fails after the retries is ModelCallFailed, a setup error stops at once."""
    import socket

    from glyph.flywheel.agents import ModelSetupError

    msgs = conventions.messages(conventions.load_tasks(tasks_file)[0])
    server, url = endpoint(fail_first=[500, 500], retry_after_ms=None)
    assert conventions.extract_code(Endpoint(url, "m", timeout=5, retries=2).client().chat(msgs))
    assert server.requests == 3  # 500, 500, then 200

    server, url = endpoint(always_fail="Write `solve")
    with pytest.raises(ModelCallFailed, match=r"HTTP 500: .*injected 500.* \(after 4 tries\)"):
        Endpoint(url, "m", timeout=5, retries=3).client().chat(msgs)
    assert server.requests == 4  # retries + 1

    for status in (404, 401):
        server, url = endpoint(fail_first=[status])
        with pytest.raises(ModelSetupError, match=f"HTTP {status}: injected {status}"):
            Endpoint(url, "m", timeout=5, retries=3).client().chat(msgs)
        assert server.requests == 1  # never retried

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ModelSetupError, match=r"--base-url .*: cannot reach the endpoint"):  # never retried
        Endpoint(f"http://127.0.0.1:{port}/v1", "m", timeout=5, retries=1).client().chat(msgs)


# ---------------------------------------------------------------- outputs


def test_outputs_and_the_aggregating_commands(tmp_path, tasks_file):
    from glyph.cli.app import app

    doc, _ = _run(tmp_path / "run", tasks_file)
    for field in ("baseline", "final", "gain_pp", "noise_band_pp", "K", "n_holdout", "n_train", "gate", "seed",
                  "agent", "writer", "excluded", "lessons", "curve"):
        assert field in doc
    les = doc["lessons"][0]
    assert set(les) >= {"round", "mode", "text", "gain_pp", "band_pp", "paired", "cluster_size", "kept"}
    assert set(les["paired"]) >= {"mean_pp", "lo_pp", "hi_pp"}
    assert doc["gain_pp"] == pytest.approx(100 * (doc["final"] - doc["baseline"]), abs=1e-3)
    assert (tmp_path / "run" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (tmp_path / "run" / "curve.html").read_text()
    assert "data:image/png;base64," in html and les["text"].replace("'", "&#x27;") in html

    runner = CliRunner()
    r = runner.invoke(app, ["flywheel", "replicate", "--runs", "2", "--out", str(tmp_path / "rep"), "--tasks",
                            tasks_file, "--K", "2", "--quiet"])
    assert r.exit_code == 0, r.output + r.stderr
    rep = json.loads((tmp_path / "rep" / "replicate.json").read_text())
    assert [x["seed"] for x in rep["runs"]] == [0, 1] and rep["n_runs"] == 2
    assert rep["gain_pp"]["min"] <= rep["gain_pp"]["max"] and 0 <= rep["climbed"] <= 2
    assert rep["keep_rate_by_mode"]["a"]["tried"] == 2
    assert (tmp_path / "rep" / "replicate.png").exists() and (tmp_path / "rep" / "run-1" / "run.json").exists()

    r = runner.invoke(app, ["flywheel", "sweep", "--K", "1", "2", "4", "--out", str(tmp_path / "sweep"),
                            "--tasks", tasks_file, "--quiet"])
    assert r.exit_code == 0, r.output + r.stderr
    sw = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert sw["K"] == [1, 2, 4] and [p["K"] for p in sw["per_K"]] == [1, 2, 4]
    # no A/A band measured: the formula band (c/sqrt(K) by construction) is not fitted to itself
    assert sw["band_fit"]["fitted_to"] is None and sw["band_fit"]["c_pp"] is None
    assert "no band fitted" in sw["band_fit"]["why"] and "no band fitted" in r.stdout.replace("\n", " ")
    assert [p["band_pp"] for p in sw["per_K"]] == pytest.approx(
        [100 * 1.96 * (0.25 / (14 * k)) ** 0.5 for k in (1, 2, 4)], rel=1e-4)
    assert (tmp_path / "sweep" / "sweep.png").exists()


def test_a_dead_endpoint_stops_the_run_and_retry_excluded_resumes_it(tmp_path, tasks_file, endpoint):
    from glyph.flywheel.loop import FlywheelError

    server, url = endpoint(always_fail="Write `solve")
    with pytest.raises(FlywheelError, match="every rollout of baseline .*HTTP 500.*--retry-excluded"):
        _openai_run(tmp_path / "run", tasks_file, url)
    server.always_fail = None  # the endpoint recovers
    with pytest.raises(FlywheelError):  # stored exclusions stay final by default ...
        _openai_run(tmp_path / "run", tasks_file, url)
    doc, fw = _openai_run(tmp_path / "run", tasks_file, url, retries=0, concurrency=8,
                          retry_excluded=True)  # ... and are requested again on demand
    assert doc["excluded"]["rollouts"] == 0 and doc["baseline"] == 0.0 and fw.reused == 0
