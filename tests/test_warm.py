"""The warm agent program (``glyph.agent.warm``, owned by ``glyph.envs.start``):
a forked child runs the episode a cold ``python3 -I`` runs, with the same
environment, cwd and session rules, none of the server's or another
rollout's descriptors, and no process left when it is cancelled or its
server dies; a dead server is started again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import types
from pathlib import Path

import pytest

from glyph.agent import program
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.envs import bundle, start
from glyph.envs.mbpp.harness import BUNDLE, COLD, SHIPPED, GlyphHarnessConfig, program_config
from glyph.localhttp import JsonHandler, LocalServer

WAIT_S = 60.0  # a bound on waiting for a process to appear or go, never an assertion on speed


def call(cid: str, tool: str, **args) -> str:
    return protocol.call_line(Call(cid, tool, args))


SCRIPT = [call("c1", "read_file", path="solution.py"),
          call("c2", "apply_patch", path="solution.py", find=protocol.PLACEHOLDER,
               replace="def f(x):\n    return x + 1\n"),
          call("c3", "read_file", path="../elsewhere/solution.py"),
          "FINAL: done"]
"""A scripted episode with no python_test (no grader): read, patch, a read outside the workspace, FINAL."""


class Endpoint:
    """An OpenAI-compatible endpoint on 127.0.0.1: the n-th reply of a conversation is ``replies[n]``
    (a conversation is its secret); ``hold``: every request waits until ``release``."""

    def __init__(self, replies: list[str], hold: bool = False, status: int = 200) -> None:
        self.replies, self.seen, self.released, self.status = replies, [], threading.Event(), status
        if not hold:
            self.released.set()
        outer = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.read_json(64 << 20)
                outer.seen.append(self.headers.get("Authorization"))
                outer.released.wait(WAIT_S)
                turn = sum(m["role"] == "assistant" for m in body["messages"])
                content = outer.replies[min(turn, len(outer.replies) - 1)]
                self.send_json(outer.status, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})

        self.httpd = LocalServer(Handler)
        self.httpd.start("endpoint")
        self.base_url = f"http://127.0.0.1:{self.httpd.port}/v1"

    def close(self) -> None:
        self.released.set()
        self.httpd.close()


@pytest.fixture
def endpoint():
    ep = Endpoint(SCRIPT)
    yield ep
    ep.close()


@pytest.fixture
def held():
    ep = Endpoint(SCRIPT, hold=True)
    yield ep
    ep.close()


@pytest.fixture(autouse=True)
def _fresh_server():
    start.stop_server()
    yield
    start.stop_server()


def workspace(root: Path, base_url: str) -> types.SimpleNamespace:
    """A rollout's workspace as the harness leaves it (placeholder, config) and a runtime view of it."""
    root.mkdir(parents=True)
    (root / protocol.SOLUTION_FILE).write_text(protocol.PLACEHOLDER)
    cfg = program_config(GlyphHarnessConfig(profile="glyph"), "a", "add one", "", ["assert f(1) == 2"], 1,
                         {"kind": "local", "sandbox": "bare", "setup": "", "tests": ["assert f(1) == 2"]},
                         {"base_url": base_url, "model": "m"})
    (root / program.CONFIG).parent.mkdir(parents=True, exist_ok=True)
    (root / program.CONFIG).write_text(json.dumps(cfg))
    return types.SimpleNamespace(workdir=root, process_env=lambda env: dict(env))


def env_of(secret: str) -> dict:
    return {"GLYPH_ROLLOUT_SECRET": secret, "GLYPH_CONFIG": program.CONFIG}


def trace_of(root: Path) -> dict:
    trace = json.loads((root / program.TRACE).read_text())
    trace.pop("seconds")
    return trace


def cold(root: Path, secret: str) -> subprocess.CompletedProcess:
    """The cold start, as the harness asks it of a runtime: the bundle in the workspace, ``COLD``."""
    (root / BUNDLE).parent.mkdir(parents=True, exist_ok=True)
    (root / BUNDLE).write_bytes(bundle.build())
    return subprocess.run(COLD, cwd=root, capture_output=True, text=True, timeout=WAIT_S,
                          env={**start.process_env(types.SimpleNamespace(process_env=dict), {}), **env_of(secret)},
                          check=False)


def wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1]) == pid and alive(int(entry.name)):
                    out.append(int(entry.name))
    return sorted(out)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def fd_targets(pid: int) -> dict[int, str]:
    out = {}
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            out[int(fd.name)] = os.readlink(fd)
    return out


