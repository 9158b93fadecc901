"""One sandboxed run as the trusted side holds it: its ``Limits``, its channels read with hard caps,
and its ``RunStatus``. ``glyph.sandbox.client.Sandbox.open`` starts one.

A run is a session: you ``send`` requests to it and ``recv`` messages from it
(or ``gather`` unparsed, to read after the run is gone), then ``finish`` to get
its ``RunStatus``. All bytes read from a run are bounded (``Limits.output_bytes``
per stream, kept; the rest is read and counted, so the run never blocks;
``Limits.result_bytes`` for the message channel, beyond which the run is
killed), and so are the message bytes all runs of this process hold at once
(``RESULT_POOL``: a run that would hold more than its reserve when the pool is
spent is killed, with a protocol error that says so). Nothing read from a run
is ever unpickled or executed; messages are parsed by ``wire``.

Thread-safe: each run has its own pipes.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from glyph.sandbox.runtime import wire

GRACE_S = 10.0  # beyond a run's wall limit before the client gives up on the server
LATE_GRACE_S = 10.0  # after killing a run whose report is late, before deciding the server is gone
RESULT_RESERVE_BYTES = 64 << 10  # message bytes any run may hold outside the pool (a pipe's worth)
RESULT_POOL_BYTES = 64 << 20  # message bytes all runs of this process may hold beyond their reserves


class ResultPool:
    """The message bytes the runs of this process hold at once (read from
    their result pipes and not yet released: lines not yet taken by ``recv``,
    or kept for a grader to read after the run), beyond each run's
    ``RESULT_RESERVE_BYTES``: at most ``size``. A run's reserve covers every
    answer an honest grading sends (the largest MBPP suite's answers take a
    few KiB: ``glyph.grading.ANSWER_BYTES``); only runs that send more draw
    on the pool, and one that finds it spent is killed (``Run._read``), so
    concurrent gradings hold at most ``size`` plus a reserve each, whatever
    they send. Thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if n > self.free:
                return False
            self.free -= n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.free += n


RESULT_POOL = ResultPool(RESULT_POOL_BYTES)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. CPU and ``memory_bytes`` (address space)
    apply to each process of the run (each child gets its own rlimits, and
    ``nproc`` bounds how many). ``run_memory_bytes`` caps the memory (and
    swap) of all the run's processes together, where the server could make
    a cgroup (protection ``memory_cap``); at the cap the kernel kills the
    run and ``RunStatus.memory_exceeded`` is set. Where there is no cgroup,
    a run's memory is bounded by ``memory_bytes`` times ``nproc`` instead."""

    cpu_s: float = 10.0
    wall_s: float = 20.0
    memory_bytes: int = 1 << 30
    run_memory_bytes: int = 1 << 30
    nproc: int = 32
    fsize_bytes: int = 16 << 20
    nofile: int = 64
    output_bytes: int = 64 << 10
    result_bytes: int = 16 << 20


@dataclass
class RunStatus:
    exit: int | None = None
    signal: int | None = None
    wall_timeout: bool = False
    cpu_exceeded: bool = False
    killed: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    maxrss_kb: int = 0
    swept: int = 0
    memory_exceeded: bool = False  # the run went over ``Limits.run_memory_bytes``: the kernel killed it
    server_died: bool = False

    @property
    def timed_out(self) -> bool:
        return self.wall_timeout or self.cpu_exceeded


