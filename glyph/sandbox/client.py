"""The trusted side of the sandbox: starts the fork server, opens runs
(``glyph.sandbox.run``: their limits, capped channels and status), and
restarts the server if it dies.

Modes (what each protects and does not: ``runtime/server.py``): ``auto``
starts the strongest of ``namespaces`` (root), ``userns`` (any user, where
user namespaces are allowed) and ``confined`` (root without CAP_SYS_ADMIN);
if none starts it raises ``SandboxUnavailable``: it never falls back to
``bare``, which runs only when asked for by name (``Sandbox(mode="bare")``
or ``GLYPH_SANDBOX_MODE=bare``). An explicit ``mode`` argument beats the
environment variable. ``Sandbox.protections().record()`` is the mode and
protections a grading records.

Thread-safe: several threads may run at once (each run has its own pipes).
"""
from __future__ import annotations

import atexit
import errno
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from glyph.sandbox.run import Limits, Run
from glyph.sandbox.runtime import wire

SERVER = Path(__file__).with_name("runtime") / "server.py"
USERNS_UID_AS_ROOT = 0x5FFFFFFE  # userns mode started by root runs as this uid (below runtime/isolation.py's UID_BASE)
MODES = ("namespaces", "userns", "confined", "bare")
AUTO = ("namespaces", "userns", "confined")  # strongest first; ``bare`` only when asked for
PROTECTIONS = ("uid_separation", "mount_isolation", "network_isolation", "pid_namespace", "rlimits",
               "wall_clock", "sweep", "no_capabilities", "minimal_environment", "syscall_filter",
               "run_separation", "no_carryover", "memory_cap")
BARE_HINT = ("to grade without isolation, opt in with GLYPH_SANDBOX_MODE=bare (or `--sandbox bare` where a "
             "command has that option); the solution can then read the workspace, the benchmark data and a "
             "rollout's secret, and use the network")


class SandboxUnavailable(RuntimeError):
    pass


@dataclass
class ServerInfo:
    """Which mode the server runs in and what each protection is:
    ``protections[name] = {"on": bool, "how": str, "if_off": str}`` for every
    name in ``PROTECTIONS``. ``attempts``: the stronger modes that did not
    start, each with why. ``cgroup``: the server's own memory cgroup (a
    path on this machine; each run gets a child of it) where ``memory_cap``
    is on, else None."""

    mode: str
    protections: dict
    attempts: list[str] = field(default_factory=list)
    cgroup: str | None = None

    def record(self) -> dict:
        """What a grading or a rollout records: stable, JSON-able, small:
        ``{"mode": "userns", "protections": {"uid_separation": False, ...}}``
        (every name in ``PROTECTIONS``, in that order)."""
        return {"mode": self.mode,
                "protections": {name: bool(self.protections.get(name, {}).get("on")) for name in PROTECTIONS}}

    def to_json(self) -> dict:
        """Everything, for ``glyph sandbox info --json``."""
        return {"mode": self.mode, "protections": {name: self.protections[name] for name in PROTECTIONS
                                                   if name in self.protections},
                "attempts": list(self.attempts)}