def test_warm_and_cold_leave_the_same_trace(tmp_path, endpoint):
    warm_ws, cold_ws = workspace(tmp_path / "warm", endpoint.base_url), workspace(tmp_path / "cold", endpoint.base_url)
    done = asyncio.run(start.run_warm(warm_ws, env_of("s-warm")))
    proc = cold(cold_ws.workdir, "s-cold")
    assert (done.exit_code, proc.returncode) == (0, 0), (done.stderr, proc.stderr)
    assert trace_of(warm_ws.workdir) == trace_of(cold_ws.workdir)
    trace = trace_of(warm_ws.workdir)
    assert trace["end"] == "final" and [c["status"] for c in trace["calls"]][2].startswith("error")
    assert (warm_ws.workdir / "solution.py").read_text() == (cold_ws.workdir / "solution.py").read_text() != \
        protocol.PLACEHOLDER
    assert endpoint.seen.count("Bearer s-warm") == endpoint.seen.count("Bearer s-cold") == len(SCRIPT)
    assert done.cpu_s is not None and done.cpu_s > 0  # the server reports the child's CPU


def test_warm_and_cold_fail_alike(tmp_path):
    """A fault exit (the endpoint refused: ``ENDPOINT_FAILED`` with its line on stderr) and a crash
    (no config: the traceback, exit 1) come out of a warm child as out of ``python3 -I``."""
    refusing = Endpoint(SCRIPT, status=400)
    try:
        for name, broken in (("refused", False), ("crashed", True)):
            warm_ws = workspace(tmp_path / f"warm-{name}", refusing.base_url)
            cold_ws = workspace(tmp_path / f"cold-{name}", refusing.base_url)
            if broken:
                for ws in (warm_ws, cold_ws):
                    (ws.workdir / program.CONFIG).unlink()
            done = asyncio.run(start.run_warm(warm_ws, env_of("s")))
            proc = cold(cold_ws.workdir, "s")
            want = 1 if broken else program.ENDPOINT_FAILED
            assert done.exit_code == proc.returncode == want, (done.stderr, proc.stderr)
            last = done.stderr.strip().splitlines()[-1]
            assert last == proc.stderr.strip().splitlines()[-1].replace(str(cold_ws.workdir), str(warm_ws.workdir))
            assert last.startswith("FileNotFoundError" if broken
                                   else "endpoint_error: model call failed: HTTP 400")
    finally:
        refusing.close()


def test_a_warm_child_is_alone_in_its_session_with_only_its_own_descriptors(tmp_path, held):
    """Two rollouts at once: each child leads its own session in its own workspace, its stdin is
    /dev/null, and it holds none of the server's descriptors and none of the other rollout's."""
    a, b = workspace(tmp_path / "a", held.base_url), workspace(tmp_path / "b", held.base_url)

    async def both():
        runs = [asyncio.ensure_future(start.run_warm(ws, env_of(s))) for ws, s in ((a, "sa"), (b, "sb"))]
        server = start.get_server()
        kids = await asyncio.to_thread(wait_for, lambda: (k := children_of(server.pid)) and len(k) == 2 and k,
                                       "two children")
        await asyncio.to_thread(wait_for, lambda: len(held.seen) == 2, "both children asking the endpoint")
        facts = {}
        for pid in kids:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
            facts[pid] = {"pgrp": int(stat[2]), "session": int(stat[3]), "cwd": os.readlink(f"/proc/{pid}/cwd"),
                          "fds": fd_targets(pid)}
        server_fds = set(fd_targets(server.pid).values())
        held.released.set()
        return await asyncio.gather(*runs), facts, server_fds

    done, facts, server_fds = asyncio.run(both())
    assert [d.exit_code for d in done] == [0, 0], [d.stderr for d in done]
    assert {f["cwd"] for f in facts.values()} == {str(a.workdir), str(b.workdir)}
    for pid, f in facts.items():
        assert f["pgrp"] == f["session"] == pid
        assert f["fds"][0] == os.devnull
        sockets_and_pipes = {t for t in f["fds"].values() if t.startswith(("socket:", "pipe:"))}
        assert not sockets_and_pipes & server_fds, (f["fds"], server_fds)
        other = next(o for p, o in facts.items() if p != pid)
        assert not sockets_and_pipes & {t for t in other["fds"].values() if t.startswith(("socket:", "pipe:"))}
    assert set(held.seen) == {"Bearer sa", "Bearer sb"}  # each child sent its own rollout's secret
    assert (a.workdir / program.TRACE).is_file() and (b.workdir / program.TRACE).is_file()


