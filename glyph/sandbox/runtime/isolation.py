"""Isolation: the protections of a mode, and the kernel primitives they are made of.

``isolate`` runs once, at the server's start: it applies to the server
everything its mode promises (what each mode protects and does not:
``server``) or raises ``SystemExit`` naming what is missing, so a mode never
starts with less. It reports every protection on or off, with how (or why
not) and what off means (``IF_OFF``; the names are a stable contract:
rollouts record them). The primitives (prctl, capabilities, seccomp,
unshare, mount) raise ``OSError`` when the kernel refuses: a caller never
goes on with less than it asked for. Stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import socket
import sys

if __package__:  # imported as glyph.sandbox.runtime.isolation
    from . import cgroups, rootfs
else:  # a sibling of server.py, which is started as a script
    import cgroups
    import rootfs

UID_BASE = 1_610_612_736  # 0x60000000: far above any uid a system hands out
UID_SPAN = 65536  # uids one server cycles through
UID_BLOCKS = 32768  # each server picks a random block (uids stay below 0xE0000000), so servers alive at once rarely share a uid

MODES = ("namespaces", "userns", "confined", "bare")

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# linux/securebits.h: SECBIT_NOROOT and SECBIT_NO_CAP_AMBIENT_RAISE set, SECBIT_NO_SETUID_FIXUP and
# SECBIT_KEEP_CAPS left off, all four locked: uid 0 of a user namespace gains no capability by exec.
SECURE_NOROOT_ALL = 0x01 | 0x02 | 0x08 | 0x20 | 0x40 | 0x80
CAP_SETPCAP = 8
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
CAP_SYS_CHROOT = 18

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p,) * 3 + (ctypes.c_ulong, ctypes.c_char_p)
libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)

# What each protection means, and what it means when it is off (``glyph sandbox info``; the
# names are a stable contract: rollouts record them).
IF_OFF = {
    "uid_separation": "runs share one uid: where no other protection covers it, a run can signal or read "
                      "the processes and files of a concurrent run",
    "mount_isolation": "the run sees the host's files: every file its uid can read (the workspace, the "
                       "benchmark data, a rollout's secret) and every directory its uid can write",
    "network_isolation": "the run can open connections: to the internet and to services on the host's "
                         "loopback, the test service included",
    "pid_namespace": "the run sees the host's processes and their command lines, and can signal those of "
                     "its own uid",
    "rlimits": "no bound on the run's memory, CPU time, processes, file size or open files",
    "wall_clock": "a run that sleeps holds its grading forever",
    "sweep": "processes a run leaves behind keep running after it is graded",
    "no_capabilities": "the run holds capabilities: it could undo the other protections",
    "minimal_environment": "the run inherits the caller's environment (API keys included)",
    "syscall_filter": "no seccomp filter: a run can use the kernel keyrings (a key outlives the run, for "
                      "the next run of its uid to find, and is shared with the concurrent runs of its uid); "
                      "in confined, also SysV IPC objects and sockets",
    "run_separation": "concurrent runs can talk to each other (an abstract unix socket, a SysV IPC object, a "
                      "keyring, a shared file): copies of one solution graded at once can pool what each "
                      "learns of the tests and answer together",
    "no_carryover": "something a run leaves behind (a key in a kernel keyring, an IPC object, a file) is "
                    "there for a later run to read: a solution graded twice can pass from what its first "
                    "grading left",
    "memory_cap": "a run's processes together have no memory cap: each process is bounded by its "
                  "address space limit only, so a run can take that times the process limit and push the "
                  "machine (the server and concurrent runs included) out of memory",
}


# What separates concurrent runs, per mode, and what does not (``glyph sandbox info`` prints all of it).
RUN_SEPARATION = {
    "namespaces": "per run: a uid (no signal, no trace, no file of another run), a pid namespace (no signal "
                  "or kill(pid, 0) probe of another run's processes; its pids count from 1), a network "
                  "namespace (no abstract unix socket or port of another run), an IPC namespace (no SysV "
                  "IPC object or POSIX message queue of another), a private tmpfs as the only writable "
                  "place (/tmp and /dev/shm are read-only), no kernel keyring; not separated: the page "
                  "cache, the inode and fork counters and flock() on the files every run reads, CPU load "
                  "and memory pressure (still shared: none carries a verdict)",
    "userns": "per run: a pid namespace (no signal to another run, kill(-1) included, no kill(pid, 0) "
              "probe), a network namespace, an IPC namespace, a mount namespace showing only its own "
              "directory (the only writable place), no kernel keyring (runs share one uid, whose keyring "
              "would be shared); not separated: the process limit (shared), the page cache, the inode and "
              "fork counters and flock() on the files every run reads, CPU load and memory pressure (still "
              "shared: none carries a verdict)",
    "confined": "per run: a uid (no signal, no file of another run: run directories are 0700, /tmp and "
                "/dev/shm of the copied root are root's), no socket() (no abstract unix socket, no port), "
                "no SysV IPC or POSIX message queue, no kernel keyring; not separated: the host's pid "
                "namespace (pid numbers, kill(pid, 0)), the page cache, the inode counter and flock() on "
                "the files every run reads, CPU load and memory pressure (still shared: none carries a "
                "verdict)",
    "bare": "nothing: runs share the caller's uid, files, network, IPC and keyrings",
}
NO_CARRYOVER = {
    "namespaces": "after each run its pid namespace (every process), its tmpfs, network and IPC namespaces "
                  "are dropped whole; no keyring; a new run inherits no fd and a fixed minimal environment",
    "userns": "after each run its pid namespace (every process), its mount view, its network and IPC "
              "namespaces and its tmpfs are dropped whole; no keyring; a new run inherits no fd and a fixed "
              "minimal environment",
    "confined": "after each run its processes are killed, its directory and what its uid left in /tmp, "
                "/var/tmp, /dev/shm and /run/lock removed; no keyring and no IPC object could be made; a "
                "new run inherits no fd and a fixed minimal environment",
    "bare": "what a run leaves in the caller's files, keyrings and IPC stays",
}
NO_VERDICT = ("No namespace separates what runs still share, and each is a store one run can write and a "
              "later or concurrent one read (testkit/redteam/channels.py). None of it carries a verdict, as a "
              "run never has one: it is asked every check of its suite at once, whatever it answers, killed "
              "once it has answered or ended, the same for a pass and a fail, and judged only after it is "
              "gone (glyph.grading); the referee records each check and goes on.")
_SHARED = ("the host's page cache of the files every run reads (a run can set, clear and test a page of "
           "one), the kernel's inode counter (pipes, sockets), flock() and record locks and inotify watches "
           "on those files, CPU load and memory pressure, and the grader's pool of result bytes (a run that "
           "fills it makes a concurrent one that sends more than its 64 KiB reserve fail)")
STILL_SHARED = {
    "namespaces": f"{_SHARED}; the kernel's count of forks (/proc/stat)",
    "userns": f"{_SHARED}; the kernel's count of forks (/proc/stat); the process limit",
    "confined": f"{_SHARED} (its copy of the Python installation is hard-linked to the host's files where it "
                "can be); the host's pid namespace: the pid counter, and kill(pid, 0) finds every process",
    "bare": "everything (and a run can read the tests and the workspace)",
}
"""What two runs still share, per mode (``glyph sandbox info``, with ``NO_VERDICT``: why none of it carries
a verdict; ``testkit.redteam.channels`` measures them, ``tests/test_redteam.py`` attacks over them)."""


def _prot(on: bool, how: str, name: str) -> dict:
    return {"on": bool(on), "how": how, "if_off": IF_OFF[name]}


def prctl(option: int, arg: int, arg2: int = 0) -> None:
    if libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(arg2), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def unshare(flags: int) -> None:
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({flags:#x}): {os.strerror(err)}")


def setns(fd: int, nstype: int) -> None:
    if libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({nstype:#x}): {os.strerror(err)}")


class PidNamespaceForks:
    """Forks, each child pid 1 of a pid namespace of its own, the caller staying in its own:
    ``unshare(CLONE_NEWPID)`` makes the caller's next child the first process of a new namespace,
    and ``setns`` to the caller's own namespace undoes that for the fork after (a second ``unshare``
    would fail: the namespace for children is no longer the caller's). The child needs no reaper
    of its own: its parent's ``wait4`` reads its rusage, and killing it kills its namespace."""

    def __init__(self) -> None:
        self.own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)

    def fork(self) -> int:
        unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            setns(self.own, CLONE_NEWPID)
            raise
        if pid:
            setns(self.own, CLONE_NEWPID)
        return pid


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


