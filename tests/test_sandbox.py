import os
import signal
import time

import pytest
from conftest import sandbox_processes, sandbox_tmp

from glyph.sandbox import Limits, Sandbox


def run(sb, source: str, exprs=(), limits=Limits()):
    r = sb.open({"mode": "solution"}, {"source": source.encode(), "setup": b""}, limits)
    msgs = [r.recv()]
    for i, e in enumerate(exprs):
        if msgs[-1] is None:
            break
        r.send({"op": "eval", "id": i, "expr": e})
        msgs.append(r.recv())
    if r.status is None:
        r.send({"op": "exit"})
    status = r.finish()
    return msgs, status, r


def test_a_run_evaluates_and_reports_exit(sandbox):
    msgs, status, r = run(sandbox, "def f(x):\n    print('seen')\n    return x * 2\n", ["f(21)"])
    assert msgs[0] == {"ev": "ready"}
    assert msgs[1]["value"] == {"i": hex(42)}
    assert status.exit == 0 and not status.timed_out
    assert r.stdout == b"seen\n"


def test_protections_reported_are_really_on(sandbox):
    prot = sandbox.info.protections
    mode = sandbox.info.mode
    if mode not in ("namespaces", "userns"):
        pytest.skip(f"{mode} mode: no namespaces here (tests/test_sandbox_unprivileged.py covers the others)")
    for name in ("pid_namespace", "network_isolation", "mount_isolation", "no_capabilities"):
        assert prot[name]["on"], name
    assert prot["uid_separation"]["on"] == (mode == "namespaces")
    probe = """
import os, socket
ok_net = True
try:
    socket.create_connection(("127.0.0.1", 22), timeout=0.2)
except OSError:
    ok_net = False
facts = (os.getuid(), os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit()),
         sorted(os.listdir('/')), os.getcwd(), os.listdir('.'), sorted(os.environ), ok_net, os.listdir('/tmp'))
"""
    msgs, status, _ = run(sandbox, probe, ["facts"])
    from glyph.sandbox.runtime import wire
    uid, pid, procs, root, cwd, listing, env, net, tmp = wire.decode(msgs[1]["value"])
    if mode == "namespaces":
        assert uid != 0 and uid != os.getuid()
    else:  # root of the user namespace, without capabilities
        assert uid == 0
    # Either mode: pid 1 of a pid namespace of its own; /proc shows it alone (no server, no other run):
    # userns mounts its namespace's /proc, whose /tmp holds its own run directory only; namespaces keeps
    # the server's (hidepid=2: a uid of its own sees its own process), whose /tmp shows the runs' 0700
    # directories
    assert pid == 1 and len(procs) == 1
    if mode == "userns":
        assert procs == ["1"] and tmp == [cwd.rsplit("/", 1)[1]]
    import sys
    python_top = {os.path.realpath(sys.base_prefix).split("/")[1]}
    assert set(root) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp",
                         "usr"} | python_top
    assert "work" not in root and "home" not in root
    assert cwd.startswith("/tmp/run-") and listing == []
    assert env == ["HOME", "LANG", "PATH", "TMPDIR"]
    assert net is False


CAPS_PROBE = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
bounding = []
for cap in range(64):
    held = libc.prctl(23, cap, 0, 0, 0)  # PR_CAPBSET_READ; -1 (EINVAL) past the last capability
    if held < 0:
        break
    if held:
        bounding.append(cap)
ambient = [cap for cap in range(cap) if libc.prctl(47, 1, cap, 0, 0) == 1]  # PR_CAP_AMBIENT, IS_SET

class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

header, data = Header(0x20080522, 0), (Data * 2)()
got = libc.capget(ctypes.byref(header), data)
facts = {"last": cap, "bounding": bounding, "ambient": ambient, "capget": got,
         "sets": [[d.effective, d.permitted, d.inheritable] for d in data],
         "securebits": libc.prctl(27, 0, 0, 0, 0), "no_new_privs": libc.prctl(39, 0, 0, 0, 0)}
