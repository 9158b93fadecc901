"""The per-run memory cap (protection ``memory_cap``): a memory cgroup per run.

Where this process can make a cgroup with the memory controller (cgroup v2
with ``memory`` in its cgroup's subtree_control, or the v1 memory
hierarchy, found through /proc/self/cgroup and /proc/self/mountinfo:
nothing hard-coded), the server makes one of its own
(``glyph-<pid>-<random>``) under its cgroup; each new worker makes its
child and moves itself there before it does anything else, the server
writes the run's cap when the job comes, and removes the child once the
run is swept: a run's
processes together get at most ``Limits.run_memory_bytes``, swap included.
At the cap the kernel OOM-kills in that cgroup only (v2: the whole run,
memory.oom.group; v1: one process, and the server, told by an eventfd,
kills the rest). Where none can be made, ``memory_cap`` says why and what
bounds a run instead. Stdlib only.
"""

from __future__ import annotations

import errno
import os
import secrets
import time

# Upstream contracts: Linux Documentation/admin-guide/cgroup-v2.rst ("memory.max", "memory.swap.max",
# "memory.oom.group", "memory.events" oom_kill, "cgroup.kill", "cgroup.subtree_control" and the no
# internal process constraint) and Documentation/admin-guide/cgroup-v1/memory.rst ("memory.limit_in_bytes",
# "memory.memsw.limit_in_bytes", section "OOM Control": memory.oom_control and its eventfd notification
# through cgroup.event_control); /proc/self/cgroup and /proc/self/mountinfo: proc(5), cgroups(7).


