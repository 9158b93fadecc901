"""``confined``'s private root: a copy of what a run's Python needs, built
once per server for each worker to chroot into.

Without CAP_SYS_ADMIN there are no bind mounts, so a private root has to be
a copy. ``build_copy`` makes it in a fresh private directory (root's, 0755):
the interpreter, its ELF loader, the shared libraries it and every extension
module map, the standard library without its tests, site-packages and GUI,
/etc/ld.so.cache and /etc/localtime, a few devices where mknod works, an
empty /tmp holding the runs' directories; no /proc, no /usr, no shell. Every
file is at its host path (lazy imports read those), hard-linked where it
can be, else copied (about 0.2 s hard-linked, under 1 s copied), and
world-readable, so a Python installed under root's home serves too.
``probe_copy`` checks, before any run, that an unprivileged uid chrooted
there can read the standard library. The server removes the copy when it
exits, the client when the server died.

Also the removal of files the server uses (``remove_tree``, ``unlink``):
each returns None once the path is gone, else a message saying what is
left. Stdlib only.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

COPY_SKIP = {"site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "tkinter",
             "turtledemo", "ensurepip"}
DEVICES = ("null", "zero", "full", "random", "urandom")


def _elf_interpreter(path: str) -> str | None:
    """The PT_INTERP of an ELF64 little-endian executable (the loader an
    exec of it needs, e.g. /lib64/ld-linux-x86-64.so.2); None otherwise."""
    import struct
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF" or head[4:6] != b"\x02\x01":
            return None
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        for i in range(phnum):
            p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
            if p_type == 3:  # PT_INTERP
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode()
    return None


def _mapped_files(dynload: list[str]) -> list[str]:
    """The files a throwaway child of this process has mapped (the
    interpreter, its shared libraries, the extension modules the server
    imported) after importing every extension module of ``dynload``, so
    that a run can import those the server did not, with their libraries."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            signal.alarm(20)
            for top in dynload:
                for name in sorted(os.listdir(top)):
                    if name.endswith(".so"):
                        try:
                            __import__(name.split(".")[0])
                        except BaseException:
                            pass
            with open("/proc/self/maps") as f:
                data = f.read().encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read().decode()
    os.waitpid(pid, 0)
    paths = set()
    for line in data.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/") and os.path.isfile(fields[5]):
            paths.add(fields[5])
    return sorted(paths)


class _Copier:
    """Builds the copy under ``top``: directories root's and 0755 (so a run
    reads a Python installed under a home other uids cannot enter), files
    hard-linked where they are world-readable and writable only by their
    owner and on the same filesystem, else copied world-readable."""

    def __init__(self, top: str) -> None:
        self.top = top
        self.linked = self.copied = self.size = 0
        self.no_link: set[int] = set()  # st_dev of filesystems other than the copy's

    def place(self, path: str, depth: int = 0) -> str:
        """Create the directories and symlinks leading to host ``path`` in
        the copy; return the real host path it resolves to."""
        parts = [p for p in path.split("/") if p]
        cur = ""
        for i, part in enumerate(parts):
            cur += "/" + part
            dst = self.top + cur
            if os.path.islink(cur):
                link = os.readlink(cur)
                if not os.path.lexists(dst):
                    os.symlink(link, dst)
                if depth > 40:
                    raise OSError(f"too many symlinks resolving {path}")
                return self.place(os.path.normpath(os.path.join(os.path.dirname(cur), link, *parts[i + 1:])),
                                  depth + 1)
            if i < len(parts) - 1 and not os.path.lexists(dst):
                os.mkdir(dst)
                os.chmod(dst, 0o755)
        return cur

    def file(self, path: str) -> None:
        """Host file ``path`` (symlinks along it included) into the copy."""
        real = self.place(path)
        if os.path.isdir(real):
            return self.tree(real)
        dst = self.top + real
        if os.path.lexists(dst):
            return
        st = os.stat(real)
        self.size += st.st_size
        if st.st_mode & 0o004 and not st.st_mode & 0o022 and st.st_dev not in self.no_link:
            try:
                os.link(real, dst)
                self.linked += 1
                return
            except OSError as exc:  # another filesystem, or protected_hardlinks
                if exc.errno == 18:  # EXDEV: no file of that filesystem will link
                    self.no_link.add(st.st_dev)
        shutil.copyfile(real, dst)
        os.chmod(dst, 0o755 if st.st_mode & 0o111 else 0o644)
        self.copied += 1

    def tree(self, path: str) -> None:
        """A directory tree, less ``COPY_SKIP`` and config-* (the static
        libpython and its Makefile)."""
        real = self.place(path)
        dst = self.top + real
        if not os.path.lexists(dst):
            os.mkdir(dst)
            os.chmod(dst, 0o755)
        for root, dirs, files in os.walk(real):
            dirs[:] = [d for d in dirs if d not in COPY_SKIP and not d.startswith("config-")]
            for name in list(dirs) + files:
                src = os.path.join(root, name)
                if os.path.islink(src):
                    if not os.path.lexists(self.top + src):
                        os.symlink(os.readlink(src), self.top + src)
                    if name in dirs:
                        dirs.remove(name)
                elif name in dirs:
                    os.mkdir(self.top + src)
                    os.chmod(self.top + src, 0o755)
                else:
                    self.file(src)


