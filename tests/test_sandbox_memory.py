"""Each run's memory cap (protection ``memory_cap``): where the server can
make a cgroup with the memory controller, all the processes of one run
together get ``Limits.run_memory_bytes``; going over it ends the run and
grades as a memory error; no cgroup is left behind. Where it cannot, the
protection is reported off with what bounds a run instead."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from glyph.grading import grade
from glyph.outcomes import Outcome
from glyph.sandbox import Limits, Sandbox
from glyph.sandbox.runtime import wire

MiB = 1 << 20
# Six processes of 64 MiB each (every one far under its own 512 MiB address-space limit), 384 MiB in all,
# over a run cap of 192 MiB.
HOG = """
import os, time
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(64 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
"""
HOG_LIMITS = Limits(memory_bytes=512 * MiB, run_memory_bytes=192 * MiB, wall_s=30.0, cpu_s=20.0)
# An honest run under the same cap: 32 MiB, held for a while so that it overlaps the hog.
HONEST = """
import time
block = bytearray(32 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
def f(x):
    time.sleep(1.0)
    return x * 2 + len(block) // (32 << 20) - 1
"""


def _memory_cgroup_of_run(text: str) -> str | None:
    """The run's own memory cgroup (its last path component), from what the
    run read in /proc/self/cgroup."""
    for line in text.splitlines():
        hid, ctrls, path = line.split(":", 2)
        if "memory" in ctrls.split(",") or (hid == "0" and ctrls == "" and "/glyph-" in path):
            return path.rsplit("/", 1)[1]
    return None


def _children(path: str) -> set[str]:
    return {e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False)}


@pytest.fixture(scope="module")
def sb():
    sandbox = Sandbox(pool=1)
    sandbox.protections()
    yield sandbox
    sandbox.close()


@pytest.fixture
def capped(sb):
    cap = sb.info.protections["memory_cap"]
    if not cap["on"]:
        pytest.skip(f"no writable cgroup with the memory controller here: {cap['how']}")
    return sb


def test_memory_cap_is_reported(sb):
    cap = sb.info.protections["memory_cap"]
    assert set(cap) == {"on", "how", "if_off"} and cap["if_off"]
    assert "memory_cap" in sb.info.record()["protections"]
    if cap["on"]:
        assert cap["how"].startswith("cgroup v") and sb.info.cgroup in cap["how"]
        assert os.path.basename(sb.info.cgroup).startswith("glyph-") and os.path.isdir(sb.info.cgroup)
    else:
        assert sb.info.cgroup is None
        assert cap["how"].startswith("no writable cgroup") and "1 GiB x 32 = 32 GiB" in cap["how"]


def test_a_run_over_its_cap_is_stopped_and_a_concurrent_run_is_not(capped):
    sb = capped
    honest: dict = {}

    def run_honest():
        r = sb.open({"mode": "solution"}, {"source": HONEST.encode(), "setup": b""}, HOG_LIMITS)
        honest["ready"] = r.recv()
        r.send({"op": "eval", "id": 0, "expr": "f(21)"})
        honest["answer"] = r.recv()
        r.send({"op": "exit"})
        honest["status"] = r.finish()

    thread = threading.Thread(target=run_honest)
    thread.start()
    t0 = time.monotonic()
    r = sb.open({"mode": "solution"}, {"source": HOG.encode(), "setup": b""}, HOG_LIMITS)
    assert r.recv() is None  # it never got to answer
    status = r.finish()
    took = time.monotonic() - t0
    thread.join()
    assert status.memory_exceeded, status
    assert status.signal == signal.SIGKILL and not status.timed_out and not status.server_died
    assert took < HOG_LIMITS.wall_s / 2, took  # stopped at the cap, not at its wall clock
    assert honest["ready"] == {"ev": "ready"}
    assert wire.decode(honest["answer"]["value"]) == 42
    assert honest["status"].exit == 0 and not honest["status"].memory_exceeded
    assert sb.restarts == 0


def test_going_over_the_cap_grades_as_a_memory_error(capped):
    g = grade(HOG + "\ndef f(x):\n    return x\n", "", "assert f(1) == 1", limits=HOG_LIMITS, sandbox=capped)
    assert g.outcome is Outcome.RUNTIME_ERROR, g.detail
    assert g.detail.startswith("MemoryError"), g.detail
    # the same solution under a cap it fits in passes
    fits = Limits(memory_bytes=512 * MiB, run_memory_bytes=1024 * MiB, wall_s=30.0, cpu_s=20.0)
    quick = HOG.replace("time.sleep(60)", "pass")
    g = grade(quick + "\ndef f(x):\n    return x\n", "", "assert f(1) == 1", limits=fits, sandbox=capped)
    assert g.outcome is Outcome.PASS, g.detail


def test_a_cap_below_what_a_fresh_worker_uses_ends_the_run_over_it(capped):
    r = capped.open({"mode": "solution"}, {"source": b"x = 1\n", "setup": b""},
                    Limits(run_memory_bytes=64 << 10))
    assert r.recv() is None
    status = r.finish()
    assert status.memory_exceeded and status.exit != 0
    # and the server goes on
    r = capped.open({"mode": "solution"}, {"source": b"x = 1\n", "setup": b""})
    assert r.recv() == {"ev": "ready"}
    r.send({"op": "exit"})
    assert r.finish().exit == 0 and capped.restarts == 0


def test_no_cgroup_is_left_after_runs_or_the_server(capped):
    sb = Sandbox(pool=2)
    try:
        sb.protections()
        mine = sb.info.cgroup
        parent = os.path.dirname(mine)
        assert os.path.basename(mine) in os.listdir(parent)
        probe = "def where():\n    with open('/proc/self/cgroup') as f:\n        return f.read()\n"
        r = sb.open({"mode": "solution"}, {"source": probe.encode(), "setup": b""})
        assert r.recv() == {"ev": "ready"}
        r.send({"op": "eval", "id": 0, "expr": "where()"})
        answer = r.recv()
        r.send({"op": "exit"})
        assert r.finish().exit == 0
        if "value" in answer:  # a run without /proc (confined) cannot say where it is
            own = _memory_cgroup_of_run(wire.decode(answer["value"]))
            assert own is not None and own.startswith("run-")
            assert own not in _children(mine)  # removed once the run ended
        r = sb.open({"mode": "solution"}, {"source": HOG.encode(), "setup": b""}, HOG_LIMITS)
        r.recv()
        assert r.finish().memory_exceeded
        deadline = time.monotonic() + 10
        while len(_children(mine)) > sb.pool and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_children(mine)) <= sb.pool  # only the pre-forked workers' cgroups
    finally:
        sb.close()
    assert not os.path.exists(mine)
    assert os.path.basename(mine) not in os.listdir(parent)


def test_a_dead_servers_cgroup_is_removed_by_the_client(capped):
    sb = Sandbox(pool=1)
    try:
        sb.protections()
        old = sb.info.cgroup
        os.kill(sb.server_pid(), signal.SIGKILL)
        r = sb.open({"mode": "solution"}, {"source": b"x = 1\n", "setup": b""})
        if r.recv() is None:  # the request reached the dying server: the next one starts a new server
            r.finish()
            r = sb.open({"mode": "solution"}, {"source": b"x = 1\n", "setup": b""})
            assert r.recv() == {"ev": "ready"}
        r.send({"op": "exit"})
        assert r.finish().exit == 0
        assert sb.restarts >= 1 and sb.info.cgroup != old
        assert not os.path.exists(old)
    finally:
        new = sb.info.cgroup
        sb.close()
    assert not os.path.exists(new)


DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from glyph.sandbox import Sandbox
sb = Sandbox(mode="userns", pool=0)
try:
    info = sb.protections()
    print(json.dumps({"cap": info.protections["memory_cap"], "cgroup": info.cgroup}))
finally:
    sb.close()
"""


def test_an_unprivileged_userns_server_has_no_cgroup_and_says_what_bounds_a_run():
    """Run by root: the server as uid 65534 (userns, as any user gets it),
    from a world-readable copy of the sandbox package and a Python installed
    for all users."""
    setpriv, python = shutil.which("setpriv"), "/usr/bin/python3"
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux) to run the server as another user")
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 11))"],
                             capture_output=True, text=True) if os.path.exists(python) else None
    if version is None or version.stdout.strip() != "True":
        pytest.skip(f"no Python >= 3.11 at {python}")
    top = Path(tempfile.mkdtemp(prefix="glyph-memcap-"))  # not under pytest's 0700 directories
    try:
        proc = _run_userns_driver(setpriv, python, top)
    finally:
        shutil.rmtree(top)
    if proc.returncode != 0 and "SandboxUnavailable" in proc.stderr:
        pytest.skip(f"no userns mode for an unprivileged user here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    cap = out["cap"]
    assert not cap["on"] and out["cgroup"] is None
    assert cap["how"].startswith("no writable cgroup")
    assert "1 GiB x 32 = 32 GiB" in cap["how"] and "whole sandbox" in cap["how"]


def _run_userns_driver(setpriv: str, python: str, top: Path) -> subprocess.CompletedProcess:
    pkg = top / "copy"
    shutil.copytree(Path(__file__).parents[1] / "glyph" / "sandbox", pkg / "glyph" / "sandbox",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "glyph" / "__init__.py").write_text("")
    (pkg / "driver.py").write_text(DRIVER)
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return subprocess.run([setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", python,
                           "-I", "-S", str(pkg / "driver.py"), str(pkg)],
                          capture_output=True, text=True, cwd="/",
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"},
                          timeout=120)