async def _started(ws, held):
    """A warm rollout under way: its task, the server and the child, once the child has asked the endpoint."""
    run = asyncio.ensure_future(start.run_warm(ws, env_of("s")))
    server = start.get_server()
    [kid] = await asyncio.to_thread(wait_for, lambda: children_of(server.pid), "the child")
    await asyncio.to_thread(wait_for, lambda: held.seen, "the child asking the endpoint")
    return run, server, kid


def test_a_cancelled_rollout_leaves_no_process(tmp_path, held):
    ws = workspace(tmp_path / "ws", held.base_url)

    async def cancel():
        run, _, kid = await _started(ws, held)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return kid

    kid = asyncio.run(cancel())
    wait_for(lambda: not alive(kid), "the cancelled child gone")
    assert start.get_server().alive()  # the server goes on


def test_killing_the_server_leaves_nothing_and_it_starts_again(tmp_path, held, endpoint):
    ws = workspace(tmp_path / "ws", held.base_url)

    async def kill_server():
        run, server, kid = await _started(ws, held)
        os.kill(server.pid, signal.SIGKILL)
        return await run, kid, server.pid

    done, kid, old = asyncio.run(kill_server())
    assert done.exit_code == -signal.SIGKILL and "server exited during the rollout" in done.stderr
    wait_for(lambda: not alive(kid), "the child of the killed server gone")
    again = workspace(tmp_path / "again", endpoint.base_url)
    done = asyncio.run(start.run_warm(again, env_of("s2")))
    assert done.exit_code == 0 and trace_of(again.workdir)["end"] == "final"
    assert start.get_server().pid != old


def test_a_rollout_sent_to_a_dead_server_is_sent_to_a_new_one(tmp_path, endpoint):
    """A server found dead (or gone before it forked) ran nothing of the rollout: it is sent again."""
    dead = start.get_server()
    os.kill(dead.pid, signal.SIGKILL)
    dead.proc.wait()
    ws = workspace(tmp_path / "ws", endpoint.base_url)
    with pytest.raises(ConnectionError):
        asyncio.run(dead.run(ws.workdir, env_of("s")))
    assert not (ws.workdir / program.TRACE).exists() and endpoint.seen == []
    done = asyncio.run(start.run_warm(ws, env_of("s")))
    assert done.exit_code == 0 and trace_of(ws.workdir)["end"] == "final"
    assert start.get_server().pid != dead.pid


def test_stopping_the_server_kills_its_children(tmp_path, held):
    ws = workspace(tmp_path / "ws", held.base_url)

    async def stop():
        run = asyncio.ensure_future(start.run_warm(ws, env_of("s")))
        server = start.get_server()
        [kid] = await asyncio.to_thread(wait_for, lambda: children_of(server.pid), "the child")
        await asyncio.to_thread(start.stop_server)
        return await run, kid, server

    done, kid, server = asyncio.run(stop())
    assert done.exit_code == -signal.SIGKILL
    assert not alive(kid) and server.proc.poll() is not None


def test_the_shipped_folder_is_written_once_and_read_only(tmp_path, endpoint):
    """Rollouts write nothing there (not even bytecode): it holds the shipped set, read-only."""
    folder = start.shipped_folder()
    for i in range(2):
        ws = workspace(tmp_path / str(i), endpoint.base_url)
        assert asyncio.run(start.run_warm(ws, env_of(f"s{i}"))).exit_code == 0
        assert not (ws.workdir / ".glyph/program").exists()
    assert start.shipped_folder() == folder
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == set(SHIPPED)
    for path in [folder, *folder.rglob("*")]:
        assert not path.stat().st_mode & 0o222, path


def test_the_environment_is_the_subprocess_runtimes(monkeypatch):
    """verifiers' subprocess runtime drops every name holding API_KEY and adds the runtime's
    (``verifiers/v1/runtimes/subprocess.py:104-105``)."""
    from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("GLYPH_KEEP", "1")
    rt = SubprocessRuntime(SubprocessConfig()).with_env({"TASK_VAR": "t"})
    env = start.process_env(rt, {"GLYPH_ROLLOUT_SECRET": "s"})
    assert "OPENAI_API_KEY" not in env and env["GLYPH_KEEP"] == "1"
    assert env["TASK_VAR"] == "t" and env["GLYPH_ROLLOUT_SECRET"] == "s"