# seccomp (linux/seccomp.h, linux/filter.h, linux/audit.h). Per architecture: AUDIT_ARCH, the x32
# syscall bit, and the numbers of the syscalls a filter denies (asm/unistd_64.h;
# asm-generic/unistd.h for aarch64).
_SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, 0x40000000, {
        "socket": 41, "io_uring_setup": 425, "add_key": 248, "request_key": 249, "keyctl": 250,
        "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240}),
    "aarch64": (0xC00000B7, 0, {
        "socket": 198, "io_uring_setup": 425, "add_key": 217, "request_key": 218, "keyctl": 219,
        "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180}),
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000

KEYRING = ("add_key", "request_key", "keyctl")
"""Denied in every isolating mode: the kernel keyrings outlive a run (a key in the user keyring of
the run's uid is there for the next run of that uid) and are shared by the runs of one uid."""
NO_SOCKETS = ("socket", "io_uring_setup")
"""Denied in ``confined``, which has no network namespace (io_uring can open sockets past seccomp)."""
SYSV_IPC = ("shmget", "semget", "msgget", "mq_open")
"""Denied in ``confined``, which has no IPC namespace: an object made with mode 0666 would be
shared with concurrent runs of other uids, and would outlive the run."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def deny_filter(names: tuple[str, ...]) -> list[tuple[int, int, int, int]] | None:
    """A seccomp program that fails the syscalls ``names`` with EACCES, and
    every syscall of a foreign ABI (i386 ``int 0x80``, x32) likewise; None on
    an architecture it does not know."""
    import platform
    arch = _SECCOMP_ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit_arch, x32, numbers = arch
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    deny = SECCOMP_RET_ERRNO | 13  # EACCES
    nrs = [numbers[n] for n in names]
    # Layout: 0 ld arch; 1 jeq arch; 2 ld nr; 3 x32 check; 4.. one jeq per syscall; allow; deny.
    allow_at = 4 + len(nrs)
    deny_at = allow_at + 1
    prog = [(ld, 0, 0, 4), (jeq, 0, deny_at - 2, audit_arch), (ld, 0, 0, 0),
            (jge, deny_at - 4, 0, x32) if x32 else (jeq, 0, 0, 0)]
    for i, nr in enumerate(nrs):
        prog.append((jeq, deny_at - (4 + i) - 1, 0, nr))
    prog += [(ret, 0, 0, SECCOMP_RET_ALLOW), (ret, 0, 0, deny)]
    return prog


def run_filter(mode: str) -> list[tuple[int, int, int, int]] | None:
    """The seccomp program of a run in ``mode`` (None: ``bare``, or an
    architecture without one): the keyring calls in every isolating mode;
    in ``confined``, SysV IPC, POSIX message queues, ``socket()`` and
    io_uring too."""
    return None if mode == "bare" else deny_filter(filtered_calls(mode))


def filtered_calls(mode: str) -> tuple[str, ...]:
    """The syscalls ``run_filter`` denies."""
    if mode == "bare":
        return ()
    return KEYRING + (SYSV_IPC + NO_SOCKETS if mode == "confined" else ())


def seccomp_program(prog: list[tuple[int, int, int, int]]) -> _SockFprog:
    """``prog`` as the kernel takes it: built once by the server, installed
    by each worker (``install_seccomp``), which then allocates nothing."""
    filters = (_SockFilter * len(prog))(*[_SockFilter(*i) for i in prog])
    fprog = _SockFprog(len(prog), filters)
    fprog._keep = filters  # the struct points into this array
    return fprog


def install_seccomp(prog: list[tuple[int, int, int, int]] | _SockFprog) -> None:
    """Needs no_new_privs (set before)."""
    fprog = prog if isinstance(prog, _SockFprog) else seccomp_program(prog)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def cap_last_cap() -> int:
    with open("/proc/sys/kernel/cap_last_cap") as f:
        return int(f.read())


def _effective_caps() -> int:
    """This thread's effective capability set, from capget(2) (not
    /proc/self/status: a ``confined`` worker has no /proc after its chroot)."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capget: {os.strerror(err)}")
    return data[0].effective | data[1].effective << 32


def drop_bounding_set(cap_last: int) -> None:
    """Where this process may (CAP_SETPCAP: root, of the host or of a user
    namespace): empty the bounding set and lock SECBIT_NOROOT, so that no
    later exec, even by uid 0 of a user namespace, gains a capability.
    Called before any uid switch (which would take CAP_SETPCAP away). In
    ``namespaces`` and ``userns`` the server calls it once, after its
    start-up and before its first fork (``confine.server_setup``): its
    effective capabilities stay (the bounding set limits only what an exec
    may gain), and every worker inherits both, which no process can undo
    (a bounding set only shrinks; the securebits are locked)."""
    if _effective_caps() >> CAP_SETPCAP & 1:
        for cap in range(cap_last + 1):
            prctl(PR_CAPBSET_DROP, cap)
        prctl(PR_SET_SECUREBITS, SECURE_NOROOT_ALL)


def drop_capabilities() -> None:
    """Clear the ambient, effective, permitted and inheritable sets; check
    that none is left."""
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL before Linux 4.3: none to clear
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    if _effective_caps():
        raise OSError("capabilities still held after dropping them")


def mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _bind_ro(src: str, dst: str) -> None:
    mount(src, dst, None, MS_BIND | MS_REC)
    nodev = 0 if src.startswith("/dev/") else MS_NODEV
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | nodev)