def build_copy() -> tuple[str, str, dict]:
    """``confined``: build the root each worker chroots into, in a fresh
    private directory (root's, 0755): the interpreter (``sys.executable``
    and its real path), its ELF loader, every shared library a child of
    this process maps after importing every extension module, the standard
    library (``COPY_SKIP`` left out, lib-dynload kept) at the same absolute
    paths, /etc/ld.so.cache and /etc/localtime, the devices ``DEVICES``
    where mknod works (CAP_MKNOD, a filesystem without nodev), /dev/shm
    (root's, read-only to runs) and /tmp, the runs' directory. No /proc.
    Returns (top, runs directory, facts); the caller removes ``top``."""
    import stat
    import tempfile
    t0 = time.monotonic()
    top = tempfile.mkdtemp(prefix="glyph-root-")
    os.chmod(top, 0o755)
    try:
        copier = _Copier(top)
        stdlib = os.path.dirname(os.__file__)
        dynload = [p for p in sys.path if os.path.basename(p) == "lib-dynload" and os.path.isdir(p)]
        copier.tree(stdlib)
        for path in dynload:
            copier.tree(path)
        for path in ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"):  # merged-/usr links
            if os.path.islink(path):
                copier.place(path)
        exe = [sys.executable, os.path.realpath(sys.executable)]
        loader = _elf_interpreter(exe[1])
        mapped = _mapped_files(dynload)
        for path in exe + ([loader] if loader else []) + mapped:
            copier.file(path)
        # The names the loader looks a library up by (its soname: libbz2.so.1.0 -> libbz2.so.1.0.4), for
        # the extension modules a run imports that the server did not load.
        libs = {path for path in mapped if ".so" in os.path.basename(path)}
        for folder in sorted({os.path.dirname(path) for path in libs}):
            for entry in os.scandir(folder):
                if entry.is_symlink() and os.path.realpath(entry.path) in libs:
                    copier.place(entry.path)
        for path in ("/etc/ld.so.cache", "/etc/localtime"):
            if os.path.isfile(path):
                copier.file(path)
        for name in ("dev", "dev/shm", "tmp"):
            if not os.path.lexists(f"{top}/{name}"):
                os.mkdir(f"{top}/{name}")
            os.chmod(f"{top}/{name}", 0o755)
        missing = []
        for dev in DEVICES:
            dst = f"{top}/dev/{dev}"
            try:
                os.mknod(dst, stat.S_IFCHR | 0o666, os.stat(f"/dev/{dev}").st_rdev)
                os.chmod(dst, 0o666)
                os.close(os.open(dst, os.O_RDONLY))  # fails where the filesystem is mounted nodev
            except OSError:
                missing.append(dev)
                unlink(dst)
        facts = {"seconds": time.monotonic() - t0, "bytes": copier.size, "linked": copier.linked,
                 "copied": copier.copied, "missing_devices": missing}
        return top, f"{top}/tmp", facts
    except BaseException:
        remove_tree(top)
        raise


def probe_copy(top: str, uid: int) -> None:
    """In a throwaway child, what a worker does: chroot into ``top``, switch
    to ``uid`` (an unprivileged one), and read the standard library there (a
    run imports the modules the server did not pre-import). The copy is
    world-readable, so a Python under root's home serves too."""
    stdlib = os.path.dirname(os.__file__)
    pid = os.fork()
    if pid == 0:
        try:
            os.chroot(top)
            os.chdir("/")
        except BaseException:
            os._exit(5)
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        except BaseException:
            os._exit(4)
        try:
            ok = os.access(os.path.join(stdlib, "json", "__init__.py"), os.R_OK) and os.listdir(stdlib)
            os._exit(0 if ok else 3)
        except BaseException:
            os._exit(3)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 5:
        raise SystemExit("cannot chroot (no CAP_SYS_CHROOT?)")
    if code == 4:
        raise SystemExit("cannot switch to an unprivileged uid (no CAP_SETUID?)")
    if code != 0:
        raise SystemExit(f"the copied Python standard library at {stdlib} is not readable by other users")


def unlink(path: str) -> str | None:
    try:
        os.unlink(path)
        return None
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"could not remove {path}: {exc.strerror}"


def remove_tree(path: str) -> str | None:
    try:
        shutil.rmtree(path)
        return None
    except (OSError, RecursionError):
        import subprocess  # here only: it imports threading, which the server leaves out (server.PRELOAD)
        subprocess.run(["rm", "-rf", "--", path], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return None if not os.path.lexists(path) else f"could not remove {path}"
