"""The warm agent program: a fork server that imports the agent program
(``glyph.agent.program``) once and forks one child per rollout (stdlib only,
shipped with the agent layer; started and owned by ``glyph.envs.start`` in
the env process, on a runtime with a local workspace).

A fresh ``python3 -I program.py`` spends most of its CPU starting Python and
importing (json, dataclasses, socket, the shipped modules); a
fork of this process, which already imported them, starts the same episode
for a fraction of that. Each child is started as verifiers' subprocess
runtime starts the cold program (``verifiers/v1/runtimes/subprocess.py``,
``SubprocessRuntime.run``: the rollout's environment, the workspace as cwd,
a new session, stdout and stderr to the caller) and then:

* its session is its own (``setsid``: pgid == pid) and it dies with this
  server (``PR_SET_PDEATHSIG``);
* it holds no descriptor but 0 (``/dev/null``), 1 and 2 (the caller's pipes):
  not this server's sockets, not another rollout's;
* its environment is exactly the one the caller sent (this server's own is
  cleared), its cwd the rollout's workspace, its rlimits this server's (the
  env process's, as a cold program inherits them), its signal dispositions
  those of a fresh interpreter;
* it runs ``program.main()`` and exits with its status; an uncaught
  exception prints its traceback and exits 1, as ``python3`` does; the
  ``atexit`` functions run, then ``os._exit`` (nothing of the server's is
  finalized in the child).

Every child is forked from this server before it ran any episode, so no
rollout sees another's state. A rollout's socket closing before its child
exited (the caller cancelled it, or the env process died) kills the child's
process group; a child's exit kills what is left of its group before it is
reaped (so no pid is reused under the kill). This server exits, killing
every child, when its control socket closes (the env process is gone) or on
``{"op": "stop"}``.

Protocol (``glyph.envs.start`` is the other side): the control socket (a
``SOCK_SEQPACKET`` descriptor passed as ``argv[1]``) gets one hello,
``{"pid", "program"}``, once the program is imported; then each message is
one rollout, ``{"op": "run", "cwd", "env"}`` with three descriptors: the
rollout's socket, its stdout and its stderr. On the rollout's socket the
server sends ``{"pid"}`` once forked, then ``{"exit_code", "cpu_s",
"server_cpu_s"}`` (``exit_code`` as ``asyncio``'s ``returncode``: negative
for a signal; ``cpu_s`` the child's user+system CPU with its reaped
descendants; ``server_cpu_s`` this server's own so far) and closes it.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import traceback

if not __package__:  # run as the shipped script: the root that holds glyph/ is two folders up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from glyph.agent import program  # noqa: E402

MAX_MSG = 1 << 20
PR_SET_PDEATHSIG = 1


class Child:
    __slots__ = ("pid", "pidfd", "sock", "watched")

    def __init__(self, pid: int, pidfd: int, sock: socket.socket) -> None:
        self.pid, self.pidfd, self.sock = pid, pidfd, sock
        self.watched = True  # its socket is polled (until its caller went away)


_libc = None  # loaded once in the server, before any fork (``main``)


def _die_with_parent(parent: int) -> None:
    """SIGKILL when this server exits; exit now if it already did."""
    import ctypes
    _libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


def _close_other_fds() -> None:
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every descriptor number below the limit
        os.closerange(3, 1 << 16)
        return
    for fd in fds:
        if fd > 2:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, closed already
                pass


def child_main(server: int, cwd: str, env: dict, out_fd: int, err_fd: int) -> None:
    """In the forked child: become a fresh rollout's program, run it, exit. Never returns."""
    code = 1
    try:
        os.setsid()
        _die_with_parent(server)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        _close_other_fds()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a fresh interpreter's
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [program.__file__]
        try:
            code = program.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # deliberate: what python3 does with an uncaught exception
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what the interpreter runs at exit (os._exit below skips it)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe must not change the status
                stream.flush()
    finally:
        os._exit(code if isinstance(code, int) and 0 <= code <= 255 else 1)


def _cpu_s(times) -> float:
    return times.ru_utime + times.ru_stime


class Server:
    def __init__(self, ctl: socket.socket) -> None:
        self.ctl = ctl
        self.poller = select.poll()
        self.poller.register(ctl.fileno(), select.POLLIN)
        self.by_fd: dict[int, Child] = {}
        self.children: dict[int, Child] = {}
        self.pid = os.getpid()

    def loop(self) -> None:
        while True:
            for fd, _ in self.poller.poll():
                if fd == self.ctl.fileno():
                    if not self.request():
                        return
                    continue
                child = self.by_fd.get(fd)
                if child is None:
                    continue
                if fd == child.pidfd:
                    self.finish(child)
                else:  # the rollout's socket: readable only when its caller went away
                    self._kill(child.pid)
                    self._unwatch(child)

    def _unwatch(self, child: Child) -> None:
        if child.watched:
            child.watched = False
            self.poller.unregister(child.sock.fileno())
            del self.by_fd[child.sock.fileno()]

    def request(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self.ctl, MAX_MSG, 3)
        except OSError:
            return False
        if not data:  # the env process is gone
            return False
        msg = json.loads(data)
        if msg.get("op") == "stop":
            for fd in fds:
                os.close(fd)
            return False
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            return True
        sock_fd, out_fd, err_fd = fds
        sock = socket.socket(fileno=sock_fd)
        pid = os.fork()
        if pid == 0:  # no socket object may close a number the program reuses: detach them all
            for held in (self.ctl, sock, *(c.sock for c in self.children.values())):
                held.detach()
            child_main(self.pid, str(msg["cwd"]), dict(msg["env"]), out_fd, err_fd)
        os.close(out_fd)
        os.close(err_fd)
        child = Child(pid, os.pidfd_open(pid), sock)
        self.children[pid] = child
        self.by_fd[child.pidfd] = child
        self.by_fd[sock.fileno()] = child
        self.poller.register(child.pidfd, select.POLLIN)
        self.poller.register(sock.fileno(), select.POLLIN | select.POLLHUP)
        self._send(child, {"pid": pid})
        return True

    def finish(self, child: Child) -> None:
        """The child exited: kill what is left of its group while the zombie holds the pgid, then reap it."""
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        self._kill(child.pid)
        _, status, usage = os.wait4(child.pid, 0)
        self._unwatch(child)
        self.poller.unregister(child.pidfd)
        del self.by_fd[child.pidfd], self.children[child.pid]
        os.close(child.pidfd)
        me = os.times()
        self._send(child, {"exit_code": os.waitstatus_to_exitcode(status), "cpu_s": _cpu_s(usage),
                           "server_cpu_s": me.user + me.system})
        child.sock.close()

    @staticmethod
    def _send(child: Child, msg: dict) -> None:
        try:
            child.sock.sendall(json.dumps(msg).encode() + b"\n")
        except OSError:  # the caller went away: its child is killed when its socket reads as closed
            pass

    @staticmethod
    def _kill(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def shutdown(self) -> None:
        for child in list(self.children.values()):
            self._kill(child.pid)
        for child in list(self.children.values()):
            try:
                os.waitpid(child.pid, 0)
            except ChildProcessError:
                pass


def main() -> None:
    global _libc
    ctl = socket.socket(fileno=int(sys.argv[1]))
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the env process's Ctrl-C is its to handle
    server = Server(ctl)
    ctl.send(json.dumps({"pid": server.pid, "program": program.__file__}).encode())
    gc.collect()
    gc.freeze()  # the children's collections then leave the server's objects (and their pages) alone
    try:
        server.loop()
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