def _build_root(opts: dict) -> str:
    """A minimal read-only filesystem view: the system's /usr (and the
    merged-/usr links), the Python installation, a few devices, a private
    /proc and a private /tmp that holds the runs' directories (each its own
    tmpfs, mounted by the server). Nothing else of the host is visible: not
    the project, not the data, not the caller's home."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    base = "/tmp"
    mount("tmpfs", base, "tmpfs", MS_NOSUID, "size=16m,mode=755")
    root = base + "/root"
    os.mkdir(root, 0o755)
    mount(root, root, None, MS_BIND)
    binds: list[tuple[str, str]] = []
    for top in ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            os.mkdir(root + top, 0o755)
            binds.append((top, root + top))
    for prefix in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}:
        if not any(prefix == t or prefix.startswith(t + "/") for t, _ in binds):
            os.makedirs(root + prefix, 0o755, exist_ok=True)
            binds.append((prefix, root + prefix))
    os.makedirs(root + "/etc", 0o755)
    for name in ("/etc/ld.so.cache", "/etc/localtime"):
        if os.path.isfile(name):
            open(root + name, "w").close()
            binds.append((name, root + name))
    os.mkdir(root + "/dev", 0o755)
    for dev in ("null", "zero", "full", "random", "urandom"):
        if os.path.exists("/dev/" + dev):
            open(root + "/dev/" + dev, "w").close()
            binds.append(("/dev/" + dev, root + "/dev/" + dev))
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    os.mkdir(root + "/dev/shm", 0o755)
    os.mkdir(root + "/proc", 0o555)
    os.mkdir(root + "/tmp", 0o755)
    for src, dst in binds:
        _bind_ro(src, dst)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    mount(None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    os.chroot(root)
    os.chdir("/")
    return "/tmp"


def isolate(opts: dict) -> tuple[dict, str, cgroups.Cgroups | None]:
    """Apply every protection of ``opts["mode"]``; return (protections, runs
    directory, the server's memory cgroup where one could be made). Raises
    ``SystemExit`` naming what is missing when the mode cannot be had here:
    a mode never starts with less than it promises, and leaves no cgroup
    behind. Each protection is reported on or off, with how (or why not)
    and what off means, for ``glyph sandbox info`` and the rollouts'
    records."""
    mode = opts["mode"]
    if mode not in MODES:
        raise SystemExit(f"unknown sandbox mode {mode!r}")
    memory, no_cgroup = cgroups.memory_cgroup()  # before any chroot: later it is reached through its fds
    try:
        prot, runs_dir = _apply(opts, memory, no_cgroup)
    except BaseException:
        if memory is not None:  # the mode could not be had: leave no cgroup behind
            memory.close()
        raise
    return prot, runs_dir, memory


def _apply(opts: dict, memory: cgroups.Cgroups | None, no_cgroup: str) -> tuple[dict, str]:
    """``isolate``'s work once the mode is known and the memory cgroup made
    (``memory``; where it could not be, ``no_cgroup`` says why)."""
    mode = opts["mode"]
    prot: dict[str, dict] = {}
    namespaced = mode in ("namespaces", "userns")
    runs_dir = None
    if namespaced:
        if os.getpid() != 1:
            raise SystemExit("not pid 1 of a new pid namespace")
        if not _no_network():
            raise SystemExit("the network namespace has interfaces up")
        if os.geteuid() != 0:
            raise SystemExit("not root in the namespace")
        try:
            runs_dir = _build_root(opts)
        except OSError as exc:
            raise SystemExit(f"could not build the private root: {exc}") from None
    seccomp = copy = None
    if mode == "confined":
        _check_confined()
        try:
            top, runs_dir, copy = rootfs.build_copy()
        except OSError as exc:
            raise SystemExit(f"could not build the copied root: {exc}") from None
        try:
            rootfs.probe_copy(top, UID_BASE - 1)
        except BaseException:
            rootfs.remove_tree(top)
            raise
        opts["chroot"] = top
    filt = check_filter(mode) if mode != "bare" else "bare filters nothing, by request"
    seccomp = filt if mode == "confined" else None  # confined's network isolation is the filter
    user = "" if mode == "namespaces" else " of a user namespace (`unshare --user --map-root-user`)"
    prot["uid_separation"] = _prot(
        mode in ("namespaces", "confined"),
        "each run has its own uid: it cannot signal, trace or read the server or another run"
        if mode in ("namespaces", "confined") else
        "one uid is mapped in the user namespace, so runs share the server's uid; compensated: no "
        "capabilities, and per run a mount namespace showing only its own run directory, a pid namespace "
        "with its own /proc, IPC and network namespaces, and no kernel keyring (run_separation); not "
        "compensated: the process limit is shared"
        if mode == "userns" else "runs keep the caller's uid", "uid_separation")
    prot["mount_isolation"] = _prot(
        namespaced or mode == "confined",
        f"root{user} in a private mount namespace; chroot into a read-only view of /usr and the Python "
        "installation; each run's cwd is a size-capped tmpfs of its own, the only place it can write; "
        "/proc with hidepid=2" if namespaced else
        "no mount namespace without CAP_SYS_ADMIN; chroot into a copy of the Python installation (the "
        "interpreter, its shared libraries and standard library; no /usr, no shell), built at server start; "
        "no /proc; each run's cwd is a directory of its own, the only place it can write (its files bounded "
        "by the file size limit, not by a filesystem of its own)"
        + (f"; missing devices (no mknod): {', '.join('/dev/' + d for d in copy['missing_devices'])}"
           if copy["missing_devices"] else "")
        if mode == "confined" else "the run sees and writes what the caller can", "mount_isolation")
    prot["network_isolation"] = _prot(
        namespaced or (mode == "confined" and seccomp is None),
        "unshare --net: no interface but a downed loopback, and each run a network namespace of its own"
        if namespaced else
        "no network namespace (needs CAP_SYS_ADMIN); a seccomp filter fails socket() for every family "
        "(socketpair stays), and io_uring"
        if mode == "confined" and seccomp is None else
        f"no network namespace, and no seccomp filter: {seccomp}" if mode == "confined" else
        "the host's network", "network_isolation")
    prot["pid_namespace"] = _prot(
        namespaced, "unshare --pid: the run sees no process of the host; the server is its pid 1"
        if namespaced else
        "the host's pid namespace; no /proc in the chroot: the run cannot list processes or read their "
        "command lines, and signals only its own uid's" if mode == "confined" else "the host's pid namespace",
        "pid_namespace")
    prot["rlimits"] = _prot(
        True, "address space, CPU time, file size, open files per process; processes per run"
        if mode in ("namespaces", "confined") else
        "address space, CPU time, file size, open files per process; processes: one bound for the "
        "whole sandbox (runs share a uid)" if mode == "userns" else
        "address space, CPU time, file size, open files per process; no process limit (it would count "
        "the caller's own processes)", "rlimits")
    prot["wall_clock"] = _prot(True, "the server kills the run at its deadline", "wall_clock")
    prot["sweep"] = _prot(
        True, "after each run the server kills every orphan re-parented to it (pid 1 or child "
        "subreaper)" + (", every process of the run's uid" if mode in ("namespaces", "confined") else "")
        + (", and removes what the run's uid left in /tmp, /var/tmp, /dev/shm and /run/lock"
           if mode == "confined" else ""), "sweep")
    bare_caps = mode == "bare" and _effective_caps() != 0
    prot["no_capabilities"] = _prot(
        not bare_caps, "the run keeps the caller's capabilities (bare)" if bare_caps else
        "effective, permitted, inheritable and ambient sets emptied, no_new_privs; where the server is root "
        "(of the host or of its user namespace), the bounding set emptied and SECBIT_NOROOT locked too: no "
        "exec gains a capability", "no_capabilities")
    prot["minimal_environment"] = _prot(True, "PATH, HOME, TMPDIR and LANG only", "minimal_environment")
    denied = filtered_calls(mode)
    prot["syscall_filter"] = _prot(
        filt is None, f"seccomp fails {', '.join(denied)} with EACCES, and every syscall of a foreign ABI "
        "(i386, x32)" if filt is None else f"no filter: {filt}", "syscall_filter")
    prot["run_separation"] = _prot(
        mode != "bare" and filt is None, RUN_SEPARATION[mode] if filt is None else
        f"{RUN_SEPARATION[mode]}; but without the seccomp filter ({filt})", "run_separation")
    prot["no_carryover"] = _prot(
        mode != "bare" and filt is None, NO_CARRYOVER[mode] if filt is None else
        f"{NO_CARRYOVER[mode]}; but without the seccomp filter ({filt}) the kernel keyrings carry over",
        "no_carryover")
    prot["memory_cap"] = _prot(*cgroups.memory_cap(mode, memory, no_cgroup, opts), "memory_cap")
    if runs_dir is None:
        import tempfile
        runs_dir = tempfile.mkdtemp(prefix="glyph-runs-")
        os.chmod(runs_dir, 0o755)
    return prot, runs_dir


def check_filter(mode: str) -> str | None:
    """None when the run filter of ``mode`` (``run_filter``) installs and
    holds here (checked in a throwaway child: each denied call fails with
    EACCES, ``socketpair`` still works); else why not."""
    import errno
    import platform
    prog = run_filter(mode)
    if prog is None:
        return f"no filter for the {platform.machine()} architecture"
    numbers = _SECCOMP_ARCHES[platform.machine()][2]
    names = filtered_calls(mode)
    pid = os.fork()
    if pid == 0:
        try:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            install_seccomp(prog)
            for i, name in enumerate(names):  # bad arguments: without the filter, EFAULT or EINVAL
                if libc.syscall(ctypes.c_long(numbers[name]), 0, 0, 0, 0, 0) != -1 or \
                        ctypes.get_errno() != errno.EACCES:
                    os._exit(10 + i)
            a, b = socket.socketpair()
            os._exit(0)
        except BaseException:
            os._exit(4)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 0:
        return None
    what = f"{names[code - 10]}() was not denied" if 10 <= code < 10 + len(names) else f"probe exit {code}"
    return f"the filter did not hold ({what})"


def _check_confined() -> None:
    """``confined`` needs root (to give each run a uid of its own) and
    CAP_SYS_CHROOT (to chroot each run into the copied root)."""
    if os.geteuid() != 0:
        raise SystemExit("needs root (to give each run a uid of its own)")
    if not _effective_caps() >> CAP_SYS_CHROOT & 1:
        raise SystemExit("needs CAP_SYS_CHROOT (to chroot each run into a copy of the Python installation)")


def _no_network() -> bool:
    """True when this network namespace has no interface but the loopback,
    and the loopback is down (so even 127.0.0.1 is unreachable)."""
    import fcntl
    import struct
    if [name for _, name in socket.if_nameindex()] != ["lo"]:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), 0x8913, struct.pack("16sH", b"lo", 0)))[1]
    return not flags & 1  # IFF_UP