"""


@pytest.mark.parametrize("pool", [0, 2])
def test_a_run_holds_no_capability_and_can_gain_none(pool):
    """Every capability set empty (bounding and ambient included), no_new_privs
    and SECBIT_NOROOT locked: the server drops the bounding set once, before
    its first fork, and each worker inherits it (confine.server_setup). A
    pre-forked worker (pool 2) as much as one forked at the request."""
    sb = Sandbox(pool=pool)
    try:
        if sb.protections().mode == "bare":
            pytest.skip("bare mode keeps the caller's capabilities, by request")
        from glyph.sandbox.runtime import isolation, wire
        for _ in range(3):
            msgs, status, _ = run(sb, CAPS_PROBE, ["facts"])
            assert status.exit == 0, msgs
            facts = wire.decode(msgs[1]["value"])
            assert facts["last"] > 30  # PR_CAPBSET_READ answered for every capability up to the last
            assert facts["bounding"] == [] and facts["ambient"] == [], facts
            assert facts["capget"] == 0 and facts["sets"] == [[0, 0, 0], [0, 0, 0]], facts
            assert facts["securebits"] == isolation.SECURE_NOROOT_ALL and facts["no_new_privs"] == 1, facts
    finally:
        sb.close()


def test_caller_secrets_do_not_reach_the_run(sandbox, monkeypatch):
    monkeypatch.setenv("GLYPH_FAKE_API_KEY", "sk-secret-123")
    fresh = Sandbox(pool=0)
    try:
        src = ("import os\nseen = repr(dict(os.environ))\nfor p in os.listdir('/proc'):\n"
               "    for f in ('environ', 'cmdline'):\n"
               "        try: seen += open(f'/proc/{p}/{f}', 'rb').read().decode('latin-1')\n"
               "        except OSError: pass\n")
        msgs, _, _ = run(fresh, src, ["seen"])
        assert "sk-secret-123" not in str(msgs[1])
        if fresh.info.protections["pid_namespace"]["on"]:  # else it reads every process's command line
            assert "pytest" not in str(msgs[1])
    finally:
        fresh.close()


@pytest.mark.parametrize("source,limits,check", [
    # A wall limit far beyond the CPU limit: on a loaded machine 1 s of CPU can take more than 2 s of wall.
    ("while True: pass", Limits(cpu_s=1, wall_s=30), lambda s: s.cpu_exceeded and s.timed_out),
    ("import time\ntime.sleep(30)", Limits(cpu_s=1, wall_s=2), lambda s: s.wall_timeout and s.timed_out),
])
def test_time_limits(sandbox, source, limits, check):
    t0 = time.monotonic()
    msgs, status, _ = run(sandbox, source, limits=limits)
    assert msgs == [None] and check(status), status
    assert time.monotonic() - t0 < 25


def test_memory_file_size_and_open_file_limits(sandbox):
    src = """
errors = []
try:
    x = bytearray(2 << 30)
except MemoryError:
    errors.append("memory")
try:
    with open("big", "wb") as f:
        f.write(b"x" * (2 << 20))
except OSError:
    errors.append("fsize")
try:
    fs = [open("/dev/null") for _ in range(100)]
except OSError:
    errors.append("nofile")
"""
    msgs, status, _ = run(sandbox, src, ["errors"], Limits(memory_bytes=512 << 20, fsize_bytes=1 << 20, nofile=32))
    from glyph.sandbox.runtime import wire
    assert wire.decode(msgs[1]["value"]) == ["memory", "fsize", "nofile"]


def test_process_limit(sandbox):
    if not sandbox.info.protections["uid_separation"]["on"]:
        pytest.skip("the process limit needs a uid per run")
    src = "import os\nn = 0\ntry:\n    while n < 500:\n        if os.fork() == 0:\n            import time; time.sleep(30)\n        n += 1\nexcept OSError:\n    pass\n"
    msgs, status, _ = run(sandbox, src, ["n"], Limits(nproc=8))
    assert msgs[1]["value"] == {"i": hex(7)}
    # namespaces: the kernel kills the 7 with the run's pid namespace; confined: the sweep does
    assert status.swept == (0 if sandbox.info.mode == "namespaces" else 7)
    assert sandbox_processes(sandbox) == []
    assert sandbox_processes(sandbox) == []


def test_output_is_capped_and_invalid_utf8_tolerated(sandbox):
    src = "import os, sys\nos.write(1, b'\\xff\\xfe' * 10)\nfor _ in range(50): sys.stdout.write('y' * (1 << 20))\n"
    msgs, status, r = run(sandbox, src, limits=Limits(output_bytes=1000))
    assert len(r.stdout) == 1000 and r.stdout.startswith(b"\xff\xfe")
    assert status.exit == 0 and not status.timed_out  # the 50 MiB past the cap were read, so it never blocked


def test_nothing_survives_and_no_file_is_left(sandbox):
    src = """