class Run:
    """One confined process and its channels."""

    def __init__(self, server: object, server_failed: Callable[[object], None], limits: Limits,
                 req_w: int | None, result_r: int, out_r: int, err_r: int, ctl: socket.socket) -> None:
        self.server = server  # which server process ran it: only that one is restarted on failure
        self.server_failed = server_failed  # the sandbox's: called with ``server`` when it is gone
        self.limits = limits
        self.deadline = time.monotonic() + limits.wall_s + GRACE_S
        self.req_w = req_w
        if req_w is not None:  # a full pipe must not block us: send() keeps reading output meanwhile
            os.set_blocking(req_w, False)
        self.ctl = ctl
        self.sel = selectors.DefaultSelector()
        self.bufs: dict[str, bytearray] = {"result": bytearray(), "stdout": bytearray(), "stderr": bytearray()}
        self.seen = {"result": 0, "stdout": 0, "stderr": 0}
        for name, fd in (("result", result_r), ("stdout", out_r), ("stderr", err_r)):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, name)
        ctl.setblocking(False)
        self.sel.register(ctl, selectors.EVENT_READ, "ctl")
        self.ctl_buf = bytearray()
        # Lines as the run sent them, each parsed when recv returns it: parsed, a hostile line takes
        # tens of times its bytes (wire's docstring), and a run that keeps writing while finish waits
        # for it to end may send all of its result_bytes in lines of just under wire.MAX_TOKENS.
        self.messages: collections.deque[bytes] = collections.deque()
        self.held = 0  # message bytes this run holds (its partial line and ``messages``) ...
        self.pooled = 0  # ... of which drawn on RESULT_POOL (beyond RESULT_RESERVE_BYTES)
        self.status: RunStatus | None = None
        self.protocol_error: str | None = None
        self._kill_sent = False
        self._late_kill = False  # killed for passing its deadline: a wall timeout, whenever the report comes

    # -- output
    @property
    def stdout(self) -> bytes:
        return bytes(self.bufs["stdout"])

    @property
    def stderr(self) -> bytes:
        return bytes(self.bufs["stderr"])

    # -- channel
    def send(self, msg: dict) -> bool:
        """Send one request; False if the run no longer listens."""
        if self.req_w is None:
            return False
        data = memoryview(wire.dumps(msg))
        try:
            while data:
                try:
                    n = os.write(self.req_w, data)
                    data = data[n:]
                except BlockingIOError:
                    if not self._pump(min(self.deadline, time.monotonic() + 0.05)):
                        return False
        except (BrokenPipeError, OSError):
            return False
        return True

    def recv(self, timeout: float | None = None, max_tokens: int | None = wire.MAX_TOKENS) -> dict | None:
        """The next message, or None once the run has ended or broken its
        channel, or passed its own deadline (wall limit plus ``GRACE_S``).
        ``timeout``: wait at most this many seconds; if no message came by
        then and the run neither ended nor passed its deadline, raise
        ``TimeoutError``. The run is left as it was: ``recv`` again, or
        ``kill`` or ``finish`` it. A line that is not a message (``wire.loads``,
        ``max_tokens``) ends the run with a protocol error."""
        line = self.recv_line(timeout)
        if line is None:
            return None
        try:
            return wire.loads(line, max_tokens)
        except wire.WireError as exc:
            self.protocol_error = f"malformed message from the run: {exc}"
            while self.messages:  # and what comes after it is dropped (_read)
                self._uncharge(len(self.messages.popleft()))
            self.kill()
            return None

    def recv_line(self, timeout: float | None = None) -> bytes | None:
        """``recv``'s next line as the run wrote it (without its newline), unparsed."""
        until = self.deadline if timeout is None else min(self.deadline, time.monotonic() + timeout)
        while not self.messages:
            if self.status is not None or self.protocol_error or not self._pump(until):
                if self.status is None and not self.protocol_error and time.monotonic() < self.deadline:
                    raise TimeoutError(f"no message from the run within {timeout} s")
                return None
        line = self.messages.popleft()
        self._uncharge(len(line))
        return line

    def gather(self, n: int) -> bool:
        """Read until ``messages`` holds ``n`` lines, unparsed (a grader reads
        them after the run is gone), or the run ends, breaks its channel or
        passes its deadline: whether ``n`` came. The lines stay charged to the
        result pool until ``release``."""
        while len(self.messages) < n:
            if self.status is not None or self.protocol_error or not self._pump(self.deadline):
                return len(self.messages) >= n
        return True

    def release(self) -> None:
        """Drop the lines this run still holds and give their bytes back to
        the result pool (also when the run is garbage: ``__del__``)."""
        self.messages.clear()
        self.bufs["result"] = bytearray()
        self.held = 0
        if self.pooled:
            RESULT_POOL.give(self.pooled)
            self.pooled = 0

    def __del__(self) -> None:
        if self.pooled and RESULT_POOL is not None:  # None: this module torn down at interpreter exit
            RESULT_POOL.give(self.pooled)
            self.pooled = 0

    def kill(self) -> None:
        if not self._kill_sent and self.status is None:
            self._kill_sent = True
            try:
                self.ctl.send(b"k")
            except OSError:
                pass

    def finish(self, kill: bool = False) -> RunStatus:
        """End the run (politely: close its request pipe; or kill it) and wait
        for the supervisor's report."""
        if self.req_w is not None:
            os.close(self.req_w)
            self.req_w = None
        if kill:
            self.kill()
        while self.status is None and self._pump(self.deadline):
            pass
        if self.status is None:
            self._late()
        self._drain()
        self._close()
        return self.status

    # -- internals
    def _pump(self, deadline: float) -> bool:
        """Read what is ready; False when nothing more can come (status
        received and pipes drained, or deadline passed)."""
        if self.status is not None and not self._open_streams():
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        for key, _ in self.sel.select(left):
            name = key.data
            if name == "ctl":
                self._read_ctl()
            else:
                self._read(key.fd, name)
        return True

    def _open_streams(self) -> bool:
        return any(k.data != "ctl" for k in self.sel.get_map().values())

    def _read(self, fd: int, name: str) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.sel.unregister(fd)
            os.close(fd)
            return
        self.seen[name] += len(chunk)
        buf = self.bufs[name]
        if name != "result":
            room = self.limits.output_bytes - len(buf)
            if room > 0:
                buf += chunk[:room]
            return
        if self.seen[name] > self.limits.result_bytes:
            if not self.protocol_error:
                self.protocol_error = f"the run sent more than {self.limits.result_bytes} bytes of results"
            self.kill()
            return
        if self.protocol_error:  # the run broke its channel: nothing more from it is read as a message
            return
        if not self._charge(len(chunk)):
            self.protocol_error = (f"the run held more than {RESULT_RESERVE_BYTES} bytes of results "
                                   f"while the grader's result pool ({RESULT_POOL.size} bytes, shared by "
                                   "concurrent runs) was spent")
            self.kill()
            return
        buf += chunk
        while (i := buf.find(b"\n")) >= 0:
            with memoryview(buf) as view:  # one copy of the line, not two (buf[:i] is a copy)
                self.messages.append(bytes(view[:i]))
            del buf[:i + 1]
            self._uncharge(1)  # the newline

    def _charge(self, n: int) -> bool:
        """Hold ``n`` more message bytes; False where that would draw on a
        spent pool (nothing is charged then)."""
        need = max(0, self.held + n - RESULT_RESERVE_BYTES) - self.pooled
        if need > 0:
            if not RESULT_POOL.take(need):
                return False
            self.pooled += need
        self.held += n
        return True

    def _uncharge(self, n: int) -> None:
        self.held -= n
        spare = self.pooled - max(0, self.held - RESULT_RESERVE_BYTES)
        if spare > 0:
            RESULT_POOL.give(spare)
            self.pooled -= spare

    def _read_ctl(self) -> None:
        try:
            chunk = self.ctl.recv(1 << 16)
        except BlockingIOError:
            return
        except ConnectionResetError:  # the server closed with our kill request unread: EOF
            chunk = b""
        if chunk:
            self.ctl_buf += chunk
            if b"\n" in self.ctl_buf:
                report = json.loads(bytes(self.ctl_buf).split(b"\n", 1)[0])
                report.pop("ev", None)
                self.status = RunStatus(**report)
                # SIGXCPU at the soft CPU limit; or SIGKILL at the hard one (a run that ignores SIGXCPU;
                # in userns mode the run is pid 1 of its namespace, which ignores it). The kernel enforces
                # the limit on a finer clock than the rusage it reports (measured: a 1 s limit reads as
                # 0.87-0.97 s), hence the margin.
                self.status.cpu_exceeded = not self.status.memory_exceeded and (
                    self.status.signal == signal.SIGXCPU
                    or (self.status.signal == signal.SIGKILL and not report["wall_timeout"]
                        and not report["killed"] and report["cpu_s"] >= 0.75 * int(self.limits.cpu_s)))
                # A report after finish gave up waiting (read while draining) replaces the status it
                # decided, and keeps its verdict: the run was killed for running past its wall limit.
                self.status.wall_timeout = self.status.wall_timeout or self._late_kill
            return
        self.sel.unregister(self.ctl)
        if self.status is None:  # gone without a report: the server died
            self._server_gone()

    def _late(self) -> None:
        """No report by the run's wall limit plus ``GRACE_S`` (a loaded
        machine, a stuck supervisor): kill this run alone and wait up to
        ``LATE_GRACE_S`` more. If the server is still alive the run ends as a
        wall-clock timeout and the server (with every other run on it) is left
        alone; only a server that has really died is restarted."""
        self._late_kill = True
        self.kill()
        end = time.monotonic() + LATE_GRACE_S
        while self.status is None and self._pump(end):
            pass
        if self.status is not None:  # the report came: _read_ctl marked it a wall-clock timeout
            return
        if getattr(self.server, "poll", lambda: 0)() is None:
            self.status = RunStatus(wall_timeout=True, killed=True)
        else:
            self._server_gone()

    def _server_gone(self) -> None:
        self.status = RunStatus(server_died=True)
        self.server_failed(self.server)

    def _drain(self) -> None:
        end = time.monotonic() + 1.0
        while self._open_streams() and time.monotonic() < end:
            self._pump(end)

    def _close(self) -> None:
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            if key.data != "ctl":
                os.close(key.fd)
        self.sel.close()
        self.ctl.close()
