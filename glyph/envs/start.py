"""How glyph's harness starts the agent program: ``cold`` (a fresh
``python3 -I`` on the shipped files written into the rollout's runtime, the
only start a container has) or ``warm`` (a fork of ``glyph.agent.warm``'s
server, which imported the program once; only on a runtime with a local
workspace, verifiers' subprocess runtime).

Warm, the shipped set is written once per env process, into a read-only
folder of its own (``shipped_folder``), not into each rollout's workspace;
the server runs from there and forks one child per rollout, started as
verifiers' subprocess runtime starts a program (the environment it builds:
``process_env``; the workspace as cwd; a new session; stdout and stderr to
this process; ``glyph.agent.warm`` lists the rest). One server per env
process (``get_server``), started on the first warm rollout, started again
when it died, stopped at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from glyph.layers import shipped_files

SERVER = "glyph/agent/warm.py"
HELLO_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0


class WarmStartError(RuntimeError):
    """The warm server could not be started (its log's tail says why)."""


class ServerGone(ConnectionError):
    """The warm server was gone before it forked the rollout's child (so it can be sent again)."""


@dataclass(frozen=True)
class Finished:
    """A warm program's end: what ``Runtime.run_program`` returns (``exit_code``
    as there: negative for a signal), and the child's CPU (``cpu_s``: user +
    system, with its reaped descendants; None when the server died first)."""

    exit_code: int
    stdout: str
    stderr: str
    cpu_s: float | None
    server_cpu_s: float | None


def workspace_of(runtime) -> Path | None:
    """The runtime's local workspace (verifiers' subprocess runtime's ``workdir``), or None."""
    workdir = getattr(runtime, "workdir", None)
    return workdir if isinstance(workdir, Path) and workdir.is_dir() else None


def process_env(runtime, env: dict[str, str]) -> dict[str, str]:
    """The environment verifiers' subprocess runtime gives a program it runs
    (``verifiers/v1/runtimes/subprocess.py:104-105``, ``SubprocessRuntime.run``; a60a606
    ``:99-100``, the same):
    this process's, less every name holding ``API_KEY``, then the runtime's
    values for the process (``Runtime.process_env``)."""
    full = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
    full.update(runtime.process_env(env))
    return full


@lru_cache(maxsize=1)
def _shipped_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="glyph-program-"))
    atexit.register(_remove, root)
    return root


def shipped_folder() -> Path:
    """The shipped set (``glyph.layers.shipped_files``), written once per env
    process under a private temp folder, read-only (files 0444, folders 0555)."""
    folder = _shipped_root() / "program"
    if not folder.is_dir():
        staging = _shipped_root() / "staging"
        for target, source in shipped_files().items():
            dest = staging / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(source.read_bytes())
        for path in sorted(staging.rglob("*"), key=lambda p: -len(p.parts)):
            path.chmod(0o444 if path.is_file() else 0o555)
        staging.chmod(0o555)
        staging.rename(folder)
    return folder


def _remove(root: Path) -> None:
    with contextlib.suppress(OSError):
        for path in root.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(stat.S_IRWXU)
        root.chmod(stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)


class WarmServer:
    """One ``glyph.agent.warm`` server process and its control socket."""

    def __init__(self, python: str = "python3") -> None:
        folder = shipped_folder()
        self.log = _shipped_root() / f"server-{os.getpid()}-{id(self):x}.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ctl = ours
        self.lock = threading.Lock()
        with open(self.log, "wb") as log:
            # -B: nothing is written into the shipped folder (its imports compile once, in this server)
            self.proc = subprocess.Popen([python, "-I", "-B", str(folder / SERVER), str(theirs.fileno())],
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log, cwd=folder,
                                         start_new_session=True)
        theirs.close()
        ours.settimeout(HELLO_TIMEOUT_S)
        try:
            hello = ours.recv(1 << 16)
        except OSError:
            hello = b""
        if not hello:
            self.close()
            raise WarmStartError(f"the warm program server did not start: {self.log_tail()}")
        ours.settimeout(None)
        self.pid = int(json.loads(hello)["pid"])

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1][-500:] if lines else f"exit status {self.proc.poll()}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    async def run(self, cwd: Path, env: dict[str, str]) -> Finished:
        """One rollout's program, forked in ``cwd`` with exactly ``env``; cancelled, its process group is killed."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            msg = json.dumps({"op": "run", "cwd": str(cwd), "env": env}).encode()
            with self.lock:
                socket.send_fds(self.ctl, [msg], [theirs.fileno(), out_w, err_w])
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(out_w)
            os.close(err_w)
        try:  # closing ``ours`` before the child's end (a cancel) is the server's cue to kill it
            out, err, status = await asyncio.gather(_read_to_eof(out_r), _read_to_eof(err_r),
                                                    _read_to_eof(ours.detach()))
        finally:
            ours.close()
        lines = [json.loads(line) for line in status.decode().splitlines() if line.strip()]
        if not any("pid" in m for m in lines):  # it never forked the child: nothing of the rollout ran
            raise ServerGone(f"the warm program server took no rollout: {self.log_tail()}")
        end = next((m for m in lines if "exit_code" in m), None)
        stderr = err.decode(errors="replace")
        if end is None:  # the server died under it: the child died with it (PR_SET_PDEATHSIG)
            stderr += "\nthe warm program server exited during the rollout\n"
            return Finished(-signal.SIGKILL, out.decode(errors="replace"), stderr, None, None)
        return Finished(int(end["exit_code"]), out.decode(errors="replace"), stderr, float(end["cpu_s"]),
                        float(end["server_cpu_s"]))

    def close(self) -> None:
        """Stop the server (its children are killed) and reap it."""
        with contextlib.suppress(OSError), self.lock:
            self.ctl.send(json.dumps({"op": "stop"}).encode())
        self.ctl.close()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


async def _read_to_eof(fd: int) -> bytes:
    """Everything ``fd`` yields until EOF, read on the running loop; ``fd`` is closed after."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done = loop.create_future()

    def readable() -> None:
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        except BlockingIOError:
            return
        except OSError as exc:
            if not done.done():
                done.set_exception(exc)
            loop.remove_reader(fd)
            return
        loop.remove_reader(fd)
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return b"".join(chunks)


_server: WarmServer | None = None
_owner: int | None = None
_lock = threading.Lock()


def _running() -> WarmServer | None:
    """This env process's warm server if it is running (a forked env process owns none of its parent's)."""
    return _server if _server is not None and _owner == os.getpid() and _server.alive() else None


def get_server() -> WarmServer:
    """This env process's warm server: started on first use and again when it died."""
    global _server, _owner
    with _lock:
        if _running() is not None:
            return _server
        if _server is not None and _owner == os.getpid():
            _server.close()
        _server, _owner = WarmServer(), os.getpid()
        return _server


def stop_server() -> None:
    global _server
    with _lock:
        if _server is not None and _owner == os.getpid():
            _server.close()
        _server = None


atexit.register(stop_server)


async def run_warm(runtime, env: dict[str, str]) -> Finished:
    """The program of a rollout whose workspace is local (``workspace_of``), forked warm in it."""
    cwd = workspace_of(runtime)
    if cwd is None:
        raise ValueError("a warm start needs a runtime with a local workspace")
    full = process_env(runtime, env)
    server = _running() or await asyncio.to_thread(get_server)  # a start waits for its imports: off the loop
    try:
        return await server.run(cwd, full)
    except ConnectionError:  # it was gone before it forked the rollout's child: nothing ran
        return await (await asyncio.to_thread(get_server)).run(cwd, full)