import os, subprocess, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
subprocess.Popen(["sleep", "600"])
open("left.txt", "w").write("x")
os.makedirs("a/b/c")
"""
    msgs, status, _ = run(sandbox, src)
    if sandbox.info.mode not in ("namespaces", "userns"):  # there, the kernel kills them with the run's pid ns
        assert status.swept >= 2
    assert sandbox_processes(sandbox) == []
    assert sandbox_tmp(sandbox) == []


def test_pool_workers_are_the_only_processes_left():
    sb = Sandbox(pool=2)
    try:
        for _ in range(3):
            run(sb, "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(600)\n")
        per_worker = 1  # namespaces, userns: pid 1 of its pid namespace, forked so by the server: no reaper
        deadline = time.monotonic() + 5
        while len(sandbox_processes(sb)) != 2 * per_worker and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sandbox_processes(sb)) == 2 * per_worker
    finally:
        sb.close()


def test_a_killed_server_is_restarted_and_the_run_is_not_a_pass():
    sb = Sandbox(pool=0)
    try:
        sb.protections()
        r = sb.open({"mode": "solution"}, {"source": b"import time\ntime.sleep(30)", "setup": b""})
        time.sleep(0.2)
        os.kill(sb.server_pid(), signal.SIGKILL)
        assert r.recv() is None
        status = r.finish()
        assert status.server_died and status.exit is None
        msgs, status, _ = run(sb, "x = 1", ["x"])
        assert msgs[1]["value"] == {"i": "0x1"} and sb.restarts == 1
    finally:
        sb.close()


def test_bare_mode_still_limits_and_sweeps():
    sb = Sandbox(mode="bare", pool=0)
    try:
        assert sb.protections().mode == "bare"
        msgs, status, _ = run(sb, "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(600)\n"
                                  "while True: pass", limits=Limits(cpu_s=1))
        assert status.cpu_exceeded and status.swept == 1
        assert sandbox_processes(sb) == []
    finally:
        sb.close()


def test_a_large_request_to_a_run_that_stops_reading_is_bounded(sandbox):
    """The run never reads its requests and floods its results: sending a
    request far larger than a pipe buffer must not hang the client."""
    src = "import os, threading\nthreading.Thread(target=lambda: [os.write(1, b'x' * 65536) for _ in iter(int, 1)]).start()\n" \
          "import time\ntime.sleep(30)\n"
    r = sandbox.open({"mode": "solution"}, {"source": src.encode(), "setup": b""}, Limits(wall_s=2, cpu_s=2))
    t0 = time.monotonic()
    sent = r.send({"op": "eval", "id": 0, "expr": "'" + "y" * (4 << 20) + "'"})
    status = r.finish(kill=True)
    assert time.monotonic() - t0 < 10 and (not sent or status.timed_out or status.killed)
    assert sandbox_processes(sandbox) == []


@pytest.mark.parametrize("report_comes", ["in_time", "never", "after_the_decision"])
def test_a_late_run_ends_alone_and_other_runs_keep_their_outcome(monkeypatch, report_comes):
    """A run whose report is late is killed and ends as a wall-clock timeout;
    the server is not restarted, so a concurrent run is graded as it should be.
    ``after_the_decision``: the report is read while finish drains the run's
    pipes, after it decided the run timed out, and replaces the status it made
    (a CI run's order of events): the run still timed out."""
    import selectors

    from glyph.sandbox import run as runs

    if report_comes != "in_time":  # the server is alive but the report never arrives in time
        monkeypatch.setattr(runs, "LATE_GRACE_S", 0.0)
    late = []
    if report_comes == "after_the_decision":
        drain = runs.Run._drain

        def drain_after_the_report(self):
            if self is not late[0]:  # the other run drains as it would
                return drain(self)
            decided, end = self.status, time.monotonic() + 10
            with selectors.DefaultSelector() as sel:
                sel.register(self.ctl, selectors.EVENT_READ)
                while self.status is decided and sel.select(end - time.monotonic()):
                    self._read_ctl()
            assert self.status is not decided, "the report never came"
            drain(self)

        monkeypatch.setattr(runs.Run, "_drain", drain_after_the_report)
    sb = Sandbox(pool=2)
    try:
        slow = sb.open({"mode": "solution"}, {"source": b"import time\ntime.sleep(60)\n", "setup": b""},
                       Limits(cpu_s=60, wall_s=120))
        late.append(slow)
        other = sb.open({"mode": "solution"}, {"source": b"import time\ntime.sleep(1)\ndef f():\n    return 7\n",
                                               "setup": b""}, Limits(cpu_s=30, wall_s=60))
        slow.deadline = time.monotonic()  # as if wall + GRACE_S had passed
        status = slow.finish()
        assert status.killed and status.timed_out and not status.server_died
        assert other.recv() == {"ev": "ready"}
        other.send({"op": "eval", "id": 0, "expr": "f()"})
        assert other.recv()["value"] == {"i": hex(7)}
        other.send({"op": "exit"})
        assert other.finish().exit == 0
        assert sb.restarts == 0
    finally:
        sb.close()


def test_recv_with_a_timeout_leaves_a_silent_run_alive_and_killable(sandbox):
    """``Run.recv(timeout=...)``: a run that sends nothing raises ``TimeoutError``
    after about the timeout, is still running, and can be waited on again and
    killed; a run that answers is read as without a timeout; the run's own
    deadline still ends a wait longer than it (None, as for a dead run)."""
    silent = sandbox.open({"mode": "solution"}, {"source": b"import time\ntime.sleep(30)\n", "setup": b""},
                          Limits(cpu_s=30, wall_s=60))
    for _ in range(2):
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            silent.recv(timeout=0.2)
        assert 0.2 <= time.monotonic() - t0 < 1.5
        assert silent.status is None and not silent.protocol_error
    t0 = time.monotonic()
    status = silent.finish(kill=True)
    assert status.killed and status.exit != 0 and time.monotonic() - t0 < 5
    prompt = sandbox.open({"mode": "solution"}, {"source": b"x = 1\n", "setup": b""})
    assert prompt.recv(timeout=10) == {"ev": "ready"}
    prompt.send({"op": "eval", "id": 0, "expr": "x"})
    assert prompt.recv(timeout=10)["value"] == {"i": "0x1"}
    prompt.send({"op": "exit"})
    assert prompt.finish().exit == 0
    late = sandbox.open({"mode": "solution"}, {"source": b"import time\ntime.sleep(30)\n", "setup": b""})
    late.deadline = time.monotonic() + 0.2  # as if its wall limit plus GRACE_S were that near
    t0 = time.monotonic()
    assert late.recv(timeout=30) is None and time.monotonic() - t0 < 1.5
    assert late.finish(kill=True).killed
    assert sandbox_processes(sandbox) == []


def test_result_bytes_held_at_once_are_bounded_process_wide(sandbox, monkeypatch):
    """Beyond its reserve a run holds result bytes from the process's one pool; a run that finds it
    spent is killed with a protocol error that says so, and every byte comes back when runs are
    released (or dropped)."""
    from glyph.sandbox import run as runs
    pool = runs.ResultPool(256 << 10)
    monkeypatch.setattr(runs, "RESULT_POOL", pool)
    flood = "import os\ndef flood(n):\n    os.write(3, (b'x' * 1000 + b'\\n') * n)\n    return 1\n"
    held = []
    for _ in range(2):
        r = sandbox.open({"mode": "solution"}, {"source": flood.encode(), "setup": b""}, Limits())
        assert r.recv() == {"ev": "ready"}
        r.send({"op": "eval", "id": 0, "expr": "flood(300)"})
        r.gather(301)
        r.finish(kill=True)
        held.append(r)
    first, second = held
    del held
    assert len(first.messages) == 301 and first.protocol_error is None
    assert first.pooled == first.held - runs.RESULT_RESERVE_BYTES > 200 << 10
    assert "result pool" in second.protocol_error and len(second.messages) < 301
    assert pool.free == pool.size - first.pooled - second.pooled >= 0
    first.release()
    del second
    assert pool.free == pool.size
    r = sandbox.open({"mode": "solution"}, {"source": flood.encode(), "setup": b""}, Limits())
    assert r.recv() == {"ev": "ready"}
    r.send({"op": "eval", "id": 0, "expr": "flood(100)"})
    assert [r.recv_line() for _ in range(100)] == [b"x" * 1000] * 100  # taken as they come: none held
    assert r.held < runs.RESULT_RESERVE_BYTES and r.pooled == 0
    r.finish(kill=True)
    assert sandbox_processes(sandbox) == []
