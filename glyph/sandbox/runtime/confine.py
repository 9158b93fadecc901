"""A pre-forked worker's confinement: what a fresh fork of the server does to
itself before it may take a job, and how it takes one.

``idle_worker`` applies, in this order, everything the server's mode gives a
run: a new session with only the job socket open; then, each where the mode
has it, the copied root, private IPC and network namespaces, private mount
and pid namespaces (``PID_NS_PER_RUN``), an empty bounding set (in ``namespaces`` and ``userns``
inherited from the server: ``server_setup``) and the run's own uid;
no_new_privs; no capabilities and the seccomp filter
(``isolation.run_filter``), where the mode has them; not dumpable, its own directory as
cwd, umask 077, a minimal environment. Then it waits for its job, sets the
job's fds and rlimits and runs it. A step that fails raises, and the worker
dies before any untrusted code has run: a run never starts with less than
its mode promises. Stdlib only.
"""

from __future__ import annotations

import _signal
import fcntl
import json
import os
import resource
import signal
import socket
import sys

if __package__:  # imported as glyph.sandbox.runtime.confine
    from . import isolation
else:  # a sibling of server.py, which is started as a script
    import isolation


PID_NS_PER_RUN = ("namespaces", "userns")
"""Modes whose workers the server forks each as pid 1 of a pid namespace of its own
(``isolation.PidNamespaceForks``): a run can neither signal nor ``kill(pid, 0)``-probe another run's
processes, and its own pids count from 1. In ``userns`` it also mounts that namespace's /proc in its
mount namespace; in ``namespaces`` it keeps the server's (``hidepid=2``: a run's uid sees its own
processes only, by their pids in the server's namespace)."""


def _private_run_view(rundir: str) -> None:
    """``userns``: runs share a uid, so each gets a mount namespace of its
    own in which the runs' directory is a fresh read-only tmpfs holding
    only this run's directory (the same tmpfs, bound from an fd opened
    before it was covered)."""
    parent = os.path.dirname(rundir)
    isolation.unshare(isolation.CLONE_NEWNS)
    fd = os.open(rundir, os.O_PATH | os.O_DIRECTORY)  # after unshare: a bind source must be in this namespace
    locked = isolation.MS_NOSUID | isolation.MS_NODEV | isolation.MS_NOEXEC
    isolation.mount("tmpfs", parent, "tmpfs", locked, "size=16k,nr_inodes=16,mode=755")
    os.mkdir(rundir, 0o700)
    isolation.mount(f"/proc/self/fd/{fd}", rundir, None, isolation.MS_BIND)
    os.close(fd)
    isolation.mount(None, parent, None,
                    isolation.MS_BIND | isolation.MS_REMOUNT | isolation.MS_RDONLY | locked)


def _own_proc() -> None:
    """``userns``: the worker is pid 1 of a pid namespace of its own (the
    server forked it so: ``isolation.PidNamespaceForks``), and its mount
    namespace of its own (``_private_run_view``) gets the /proc of that
    namespace, which shows none of the server's or another run's processes."""
    locked = isolation.MS_NOSUID | isolation.MS_NODEV | isolation.MS_NOEXEC
    isolation.mount("proc", "/proc", "proc", locked, "hidepid=2")


def enter_cgroup(cgroups, name: str | None, job: socket.socket) -> None:
    """A new worker, before anything else: make its run's cgroup and move
    itself there (so whatever it forks is in there too), then tell the
    server (``r``), which writes the run's cap there when the job comes; or
    that it could not (``e``), and die. The move can wait on the kernel for
    milliseconds (the server's class docstring): here, not on the server's
    loop. ``name`` None: no cgroup (protection ``memory_cap`` off)."""
    if name is None:
        return
    try:
        cgroups.enter(name)
    except OSError:
        job.send(b"e")
        raise
    job.send(b"r")


BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}  # a run's, with HOME and TMPDIR
INHERITED_BOUNDING = ("namespaces", "userns")  # modes whose workers inherit the server's empty bounding set