def _unescape_mountinfo(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as \\ooo (proc(5))."""
    import re
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _own_memory_cgroups() -> tuple[list[tuple[int, str]], list[str]]:
    """Where this process's own cgroup is in the cgroup v2 hierarchy and in
    the v1 memory hierarchy, as paths in this mount namespace (from
    /proc/self/cgroup and /proc/self/mountinfo: nothing hard-coded):
    ``[(version, path)]``, v2 first; and why a hierarchy is not usable."""
    with open("/proc/self/cgroup") as f:
        own = f.read().splitlines()
    with open("/proc/self/mountinfo") as f:
        mounts = f.read().splitlines()
    paths: dict[int, str] = {}
    for line in own:
        hid, ctrls, path = line.split(":", 2)
        if hid == "0" and ctrls == "":
            paths.setdefault(2, path)
        elif "memory" in ctrls.split(","):
            paths.setdefault(1, path)
    found, why = [], []
    for version in (2, 1):
        path = paths.get(version)
        if path is None:
            continue
        for line in mounts:
            left, sep, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if not sep or len(fields) < 5 or len(tail) < 3:
                continue
            if tail[0] != ("cgroup2" if version == 2 else "cgroup"):
                continue
            if version == 1 and "memory" not in tail[2].split(","):
                continue
            root, point = _unescape_mountinfo(fields[3]), _unescape_mountinfo(fields[4])
            if root == "/" or path == root or path.startswith(root + "/"):
                rel = path if root == "/" else path[len(root):]
                found.append((version, os.path.normpath(point + "/" + rel)))
                break
        else:
            why.append(f"cgroup v{version}: this process's cgroup is not mounted here")
    return found, why


class Cgroups:
    """The server's own memory cgroup (``glyph-<pid>-<random>``, made at
    start under this process's cgroup; the server itself stays outside it)
    and one child per worker, named after the worker's run directory. Each
    pre-forked worker makes its child and moves itself there before it
    does anything else (``enter``); the server writes the run's cap when
    the job comes. Both
    directories are opened at start (before any chroot): every later access
    is relative to those fds."""

    def __init__(self, version: int, host: str) -> None:
        self.version = version
        self.name = f"glyph-{os.getpid()}-{secrets.token_hex(4)}"
        self.path = f"{host}/{self.name}"
        self.children: set[str] = set()
        if version == 2:
            with open(f"{host}/cgroup.subtree_control") as f:
                if "memory" not in f.read().split():
                    raise OSError(f"the memory controller is not enabled for the children of {host} "
                                  "(its cgroup.subtree_control)")
        self.up = os.open(host, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.mkdir(self.name, 0o755, dir_fd=self.up)
        except OSError:
            os.close(self.up)
            raise
        self.fd = -1
        try:
            self.fd = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.up)
            if version == 2:
                self._write("cgroup.subtree_control", "+memory")
            self.add("probe")  # what each run will need: a child, a cap, a process moved into it
            try:
                self.cap("probe", 64 << 20)
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(w)
                    os.read(r, 1)
                    os._exit(0)
                os.close(r)
                try:
                    self.join("probe", pid)
                finally:
                    os.close(w)
                    os.waitpid(pid, 0)
            finally:
                self.remove("probe")
        except BaseException:
            self.close()
            raise

    def _write(self, rel: str, value: object) -> None:
        fd = os.open(rel, os.O_WRONLY, dir_fd=self.fd)
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)

    def _read(self, rel: str) -> str:
        fd = os.open(rel, os.O_RDONLY, dir_fd=self.fd)
        try:
            return os.read(fd, 1 << 16).decode()
        finally:
            os.close(fd)

    def add(self, name: str) -> None:
        os.mkdir(name, 0o755, dir_fd=self.fd)
        self.children.add(name)
        if self.version == 2:
            try:  # at the cap the kernel kills every process of the run, not one of them
                self._write(f"{name}/memory.oom.group", 1)
            except FileNotFoundError:  # before Linux 4.19: the server kills the rest
                pass

    def join(self, name: str, pid: int) -> None:
        self._write(f"{name}/cgroup.procs", pid)

    def enter(self, name: str) -> None:
        """In a new worker itself: make its cgroup and move this process
        into it (``confine.enter_cgroup``)."""
        self.add(name)
        self.join(name, os.getpid())

    def cap(self, name: str, nbytes: int) -> None:
        """Memory and swap together at most ``nbytes``. OSError (EBUSY) where
        the cgroup already uses more than that."""
        if self.version == 2:
            self._write(f"{name}/memory.max", nbytes)
            swap = f"{name}/memory.swap.max", 0
        else:
            self._write(f"{name}/memory.limit_in_bytes", nbytes)
            swap = f"{name}/memory.memsw.limit_in_bytes", nbytes  # must not be below the line above
        try:
            self._write(*swap)
        except FileNotFoundError:  # no swap accounting: nothing to bound
            pass

    def watch(self, name: str) -> int | None:
        """v1: an eventfd the kernel signals when the cgroup runs out of
        memory (it OOM-kills one process, not the run; the server then kills
        the rest). v2 needs none: memory.oom.group kills the run whole."""
        if self.version != 1 or not hasattr(os, "eventfd"):
            return None
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            ctl = os.open(f"{name}/memory.oom_control", os.O_RDONLY, dir_fd=self.fd)
            try:
                self._write(f"{name}/cgroup.event_control", f"{efd} {ctl}")
            finally:
                os.close(ctl)
        except OSError:
            os.close(efd)
            return None
        return efd

    def oom_kills(self, name: str) -> int:
        """Processes of the cgroup the kernel OOM-killed (``oom_kill`` of
        memory.events, v2, or memory.oom_control, v1 since Linux 4.13)."""
        try:
            text = self._read(f"{name}/memory.events" if self.version == 2 else f"{name}/memory.oom_control")
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def kill(self, name: str) -> None:
        """v2 since Linux 5.14: kill every process of the cgroup at once."""
        if self.version == 2:
            try:
                self._write(f"{name}/cgroup.kill", 1)
            except OSError:
                pass

    def remove(self, name: str, tries: int = 200) -> bool:
        """rmdir, retried while processes killed a moment ago still leave it
        (EBUSY); False if it could not be removed yet."""
        for i in range(tries):
            try:
                os.rmdir(name, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno == errno.EBUSY and i + 1 < tries:
                    time.sleep(0.005)
                    continue
                return False
            self.children.discard(name)
            return True
        return False

    def close(self) -> None:
        """Remove every child left and the server's own cgroup."""
        if self.fd >= 0:
            for name in sorted(self.children):
                self.remove(name)
            os.close(self.fd)
            self.fd = -1
        try:
            os.rmdir(self.name, dir_fd=self.up)
        except OSError:
            pass
        os.close(self.up)


def memory_cgroup() -> tuple[Cgroups | None, str]:
    """The server's own memory cgroup where one can be made here; else
    None and why not."""
    try:
        found, why = _own_memory_cgroups()
    except (OSError, ValueError) as exc:
        return None, f"cannot read /proc/self/cgroup or /proc/self/mountinfo: {exc}"
    for version, host in found:
        try:
            return Cgroups(version, host), ""
        except OSError as exc:
            why.append(f"cgroup v{version} at {host}: {exc.strerror or exc}")
    return None, "; ".join(why) or "no cgroup hierarchy with the memory controller"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB"


def memory_cap(mode: str, cgroups: Cgroups | None, why: str, opts: dict) -> tuple[bool, str]:
    """``memory_cap`` (on, how): on with the cgroup that caps each run; off
    with why, and what bounds a run's memory instead."""
    defaults = opts.get("defaults") or {}
    run_cap, mem, nproc = (int(defaults.get(k, 0)) for k in ("run_memory_bytes", "memory_bytes", "nproc"))
    if cgroups is not None:
        oom = ("the kernel kills every process of the run (memory.oom.group)" if cgroups.version == 2 else
               "the kernel kills one of its processes and the server the rest")
        return True, (f"cgroup v{cgroups.version} memory controller ({cgroups.path}, a child per run): a "
                      f"run's processes together get Limits.run_memory_bytes ({_gib(run_cap)} by default), "
                      f"swap included; at the cap {oom}, reported as a memory error")
    if mode == "bare":
        bound = "bare has no process limit: nothing bounds a run's processes together"
    else:
        bound = (f"a run is bounded by the address-space limit of each process times the process limit: "
                 f"{_gib(mem)} x {nproc} = {_gib(mem * nproc)} with the default Limits")
        if mode == "userns":
            bound += (" (the process limit bounds the whole sandbox, so that is the bound of all runs "
                      "together)")
    return False, f"no writable cgroup with the memory controller ({why}); {bound}"
