"""The warm fork server that runs untrusted Python.

Started by ``glyph.sandbox.client`` as ``python -I -S server.py FD OPTIONS``
in one of four modes (``OPTIONS["mode"]``); each mode either applies every
protection it promises or refuses to start (the client then tries the next
mode, and never falls back to ``bare`` on its own):

``namespaces`` (real root, or CAP_SYS_ADMIN)
    inside fresh network, pid and mount namespaces (``unshare``): this
    process is pid 1 of its own pid namespace (when it dies the kernel kills
    every process it started); chroot into a read-only view of /usr and the
    Python installation; each run has a uid of its own, a private tmpfs as
    its only writable place, no network, and network, IPC and pid
    namespaces of its own (no abstract unix socket, port, SysV IPC object,
    POSIX message queue or process of one run is seen by another:
    ``kill(pid, 0)`` on another run's pid finds nothing, and a run's pids
    count from 1).
``userns`` (any user, where unprivileged user namespaces are allowed)
    the same namespaces, created inside a new user namespace
    (``unshare --user --map-root-user``). The server is root of that
    namespace only. Exactly one uid is mapped (an unprivileged user can map
    only its own uid without ``newuidmap`` and a subordinate range, which
    this mode does not use), so a run cannot get a uid of its own. What
    that costs and how it is compensated: each run drops every capability
    (bounding set too, and SECBIT_NOROOT, so an exec cannot regain them);
    each run has its own mount namespace, in which the runs' /tmp is a fresh
    read-only tmpfs holding only its own run directory (it cannot see, read
    or write another run's files, nor leave files for a later run), its own
    pid namespace with its own /proc (it can see and signal no process of
    another run or of the server, ``kill(-1)`` included), its own network
    namespace (no abstract unix socket of another run) and its own IPC
    namespace, and no kernel keyring (the seccomp filter below: the runs'
    one uid would share its keyring). Not compensated: the process limit
    bounds the whole sandbox, not each run (a fork bomb in one run can make
    a concurrent run's ``fork`` fail until the bomb is killed). The run's
    process is pid 1 of its pid namespace: a signal it sends itself without
    a handler is ignored, and its CPU limit ends it with SIGKILL rather
    than SIGXCPU. Started by real
    root (without CAP_SYS_ADMIN, or it would be ``namespaces``), the client
    first drops to an unprivileged uid of its own (kuid 0 would own root's
    files and is exempt from ``RLIMIT_NPROC``).
``confined`` (root without CAP_SYS_ADMIN, e.g. a default container)
    no namespace can be created, and without bind mounts a private root
    has to be a copy: at start the server builds one of the Python
    installation (``rootfs``: no /proc, no /usr, no shell) and each worker
    chroots into it (CAP_SYS_CHROOT, checked at start), so a run sees none
    of the host's files (a world-readable copy of the benchmark data
    included) and no process command line; it has a uid of its own (it
    cannot signal the server or another run, and ``RLIMIT_NPROC`` counts
    its processes only), writes only its run directory, has no
    capabilities, a seccomp filter that fails ``socket()`` and
    ``io_uring_setup`` (no network; the ``socketpair`` a program may use
    stays) and SysV IPC and POSIX message queues (no IPC namespace: an
    object made world-accessible would be shared with concurrent runs and
    outlive the run), rlimits, the wall clock and the sweep (which also removes what
    the run's uid left in the host's usual world-writable directories). Not
    protected: the host's pid namespace (a run can ``kill(-1)`` its own
    uid's processes only), and the run directory is on the host's disk (its
    files bounded by ``RLIMIT_FSIZE``, not by a filesystem of its own).
``bare`` (only when asked for)
    the caller's uid and capabilities, the host's files and network, no
    process limit; rlimits, the wall clock and the sweep of orphans only. A
    solution can read the workspace and a rollout's secret.

In every mode but ``bare``, each run has a seccomp filter that fails the
kernel keyring calls (``add_key``, ``request_key``, ``keyctl``) with EACCES,
and every syscall of a foreign ABI (``isolation.run_filter``): a key outlives
the run that added it. What separates concurrent runs and what a later run
can find of an earlier one, per mode: ``isolation.RUN_SEPARATION`` and
``NO_CARRYOVER`` (``glyph sandbox info``).

In every mode, where this process can make a cgroup with the memory
controller (``cgroups``), each run's processes together are capped at
``Limits.run_memory_bytes`` (swap included); at the cap the kernel kills
in that run's cgroup only, the status says ``memory_exceeded`` and the
grader reports a MemoryError. Where there is no writable cgroup
(``userns`` as an unprivileged user; a read-only /sys/fs/cgroup),
protection ``memory_cap`` is off and says so: a run is then bounded by each
process's address-space limit times the process limit (in ``userns``, that
bound covers all runs together; in ``bare``, nothing bounds a run's
processes together).

One run costs one fork of this already-warm interpreter, not an interpreter
start, and that fork (with the confinement) happens ahead of the request:

    server (stdlib pre-imported; one event loop; never runs untrusted code;
    enforces each run's wall clock, kills what a run leaves behind, removes
    its directory, reports its exit status)
      └─ worker (a per-run uid where the mode has one, no capabilities,
         rlimits, empty private cwd, minimal environment; then runs
         ``worker.main``; in ``namespaces`` and ``userns`` forked as pid 1
         of a pid namespace of its own: ``isolation.PidNamespaceForks``)

The client passes the run's pipes with the request (SCM_RIGHTS), so output
never flows through this process. What the server reports is trusted: no
untrusted code ever ran in it, and no run can signal, trace or write to it.

This module is the event loop and its bookkeeping; beside it, imported by
file name: ``isolation`` (the protections of each mode, applied at
start, and the kernel primitives), ``rootfs`` (``confined``'s copied root),
``cgroups`` (the per-run memory cap), ``confine`` (a pre-forked worker's
confinement), ``worker`` (what a run executes) and ``wire`` (its messages).
Stdlib only.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import secrets
import select
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import confine  # noqa: E402
import isolation  # noqa: E402
import rootfs  # noqa: E402
import wire  # noqa: E402
import worker  # noqa: E402

# Imported once here so that every run finds them warm in its forked memory. Not threading (nor queue,
# which imports it): its hook at each fork (threading._after_fork) cost every run about 100 copy-on-write
# faults, and no MBPP solution imports either.
PRELOAD = (
    "abc array ast base64 binascii bisect builtins calendar cmath collections "
    "collections.abc contextlib copy csv dataclasses datetime decimal difflib "
    "enum fractions functools hashlib heapq inspect io itertools json keyword "
    "linecache locale math numbers operator pprint random re statistics "
    "string struct textwrap time traceback types typing unicodedata "
    "uuid warnings weakref zlib"
).split()

WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")  # the usual ones (FHS)


class ActiveRun:
    __slots__ = ("pid", "pidfd", "ctl", "uid", "rundir", "t0", "deadline", "wall_timeout", "killed")

    def __init__(self, pid, pidfd, ctl, uid, rundir, t0, deadline) -> None:
        self.pid, self.pidfd, self.ctl, self.uid = pid, pidfd, ctl, uid
        self.rundir, self.t0, self.deadline = rundir, t0, deadline
        self.wall_timeout = self.killed = False


class IdleWorker:
    """A forked worker waiting for its job. ``ready``: it is in its run's
    cgroup (where there is one), so the server may write the run's cap there;
    it confines itself meanwhile and takes the job only once confined."""

    __slots__ = ("pid", "pidfd", "sock", "uid", "rundir", "ready")

    def __init__(self, pid, pidfd, sock, uid, rundir, ready) -> None:
        self.pid, self.pidfd, self.sock, self.uid, self.rundir = pid, pidfd, sock, uid, rundir
        self.ready = ready


def main() -> None:
    ctl_fd = int(sys.argv[1])
    opts = json.loads(sys.argv[2])
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    prot, runs_dir, cgroups = isolation.isolate(opts)
    if os.getpid() != 1:
        isolation.prctl(isolation.PR_SET_CHILD_SUBREAPER, 1)  # orphans of runs come back to us, not to init
    sock = socket.socket(fileno=ctl_fd)
    hello = {"ev": "hello", "pid": os.getpid(), "protections": prot}
    if cgroups is not None:  # the client removes it if we die
        hello["cgroup"] = cgroups.path
    if os.getpid() != 1:  # confined, bare: on the host's /tmp, so the client removes it after killing us
        hello["runs_dir"] = opts.get("chroot") or runs_dir  # confined: the copied root, the runs' inside
    sock.send(wire.dumps(hello))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.collect()
    gc.freeze()  # forked workers' collections then leave the server's objects (and their pages) alone
    Server(sock, prot, runs_dir, opts, cgroups).loop()


class Server:
    """One event loop: new requests on the control socket; per run, its
    pidfd (exit), its control socket (the client asks for a kill or went
    away) and its deadline; per idle worker, its pidfd and (until it is in
    its cgroup) its job socket. Between requests it keeps ``pool`` workers
    forked and confined ahead of time, so a request waits for neither the
    fork nor the confinement. It never runs untrusted code.

    Nothing on the loop waits for the kernel's cgroup migration: each new
    worker moves itself into its run's cgroup (``confine.enter_cgroup``),
    which after an idle spell waits an RCU grace period (measured: 5-20 ms
    after 0.2 s idle, 0.25 ms back to back) while holding the kernel's
    cgroup mutex, which the server's own cgroup removal needs too. So the
    pool is refilled while a run is active only when it holds fewer idle
    workers than there are active runs (several clients at once); one
    client's runs, back to back or sparse, find the pool refilled after the
    previous run ended, and no run's end waits on a migration."""

    def __init__(self, sock: socket.socket, prot: dict, runs_dir: str, opts: dict, cgroups) -> None:
        self.sock = sock
        self.mode = opts["mode"]
        self.uid_separation = prot["uid_separation"]["on"]
        self.private_mounts = self.mode in ("namespaces", "userns")  # runs' directories: tmpfs mounts
        self.chroot = opts.get("chroot")  # confined: the copied root each worker chroots into
        prog = isolation.run_filter(self.mode) if prot["syscall_filter"]["on"] else None
        self.seccomp = isolation.seccomp_program(prog) if prog is not None else None
        self.runs_dir = runs_dir
        self.pool = int(opts["pool"])
        self.run_disk = f"size={int(opts['run_bytes'])},nr_inodes={int(opts['run_inodes'])},mode=700"
        self.poller = select.poll()
        self.poller.register(sock.fileno(), select.POLLIN)
        self.by_fd: dict[int, ActiveRun | IdleWorker] = {}
        self.runs: dict[int, ActiveRun] = {}  # by pid
        self.idle: dict[int, IdleWorker] = {}  # by pid, oldest first
        self.seq = 0
        self.uid_base = isolation.UID_BASE + secrets.randbelow(isolation.UID_BLOCKS) * isolation.UID_SPAN
        self.cgroups = cgroups  # the per-run memory cap, where a cgroup could be made (cgroups.Cgroups)
        self.cg_of: dict[int, str] = {}  # worker pid -> its cgroup
        self.oom_fd: dict[int, int] = {}  # run pid -> eventfd signalled when it runs out of memory (v1)
        self.oom_of: dict[int, ActiveRun] = {}  # that eventfd -> the run
        self.oom_hit: set[int] = set()  # pids of runs that went over their memory cap
        self.dropped: set[int] = set()  # fds unwatched while the loop handles one poll's events
        self.cap_last = isolation.cap_last_cap()
        # namespaces, userns: each worker forked as pid 1 of a pid namespace of its own
        self.pid_forks = isolation.PidNamespaceForks() if self.mode in confine.PID_NS_PER_RUN else None
        confine.server_setup(self.mode, self.cap_last)  # after start-up, before the first fork

    def loop(self) -> None:
        while True:
            now = time.monotonic()
            timeout = min((r.deadline for r in self.runs.values()), default=now + 3600) - now
            refill = self._refill_wanted()
            if refill:
                timeout = 0
            events = self.poller.poll(max(timeout, 0) * 1000)
            self.dropped.clear()
            for fd, _ in events:
                if fd in self.dropped:  # unwatched by an earlier event of this batch: its number may be reused
                    continue
                if fd == self.sock.fileno():
                    self.accept()
                    continue
                if fd in self.oom_of:
                    self._out_of_memory(fd)
                    continue
                item = self.by_fd.get(fd)
                if isinstance(item, IdleWorker):
                    if fd == item.pidfd:
                        self._forget_idle(item)
                    else:
                        self._ready(item)
                elif item is not None and fd == item.pidfd:
                    self.finish(item)
                elif item is not None:
                    try:
                        data = os.read(fd, 64)
                    except OSError:
                        data = b""
                    if not data or b"k" in data:
                        item.killed = True
                        self._unwatch(fd)
                        self._kill_run(item.pid)
            now = time.monotonic()
            for run in list(self.runs.values()):
                if now >= run.deadline and not run.wall_timeout:
                    run.wall_timeout = True
                    self._kill_run(run.pid)
            if not events and refill:
                self.prefork()

    def _refill_wanted(self) -> bool:
        """Fork the next idle worker now? Up to ``pool``; while runs are
        active, only when there are fewer idle workers than active runs (the
        class docstring: a run's end then never waits on a migration)."""
        return len(self.idle) < self.pool and (not self.runs or len(self.idle) < len(self.runs))

    def prefork(self) -> IdleWorker:
        self.seq += 1
        uid = self.uid_base + self.seq % isolation.UID_SPAN if self.uid_separation else None
        rundir = f"{self.runs_dir}/run-{self.seq}"
        os.mkdir(rundir, 0o700)
        if self.private_mounts:  # a size-capped filesystem of its own, dropped whole afterwards
            owner = f",uid={uid},gid={uid}" if uid is not None else ""
            isolation.mount("tmpfs", rundir, "tmpfs", isolation.MS_NOSUID | isolation.MS_NODEV,
                            self.run_disk + owner)
        elif uid is not None:
            os.chown(rundir, uid, uid)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cgroup = f"run-{self.seq}" if self.cgroups is not None else None
        if cgroup is not None:
            self.cgroups.children.add(cgroup)  # the worker makes it; removed with the rest at close
        pid = self.pid_forks.fork() if self.pid_forks is not None else os.fork()
        if pid == 0:
            try:
                ours.close()
                confine.enter_cgroup(self.cgroups, cgroup, theirs)
                confine.idle_worker(theirs.fileno(), uid, rundir, self.mode, self.cap_last, self.seccomp,
                                    self.chroot, worker.main)
            finally:
                os._exit(120)
        theirs.close()
        idle = IdleWorker(pid, os.pidfd_open(pid), ours, uid, rundir, ready=cgroup is None)
        if cgroup is not None:
            self.cg_of[pid] = cgroup
            self.by_fd[ours.fileno()] = idle
            self.poller.register(ours.fileno(), select.POLLIN)
        self.idle[pid] = idle
        self.by_fd[idle.pidfd] = idle
        self.poller.register(idle.pidfd, select.POLLIN)
        return idle

    def _ready(self, idle: IdleWorker, wait: bool = False) -> bool:
        """Read a new worker's word on its cgroup (``confine.enter_cgroup``):
        ``wait``: block until it comes. True once it is in there; False if it
        died first (its pidfd then says so)."""
        if idle.ready:
            return True
        try:
            data = idle.sock.recv(16) if wait else idle.sock.recv(16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if data == b"e":  # checked at start: something removed our cgroup
            self._kill(idle.pid)
            raise RuntimeError("a worker could not enter its cgroup: the server's cgroup is gone")
        self._unwatch(idle.sock.fileno())
        idle.ready = data == b"r"
        return idle.ready

    def _unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (registered or not) and skip what is left of this poll's events for it:
        once it is closed, its number may be reused by a descriptor opened later in the same batch."""
        self.by_fd.pop(fd, None)
        try:
            self.poller.unregister(fd)
        except KeyError:  # not registered (any more)
            pass
        self.dropped.add(fd)

    def _forget_idle(self, idle: IdleWorker) -> None:
        """An idle worker died before getting a job (killed from outside)."""
        self.idle.pop(idle.pid, None)
        self._unwatch(idle.pidfd)
        os.close(idle.pidfd)
        if not idle.ready:
            self._unwatch(idle.sock.fileno())
        idle.sock.close()
        os.waitpid(idle.pid, 0)
        self.sweep(idle.uid)
        self._end_cgroup(idle.pid)
        self._remove_rundir(idle.rundir)
        self._sweep_files(idle.uid)

    def accept(self) -> None:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, 8)
        except InterruptedError:
            return
        if not msg:  # the client is gone; as pid 1, exiting kills everything left
            self.shutdown()
        limits = json.loads(msg)["limits"]
        if self.mode == "userns":  # one uid for all: the process limit is this many more than exist now
            procs = sum(n.isdigit() for n in os.listdir("/proc"))
            msg = json.dumps({"limits": limits, "procs": procs}).encode()
        while True:
            idle = self._take_idle()
            if idle is None:
                continue  # it died before it was in its cgroup: forgotten, take the next
            over = not self._cap_cgroup(idle.pid, limits)
            if over:  # the worker already uses more than the run's cap: the run ends at once, over it
                self._kill(idle.pid)
                break
            try:
                socket.send_fds(idle.sock, [msg], fds)
                break
            except OSError:
                self.idle[idle.pid] = idle
                self._forget_idle(idle)
        idle.sock.close()
        for fd in fds[:4] + fds[5:]:
            os.close(fd)
        t0 = time.monotonic()
        run = ActiveRun(idle.pid, idle.pidfd, fds[4], idle.uid, idle.rundir, t0, t0 + float(limits["wall_s"]))
        self.runs[run.pid] = run
        self.by_fd[run.pidfd] = run
        self.by_fd[run.ctl] = run
        self.poller.register(run.ctl, select.POLLIN)
        self._watch_cgroup(run, over)

    def _take_idle(self) -> IdleWorker | None:
        """The oldest idle worker already in its cgroup; else the oldest one
        (forked now if there is none), once it is in there; None if it died
        first."""
        idle = next((w for w in self.idle.values() if w.ready), None)
        if idle is None:
            idle = next(iter(self.idle.values()), None) or self.prefork()
            if not self._ready(idle, wait=True):
                self._forget_idle(idle)
                return None
        del self.idle[idle.pid]
        return idle

    def shutdown(self) -> None:
        """Exit. As pid 1 of a namespace, exiting kills everything left and
        drops every mount. Otherwise (confined, bare) kill every run and
        idle worker, sweep what they left, and remove the runs' directory
        from the host's /tmp first."""
        if os.getpid() != 1:
            workers = list(self.runs.values()) + list(self.idle.values())
            for item in workers:
                self._kill(item.pid)
            for item in workers:
                os.waitpid(item.pid, 0)
            self.runs.clear()
            self.idle.clear()
            for item in workers:
                self.sweep(item.uid)
                self._sweep_files(item.uid)
            rootfs.remove_tree(self.chroot or self.runs_dir)
        elif self.cgroups is not None:  # the kernel kills the rest only once we are gone: too late to rmdir
            # Killed again on every pass: a fork bomb's child forked after one kill(-1) survives it, and
            # waiting for it alone would last until its own CPU limit ends it (seconds after the client left).
            while True:
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    time.sleep(0.002)
        if self.cgroups is not None:
            self.cgroups.close()
        os._exit(0)

    def finish(self, run: ActiveRun) -> None:
        _, status, usage = os.wait4(run.pid, 0)
        wall = time.monotonic() - run.t0
        for fd in (run.pidfd, run.ctl):
            self._unwatch(fd)
        os.close(run.pidfd)
        del self.runs[run.pid]
        swept = self.sweep(run.uid)
        memory_exceeded = self._end_cgroup(run.pid)
        self._remove_rundir(run.rundir)
        self._sweep_files(run.uid)
        report = {
            "ev": "status",
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "wall_timeout": run.wall_timeout,
            "killed": run.killed,
            "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "maxrss_kb": usage.ru_maxrss,
            "swept": swept,
            "memory_exceeded": memory_exceeded,
        }
        try:
            os.write(run.ctl, wire.dumps(report))
        except OSError:
            pass
        os.close(run.ctl)

    # -- the per-run memory cap
    def _cap_cgroup(self, pid: int, limits: dict) -> bool:
        """Write the run's cap; False where the worker already uses more."""
        name = self.cg_of.get(pid)
        if name is None:
            return True
        try:
            self.cgroups.cap(name, int(limits.get("run_memory_bytes") or 1 << 30))
        except OSError:
            return False
        return True

    def _watch_cgroup(self, run: ActiveRun, over: bool) -> None:
        if over:
            self.oom_hit.add(run.pid)
        name = self.cg_of.get(run.pid)
        efd = self.cgroups.watch(name) if name is not None and not over else None
        if efd is not None:
            self.oom_fd[run.pid] = efd
            self.oom_of[efd] = run
            self.poller.register(efd, select.POLLIN)

    def _out_of_memory(self, efd: int) -> None:
        """v1: the kernel OOM-killed a process of the run (one, not all):
        end the run, as v2's memory.oom.group would."""
        run = self.oom_of[efd]
        self.poller.unregister(efd)  # once is enough; closed when the run is finished
        self.oom_hit.add(run.pid)
        self._kill_run(run.pid)

    def _end_cgroup(self, pid: int) -> bool:
        """After the sweep: whether the run went over its cap (the kernel
        OOM-killed one of its processes); then remove its cgroup (and any
        an earlier run could not leave yet)."""
        efd = self.oom_fd.pop(pid, None)
        if efd is not None:
            self.oom_of.pop(efd, None)
            self._unwatch(efd)
            os.close(efd)
        over = pid in self.oom_hit
        self.oom_hit.discard(pid)
        name = self.cg_of.pop(pid, None)
        if name is None:
            return over
        self.cgroups.kill(name)  # v2: whatever the sweep could not see
        over = over or self.cgroups.oom_kills(name) > 0
        self.cgroups.remove(name)
        for stale in self.cgroups.children - set(self.cg_of.values()):
            self.cgroups.remove(stale, tries=1)
        return over

    def _remove_rundir(self, path: str) -> str | None:
        if self.private_mounts:
            if isolation.libc.umount2(path.encode(), isolation.MNT_DETACH) != 0:
                return f"could not unmount {path}: {os.strerror(ctypes.get_errno())}"
            os.rmdir(path)
            return None
        return rootfs.remove_tree(path)

    def _sweep_files(self, uid: int | None) -> str | None:
        """``confined``: remove what the run's uid left in the host's
        world-writable directories (its own subdirectories included)."""
        if self.mode != "confined" or uid is None:
            return None
        errors = []
        for top in WORLD_WRITABLE:
            try:
                entries = list(os.scandir(top))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                except OSError:
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                error = rootfs.remove_tree(entry.path) if is_dir else rootfs.unlink(entry.path)
                if error:
                    errors.append(error)
        return "; ".join(errors) or None

    def _kill_run(self, pid: int) -> None:
        """Kill a run: its worker (in ``namespaces`` and ``userns``, pid 1 of
        the run's pid namespace, whose death kills every process in it; the
        sweep finds the rest elsewhere)."""
        self._kill(pid)

    @staticmethod
    def _kill(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def sweep(self, uid: int | None) -> int:
        """Kill what a finished run left behind; return how many processes.

        With uid separation, that is every live process of the run's uid.
        Always, it is also every orphan (a child of this server that is not a
        worker: runs' leftovers are re-parented here) and its descendants. A
        process with SIGKILL pending cannot complete a fork, so repeated
        sweeps converge; zombies are reaped."""
        me = os.getpid()
        if self._only_workers_below(me):
            return 0
        killed: set[int] = set()
        for _ in range(10_000):
            targets = self._leftovers(me, uid)
            if not targets:
                return len(killed)
            for pid in targets:
                self._kill(pid)
                killed.add(pid)
            time.sleep(0.0005)
        raise RuntimeError("could not kill the processes a run left behind")

    def _only_workers_below(self, me: int) -> bool:
        """The fast path: every process a run starts descends from this
        server (re-parenting goes to the nearest living subreaper, and this
        server is pid 1 or a subreaper), so if each child of ours is a known
        worker, nothing was left behind. False when unsure."""
        try:  # os.read, not open(): no file object on each run's way out
            fd = os.open(f"/proc/{me}/task/{me}/children", os.O_RDONLY)
        except OSError:  # a kernel without CONFIG_PROC_CHILDREN: do the full scan
            return False
        try:
            data = b"".join(iter(lambda: os.read(fd, 1 << 16), b""))
        finally:
            os.close(fd)
        return all(int(p) in self.runs or int(p) in self.idle for p in data.split())

    def _leftovers(self, me: int, uid: int | None) -> list[int]:
        children: dict[int, list[int]] = {}
        found: set[int] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                st_uid = os.stat(f"/proc/{name}").st_uid
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            ppid = int(fields[1])
            if fields[0] == b"Z":
                if ppid == me and pid not in self.runs and pid not in self.idle:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
                continue
            children.setdefault(ppid, []).append(pid)
            if uid is not None and st_uid == uid:
                found.add(pid)
        todo = [p for p in children.get(me, ()) if p not in self.runs and p not in self.idle]
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.add(pid)
            todo.extend(children.get(pid, ()))
        return sorted(found)


if __name__ == "__main__":
    main()
