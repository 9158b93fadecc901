"""State one grading leaves for the next: the first plants a value everywhere
a run could leave it (kernel keyrings, SysV shared memory, the usual
world-writable directories, its home and cwd, the environment, an
inheritable pipe, a daemon on an abstract socket), the second looks for it
there (``carryover``). Stdlib only."""

from __future__ import annotations

CARRY_TESTS = """\
assert planted() == "@VALUE@"
"""

# The first grading plants a value everywhere a run could leave it; the second looks for it there.
PLANT = r'''
import ctypes, os, platform, socket, time
VALUE, TOKEN = "@VALUE@", "@TOKEN@"
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "shmget": 29, "shmat": 30},
      "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "shmget": 194, "shmat": 196}}.get(
      platform.machine(), {})
KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING, KEYCTL_READ = -4, -3, 11
SHM_KEY = int(TOKEN[:7], 16)
PLACES = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", os.environ.get("HOME", "."), os.getcwd(), ".."]

def syscall(name, *args):
    return libc.syscall(ctypes.c_long(NR[name]), *args) if name in NR else -1

def plant():
    for kr in (KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING):
        syscall("add_key", b"user", ("glyph-" + TOKEN).encode(), VALUE.encode(), len(VALUE), ctypes.c_int(kr))
    shm = syscall("shmget", ctypes.c_int(SHM_KEY), 4096, 0o1666)  # IPC_CREAT | 0666
    if shm >= 0:
        libc.shmat.restype = ctypes.c_void_p
        addr = libc.shmat(shm, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            ctypes.memmove(addr, VALUE.encode() + b"\0", len(VALUE) + 1)
    for place in PLACES:
        try:
            path = os.path.join(place, "glyph-pwned-" + TOKEN)
            with open(path, "w") as f:
                f.write(VALUE)
            os.chmod(path, 0o666)
        except OSError:
            pass
    os.environ["GLYPH_PLANTED"] = VALUE
    os.putenv("GLYPH_PLANTED", VALUE)
    r, w = os.pipe()
    os.set_inheritable(r, True)
    os.write(w, VALUE.encode())
    if os.fork() == 0:  # a daemon that serves the value on an abstract socket, for a while
        try:
            os.setsid()
            if os.fork() == 0:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(("\0glyph-pwned-" + TOKEN).encode())
                s.listen(8)
                s.settimeout(0.2)
                end = time.monotonic() + 30
                while time.monotonic() < end:
                    try:
                        c, _ = s.accept()
                        c.sendall(VALUE.encode())
                        c.close()
                    except OSError:
                        pass
        finally:
            os._exit(0)
    time.sleep(0.2)

def find():
    found = {}
    buf = ctypes.create_string_buffer(256)
    for kr in (KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING):
        key = syscall("request_key", b"user", ("glyph-" + TOKEN).encode(), None, ctypes.c_int(kr))
        if key > 0 and syscall("keyctl", KEYCTL_READ, key, buf, 256) > 0:
            found[f"keyring {kr}"] = buf.value.decode()
    shm = syscall("shmget", ctypes.c_int(SHM_KEY), 0, 0)
    if shm >= 0:
        libc.shmat.restype = ctypes.c_void_p
        addr = libc.shmat(shm, None, 0)
        if addr not in (None, ctypes.c_void_p(-1).value):
            found["sysv shm"] = ctypes.string_at(addr).decode()
    for place in PLACES:
        try:
            with open(os.path.join(place, "glyph-pwned-" + TOKEN)) as f:
                found[place] = f.read()
        except OSError:
            pass
    if os.environ.get("GLYPH_PLANTED"):
        found["environment"] = os.environ["GLYPH_PLANTED"]
    for fd in range(6, 256):  # 0-5: the run's own (stdio, its channels, the payload)
        try:
            os.set_blocking(fd, False)
            data = os.read(fd, 64)
            if data:
                found[f"fd {fd}"] = data.decode("ascii", "replace")
        except OSError:
            pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1)
        s.connect(("\0glyph-pwned-" + TOKEN).encode())
        found["abstract socket"] = s.recv(64).decode()
    except OSError:
        pass
    finally:
        s.close()
    return found

def clean():  # bare: what the planting left in the caller's keyrings, IPC and files
    for kr in (KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING):
        key = syscall("request_key", b"user", ("glyph-" + TOKEN).encode(), None, ctypes.c_int(kr))
        if key > 0:
            syscall("keyctl", 3, key)  # KEYCTL_REVOKE
    shm = syscall("shmget", ctypes.c_int(SHM_KEY), 0, 0)
    if shm >= 0:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    for place in PLACES:
        try:
            os.unlink(os.path.join(place, "glyph-pwned-" + TOKEN))
        except OSError:
            pass

if ROLE == "plant":
    plant()
elif ROLE == "clean":
    clean()
FOUND = find() if ROLE == "find" else {}

def planted():
    if ROLE == "plant":
        return VALUE
    return next(iter(FOUND.values()), None)
'''


def carryover(sandbox, value: str | None = None) -> dict:
    """Grade a solution that plants ``value`` everywhere it can (it is told
    it, and passes), then one that looks for it there: ``{"first": passed,
    "second": passed, "found": where the second found it}``."""
    import ast
    import secrets

    from glyph.grading import grade
    from glyph.sandbox import Limits

    token = secrets.token_hex(8)
    value = value or secrets.token_hex(8)
    tests = CARRY_TESTS.replace("@VALUE@", value)
    limits = Limits(cpu_s=5, wall_s=10)
    planter = 'ROLE = "plant"\n' + PLANT.replace("@VALUE@", value).replace("@TOKEN@", token)
    first = grade(planter, "", tests, limits=limits, sandbox=sandbox)
    finder = 'ROLE = "find"\n' + PLANT.replace("@VALUE@", "").replace("@TOKEN@", token)  # it knows no value
    second = grade(finder, "", tests, limits=limits, sandbox=sandbox)
    run = sandbox.open({"mode": "solution"}, {"source": finder.encode(), "setup": b""}, limits)
    found: dict = {}
    if (run.recv() or {}).get("ev") == "ready":
        run.send({"op": "eval", "id": 0, "expr": "repr(FOUND)"})
        resp = run.recv() or {}
        from glyph.sandbox.runtime import wire
        try:
            found = ast.literal_eval(wire.decode(resp.get("value")))
        except (wire.WireError, ValueError, SyntaxError):
            found = {"?": "unreadable"}
        run.send({"op": "exit"})
    run.finish(kill=True)
    if sandbox.protections().mode == "bare":
        cleaner = 'ROLE = "clean"\n' + PLANT.replace("@VALUE@", "").replace("@TOKEN@", token)
        grade(cleaner, "", tests, limits=limits, sandbox=sandbox)
    return {"first": first.passed, "second": second.passed, "found": found, "detail": second.detail,
            "token": token}