def server_setup(mode: str, cap_last: int) -> None:
    """What every worker would otherwise do first, done once in the server
    after its start-up, before its first fork (each fork inherits it): the
    environment becomes ``BASE_ENV`` exactly; in ``namespaces`` and
    ``userns``, an empty bounding set and SECBIT_NOROOT locked
    (``isolation.drop_bounding_set``; the server keeps its effective
    capabilities). Not in ``confined``: there the server may still exec
    ``rm -rf`` to remove what a run left on the host (``rootfs.remove_tree``),
    which needs the capabilities an exec would then lose; each worker drops
    the set itself (``idle_worker``). ``bare`` keeps what the caller has."""
    os.environ.clear()
    os.environ.update(BASE_ENV)
    if mode in INHERITED_BOUNDING:
        isolation.drop_bounding_set(cap_last)


def idle_worker(job_fd: int, uid: int | None, rundir: str, mode: str, cap_last: int,
                seccomp: object | None, chroot: str | None, run) -> None:
    """Confine this fresh fork, then wait for a job (the request and its
    fds) and ``run`` it (``worker.main``): payload on fd 5, results to fd 3,
    requests from fd 4, stdout and stderr on 1 and 2."""
    os.setsid()
    job_fd = _dup_high(job_fd)
    os.closerange(0, job_fd)
    os.closerange(job_fd + 1, 1 << 16)
    devnull = os.open("/dev/null", os.O_RDONLY)  # before the chroot: its /dev may lack null
    if chroot is not None:  # confined: into the copied root, while CAP_SYS_CHROOT is held
        os.chroot(chroot)
        os.chdir("/")
        rundir = rundir[len(chroot):]
    if mode in ("namespaces", "userns"):
        # SysV IPC objects and POSIX message queues, abstract unix sockets and loopback ports: none
        # shared between runs, none left after one (each namespace goes with its run's last process)
        isolation.unshare(isolation.CLONE_NEWIPC | isolation.CLONE_NEWNET)
    if mode == "userns":
        _private_run_view(rundir)
        _own_proc()
    if mode != "bare" and mode not in INHERITED_BOUNDING:  # those inherit the server's empty set (server_setup)
        isolation.drop_bounding_set(cap_last)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    isolation.prctl(isolation.PR_SET_NO_NEW_PRIVS, 1)
    if mode != "bare":
        isolation.drop_capabilities()
    if seccomp is not None:
        isolation.install_seccomp(seccomp)
    isolation.prctl(isolation.PR_SET_DUMPABLE, 0)
    os.chdir(rundir)
    os.umask(0o077)
    os.environ["HOME"] = os.environ["TMPDIR"] = rundir  # to BASE_ENV, the server's whole environment
    # _signal, not signal: signal.signal's enum wrapping cost 90 us of CPU here (copy-on-write faults)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
        _signal.signal(sig, _signal.SIG_DFL)
    sys.argv = ["solution"]
    job = socket.socket(fileno=job_fd)
    msg, fds, _flags, _addr = socket.recv_fds(job, 1 << 16, 8)
    if not msg or len(fds) != 6:
        os._exit(0)
    job.close()
    limits = json.loads(msg)["limits"]
    payload_fd, result_w, out_w, err_w, ctl, req_r = fds
    os.close(ctl)
    high = [_dup_high(fd) for fd in (devnull, out_w, err_w, result_w, req_r, payload_fd)]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(high), 1 << 16)
    mem = int(limits["memory_bytes"])
    cpu = int(limits["cpu_s"])
    # namespaces, userns: this process is pid 1 of its namespace and so ignores SIGXCPU (signals without a
    # handler do not reach a namespace's init); the hard limit's SIGKILL does, at the limit itself.
    cpu_hard = cpu if mode in PID_NS_PER_RUN else cpu + 1
    for res, value in (
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_CPU, (cpu, cpu_hard)),
        (resource.RLIMIT_FSIZE, (int(limits["fsize_bytes"]),) * 2),
        (resource.RLIMIT_NOFILE, (int(limits["nofile"]),) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(res, value)
    if uid is not None:  # without a uid of its own, this would count the caller's processes
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["nproc"]),) * 2)
    elif mode == "userns":  # the uid is the sandbox's own: bound the sandbox as a whole
        nproc = int(json.loads(msg)["procs"]) + int(limits["nproc"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    run(payload_fd=5, result_fd=3, request_fd=4)


def _dup_high(fd: int) -> int:
    return fcntl.fcntl(fd, fcntl.F_DUPFD, 100)