class Sandbox:
    """A handle on one fork server (started lazily, restarted if it dies)."""

    def __init__(self, mode: str | None = None, pool: int = 2, run_bytes: int = 64 << 20,
                 run_inodes: int = 4096) -> None:
        """``mode``: ``namespaces``, ``userns``, ``confined``, ``bare`` or
        ``auto`` (see ``runtime/server.py`` for what each protects and does
        not). Precedence: an explicit ``mode`` argument, else
        ``$GLYPH_SANDBOX_MODE``, else ``auto``. ``auto`` starts the strongest
        of namespaces, userns, confined that this machine allows, and never
        ``bare``: when none starts, ``SandboxUnavailable`` says why and how to
        opt in to ``bare``. An explicit mode that cannot start raises too.
        ``pool``: workers the server keeps forked and confined ahead of
        requests. ``run_bytes``, ``run_inodes``: the size of each run's own
        filesystem (namespaces and userns)."""
        if mode is None:
            env = os.environ.get("GLYPH_SANDBOX_MODE", "").strip()
            mode, self.mode_from = (env, "GLYPH_SANDBOX_MODE") if env else ("auto", "default")
        else:
            self.mode_from = "argument"
        if mode not in MODES + ("auto",):
            where = "GLYPH_SANDBOX_MODE" if self.mode_from == "GLYPH_SANDBOX_MODE" else "sandbox mode"
            raise SandboxUnavailable(f"{where}={mode!r}: use one of auto, {', '.join(MODES)}")
        self.mode = mode
        self.pool = pool
        self.run_bytes = run_bytes
        self.run_inodes = run_inodes
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._runs_dir: str | None = None
        self._cgroup: str | None = None
        self.info: ServerInfo | None = None
        self.restarts = 0
        self._pid = os.getpid()

    # -- lifecycle
    def _start(self) -> None:
        if self.info is not None:  # a restart: the same mode as before, or an error
            modes = [self.info.mode]
        else:
            modes = list(AUTO) if self.mode == "auto" else [self.mode]
        attempts = []
        for mode in modes:
            before = self.info.attempts if self.info is not None else []
            error = self._try_start(mode)
            if error is None:
                self.info.attempts = before + attempts
                return
            attempts.append(f"{mode}: {error}")
        how = {"argument": "", "GLYPH_SANDBOX_MODE": " (from GLYPH_SANDBOX_MODE)",
               "default": ""}[self.mode_from]
        hint = ("; " + BARE_HINT) if self.mode != "bare" else ""
        why = "; ".join(attempts) if len(attempts) > 1 else attempts[0].split(": ", 1)[1]
        raise SandboxUnavailable(f"could not start the sandbox in mode {self.mode}{how}: {why}{hint}")

    def _try_start(self, mode: str) -> str | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        defaults = {k: getattr(Limits(), k) for k in ("run_memory_bytes", "memory_bytes", "nproc")}
        opts = {"mode": mode, "pool": self.pool, "run_bytes": self.run_bytes, "run_inodes": self.run_inodes,
                "defaults": defaults}  # what ``memory_cap`` states
        cmd = [sys.executable, "-I", "-S", "-B", str(SERVER), str(theirs.fileno()), json.dumps(opts)]
        if mode in ("namespaces", "userns"):
            unshare = shutil.which("unshare")
            if unshare is None:
                ours.close()
                theirs.close()
                return "no unshare binary on PATH (util-linux)"
            user = ["--user", "--map-root-user"] if mode == "userns" else []
            cmd = [unshare, *user, "--net", "--pid", "--fork", "--mount", "--kill-child", "--"] + cmd
        ids = {}
        if mode == "userns" and os.geteuid() == 0:
            # Real root (without CAP_SYS_ADMIN, or it would run ``namespaces``) mapped to root of the
            # namespace would keep kuid 0, which the kernel exempts from RLIMIT_NPROC and which owns
            # root's host files: run the whole sandbox as an unprivileged uid of its own instead.
            ids = {"user": USERNS_UID_AS_ROOT, "group": USERNS_UID_AS_ROOT, "extra_groups": []}
        log = tempfile.TemporaryFile()  # the server writes here only when something breaks
        try:
            proc = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log,
                                    env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}, **ids)
        except OSError as exc:
            log.close()
            ours.close()
            theirs.close()
            who = f" as uid {ids['user']}" if ids else ""
            return (f"cannot run {sys.executable}{who}: {exc.strerror}; run glyph with a Python installed "
                    "for all users")
        theirs.close()
        ours.settimeout(30)
        try:
            hello = wire.loads(ours.recv(1 << 16))
        except (OSError, wire.WireError) as exc:
            hello = {"error": str(exc)}
        if hello.get("ev") != "hello":
            proc.kill()
            proc.wait()
            log.seek(0)
            err = log.read().decode(errors="replace").strip().splitlines()
            log.close()
            ours.close()
            why = (err[-1] if err else hello.get("error", "no hello")) or "server exited"
            if ids:
                why += f" (started by root, userns runs as uid {ids['user']}: it needs a Python and glyph " \
                       "readable by all users)"
            return why
        log.close()
        ours.settimeout(None)
        self._proc, self._sock = proc, ours
        self._runs_dir = hello.get("runs_dir")
        self._cgroup = hello.get("cgroup")
        self.info = ServerInfo(mode=mode, protections=hello["protections"], cgroup=self._cgroup)
        return None

    def _ensure(self) -> socket.socket:
        if os.getpid() != self._pid:  # a forked child must not share our server
            self._proc = self._sock = self._runs_dir = self._cgroup = None
            self._pid = os.getpid()
        if self._sock is None:
            self._start()
        return self._sock

    def _server_failed(self, server: object) -> None:
        with self._lock:
            if self._proc is server:  # not a newer server another run already started
                self._stop()
                self.restarts += 1

    def _stop(self, graceful: bool = False) -> None:
        """Stop the server. ``graceful``: close its socket and give it a
        moment to kill its runs and clean up itself (what confined and bare
        need: their runs do not die with a namespace); then kill it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            if graceful and self.info is not None and self.info.mode in ("confined", "bare"):
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            self._proc.kill()
            self._proc.wait()
            self._proc = None
        if self._runs_dir is not None:  # confined and bare: the runs' directory is on the host
            shutil.rmtree(self._runs_dir, ignore_errors=True)
            self._runs_dir = None
        if self._cgroup is not None:  # a server that could not remove its cgroup (killed, or died)
            _remove_cgroup(self._cgroup)
            self._cgroup = None

    def close(self) -> None:
        with self._lock:
            self._stop(graceful=True)

    def server_pid(self) -> int | None:
        """Host pid of the server process (in the namespaced modes, the child
        of ``unshare``), or None when it is not running."""
        with self._lock:
            if self._proc is None:
                return None
            if self.info.mode not in ("namespaces", "userns"):
                return self._proc.pid
            for task in Path(f"/proc/{self._proc.pid}/task").iterdir():
                children = (task / "children").read_text().split()
                if children:
                    return int(children[0])
            return None

    def protections(self) -> ServerInfo:
        """The mode and protections of the server (started if need be;
        ``SandboxUnavailable`` if it cannot be). ``.record()`` is what a
        grading or rollout keeps."""
        with self._lock:
            self._ensure()
            return self.info

    # -- runs
    def open(self, header: dict, blobs: dict[str, bytes], limits: Limits = Limits()) -> Run:
        """Start a run. ``header['mode']`` is ``solution`` or ``referee``
        (see ``runtime/worker.py``); ``blobs`` are the named byte strings it reads."""
        header = dict(header, blobs=[[k, len(v)] for k, v in blobs.items()])
        payload_fd = os.memfd_create("glyph-payload", os.MFD_CLOEXEC)
        try:
            for part in (json.dumps(header).encode() + b"\n", *blobs.values()):
                with memoryview(part) as view:
                    while view:
                        view = view[os.write(payload_fd, view):]
            os.lseek(payload_fd, 0, os.SEEK_SET)
            result_r, result_w = os.pipe()
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            req_r, req_w = os.pipe()
            ctl_ours, ctl_theirs = socket.socketpair()
            theirs = [payload_fd, result_w, out_w, err_w, ctl_theirs.fileno(), req_r]
            request = _limits_request(limits)
            try:
                server = self._submit(request, theirs)
            except BaseException:
                for fd in (result_r, out_r, err_r, req_w):
                    os.close(fd)
                ctl_ours.close()
                raise
            finally:
                for fd in (result_w, out_w, err_w, req_r):
                    os.close(fd)
                ctl_theirs.close()
        finally:
            os.close(payload_fd)
        return Run(server, self._server_failed, limits, req_w, result_r, out_r, err_r, ctl_ours)

    def _submit(self, request: bytes, fds: list[int]) -> object:
        with self._lock:
            for attempt in range(2):
                sock = self._ensure()
                try:
                    socket.send_fds(sock, [request], fds)
                    return self._proc
                except OSError:
                    if attempt:
                        raise
                    self._stop()
                    self.restarts += 1


@functools.lru_cache(maxsize=64)
def _limits_request(limits: Limits) -> bytes:
    """The server's request for a run under ``limits`` (a frozen dataclass:
    built once per distinct ``Limits``, not per run)."""
    return json.dumps({"limits": asdict(limits)}).encode()


def _remove_cgroup(path: str, wait_s: float = 5.0) -> bool:
    """Remove a stopped server's memory cgroup: its runs' children, then its
    own. A cgroup cannot be removed while a process is in it: what is left
    in a child (the runs of a server that died outside a pid namespace) is
    killed (cgroup v2: cgroup.kill; v1: each pid of cgroup.procs, which are
    that run's only), and the runs of a killed pid namespace die
    asynchronously, so each rmdir is retried for up to ``wait_s``. False if
    something was left."""
    end = time.monotonic() + wait_s
    while True:
        try:
            for entry in os.scandir(path):
                if entry.is_dir(follow_symlinks=False):
                    _kill_cgroup(entry.path)
                    try:
                        os.rmdir(entry.path)
                    except FileNotFoundError:
                        pass
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() >= end:
                return False
            time.sleep(0.01)


def _kill_cgroup(path: str) -> None:
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
        return
    except OSError:  # cgroup v1, or v2 before Linux 5.14
        pass
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


_default: Sandbox | None = None
_default_lock = threading.Lock()


def get_sandbox() -> Sandbox:
    """The process-wide sandbox (started on first use, closed at exit), in
    the mode ``$GLYPH_SANDBOX_MODE`` names, else ``auto``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
            atexit.register(_default.close)
        return _default
