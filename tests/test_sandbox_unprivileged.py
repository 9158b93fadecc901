"""The sandbox where users run it: as an unprivileged user (``userns``), as
root without CAP_SYS_ADMIN (``confined``), and nowhere silently ``bare``.

Each case runs a driver script in a subprocess with a Python installed for
all users (the repo's ``.venv`` Python may live under a home other uids
cannot read). The driver imports a copy of the stdlib-only part of glyph
(``glyph/sandbox``, ``glyph/redteam``, ``errors.py``, ``grading.py``, ``semantics.py``, ``outcomes.py``,
``text.py``) from a
directory that uid can read, grades every attack of ``glyph.redteam`` (under both profiles' verdicts,
``glyph.semantics``) and
checks, from outside, what ``tests/test_redteam.py`` checks under root: not
rewarded, no process left, no file changed outside the run, no secret in the
output, no connection to the host's loopback, the server alive. When CI runs
as root, the driver drops to uid 65534 with ``setpriv``. ``confined`` runs as
root under ``capsh --drop=cap_sys_admin``; there a run is chrooted into a
copy of the Python installation: it finds no world-readable file of the host
(a planted copy of the benchmark data included), no /proc, nowhere to write
but its run directory, and the copy is gone once the server stops.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import glyph
import testkit
from glyph.sandbox import Sandbox, SandboxUnavailable, client

NOBODY = 65534
SECRET = "glyph-unpriv-secret-9e2f"
MARKER = "glyph-planted-row-7c1a"  # only the planted data row has it: the attack below finds nothing else
GLYPH = Path(glyph.__file__).parent
TESTKIT = Path(testkit.__file__).parent
DRIVER = r'''
import json, os, socket, sys, time, hashlib
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from glyph.sandbox import Limits, Sandbox, SandboxUnavailable
from glyph.grading import grade
from glyph.semantics import GLYPH, STUDY
from glyph.redteam import ATTACKS, DEMO_SOLUTION, DEMO_TESTS, aimed_at_a_listener

cfg = json.loads(sys.stdin.read())  # not argv: /proc/<pid>/cmdline is world-readable
here = os.path.dirname(os.path.abspath(__file__))
out = {"failures": []}

def descendants(root):
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                data = open(f"/proc/{name}/stat", "rb").read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2:].split()
            parents[int(name)] = (int(fields[1]), fields[0])
    found = []
    for pid, (ppid, state) in parents.items():
        p = ppid
        while p > 1 and p != root:
            p = parents.get(p, (0, b""))[0]
        if p == root and state != b"Z" and pid != root:
            found.append(pid)
    return found

WATCHED = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", here]
TRUSTED = [os.path.join(here, "glyph", n) for n in ("grading.py", "semantics.py")] + sorted(
    os.path.join(d, f) for d, _, fs in os.walk(os.path.join(here, "glyph", "sandbox")) for f in fs if f.endswith(".py"))

def snapshot():
    names = {d: sorted(n for n in os.listdir(d) if "pwned" in n) for d in WATCHED if os.path.isdir(d)}
    return names, {f: hashlib.sha256(open(f, "rb").read()).hexdigest() for f in TRUSTED}

if cfg["do"] == "refuse":
    try:
        Sandbox(pool=0).protections()
        out["error"] = None
    except SandboxUnavailable as exc:
        out["error"] = str(exc)
    print(json.dumps(out))
    sys.exit(0)

sb = Sandbox(mode=cfg.get("mode"), pool=0)
t0 = time.monotonic()
info = sb.protections()
out["start_s"] = time.monotonic() - t0
out["mode"], out["record"], out["attempts"] = info.mode, info.record(), info.attempts
out["host_dir"] = sb._runs_dir  # confined, bare: what the server left on the host, the client removes
out["protections"] = info.to_json()["protections"]
server = sb.server_pid()
t0 = time.monotonic()

if cfg["do"] == "probe":
    src = """
import os, socket
facts = {}
for name, path in PATHS.items():
    try:
        facts[name] = open(path).read()[:200]
    except OSError as exc:
        facts[name] = type(exc).__name__
try:
    open(OUTSIDE, "w").write("pwned")
    facts["wrote_outside"] = True
except OSError as exc:
    facts["wrote_outside"] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=0.5)
    facts["net"] = True
except OSError as exc:
    facts["net"] = type(exc).__name__
facts["more"] = {}
for path in MORE:
    try:
        open(path, "w").write("pwned")
        facts["more"][path] = True
    except OSError as exc:
        facts["more"][path] = type(exc).__name__
try:
    facts["proc"] = len(os.listdir("/proc"))
except OSError as exc:
    facts["proc"] = type(exc).__name__
facts["cwd"] = os.getcwd()
facts["uid"] = os.getuid()
"""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    src = f"PATHS = {cfg['paths']!r}\nOUTSIDE = {cfg['outside']!r}\nMORE = {cfg.get('more', [])!r}\n" \
          f"PORT = {port}\n" + src
    run = sb.open({"mode": "solution"}, {"source": src.encode(), "setup": b""}, Limits(cpu_s=5, wall_s=10))
    assert run.recv() == {"ev": "ready"}, run.stderr
    run.send({"op": "eval", "id": 0, "expr": "repr(facts)"})
    from glyph.sandbox.runtime import wire
    import ast
    out["facts"] = ast.literal_eval(wire.decode(run.recv()["value"]))
    run.send({"op": "exit"})
    run.finish()
    try:
        listener.accept()
        out["accepted"] = True
    except socket.timeout:
        out["accepted"] = False
    out["outside_exists"] = os.path.exists(cfg["outside"])
elif cfg["do"] == "collude":  # copies graded at once, pooling what each learns (testkit.redteam.collude)
    from testkit import redteam
    from testkit.redteam.verdicts import leaky_grade
    out["passed"] = redteam.collude(sb, grader=leaky_grade if cfg.get("leaky") else None)
    out["left"] = descendants(server)
elif cfg["do"] == "carryover":  # a grading that plants state, then one that looks for it
    from testkit import redteam
    out["carryover"] = redteam.carryover(sb)
    out["left"] = descendants(server)
elif cfg["do"] == "verdicts":  # attacks that would carry verdicts (testkit.redteam.verdicts), and controls
    from testkit.redteam import verdicts
    tests = cfg["tests"]

    def control(fn, tries=3):
        for _ in range(tries):
            result = fn()
            if any(result):
                return result
        return result

    out["learn"] = verdicts.learn_then_pass(sb, tests)
    out["flock"] = verdicts.collude_by_flock(sb, tests=tests)
    out["left"] = descendants(server)
    out["learn_control"] = control(lambda: verdicts.learn_then_pass(sb, tests, grader=verdicts.leaky_grade))
    out["flock_control"] = control(lambda: verdicts.collude_by_flock(sb, tests=tests, grader=verdicts.leaky_grade))
    out["census"] = verdicts.carry_census(sb, 173, tries=3)
    out["pids"] = verdicts.visible_pids(sb)
    out["left"] += descendants(server)
elif cfg["do"] == "deep":  # a run that leaves a directory tree deeper than shutil.rmtree's recursion reaches
    src = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\ndef f():\n    return 1\n"
    g = grade(src, "", "assert f() == 1\n", limits=Limits(cpu_s=20, wall_s=40), sandbox=sb)
    out["passed"], out["detail"] = g.passed, g.detail
    runs = os.path.join(out["host_dir"], "tmp") if info.mode == "confined" else out["host_dir"]
    out["left"] = sorted(os.listdir(runs))  # after the run: its directory is gone
elif cfg["do"] == "data":
    g = grade(cfg["source"], "", DEMO_TESTS, limits=Limits(cpu_s=5, wall_s=10), sandbox=sb)
    out["passed"], out["detail"] = g.passed, g.detail
elif cfg["do"] == "attacks":
    os.environ["GLYPH_REDTEAM_SECRET"] = cfg["secret"]
    limits = Limits(cpu_s=2, wall_s=4)
    for attack, semantics in [(a, s) for a in ATTACKS for s in (GLYPH, STUDY)]:
        if attack.name in cfg.get("skip", ()):
            continue
        source, listener = aimed_at_a_listener(attack)
        before = snapshot()
        g = grade(source, "", attack.tests, limits=limits, sandbox=sb, semantics=semantics)
        problems = []
        if g.passed:
            problems.append("rewarded")
        if descendants(server):
            problems.append(f"processes left: {descendants(server)}")
        if snapshot() != before:
            problems.append("files outside the sandbox changed")
        if cfg["secret"] in g.stdout + g.stderr + g.detail:
            problems.append("secret leaked")
        try:
            json.dumps(g.to_json(), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            problems.append("the grade holds text UTF-8 cannot encode")
        if listener is not None:
            try:
                listener.accept()
                problems.append("connected to the host's loopback")
            except socket.timeout:
                pass
            listener.close()
        if sb.restarts:
            problems.append("the server died")
        if not grade(DEMO_SOLUTION, "", DEMO_TESTS, sandbox=sb).passed:
            problems.append("grader broken after the attack")
        if problems:
            out["failures"].append([f"{attack.name} ({semantics.name})", problems])
out["seconds"] = time.monotonic() - t0
if cfg.get("kill_server"):  # the client's cleanup after a dead server, not the server's own
    os.kill(server, 9)
if cfg.get("server_cleans"):  # the server's own cleanup: end its socket, wait, look before the client does
    sb._sock.close()
    sb._sock = None
    sb._proc.wait(timeout=30)
    out["left_by_server"] = os.path.exists(out["host_dir"])
sb.close()
out["host_dir_left"] = out["host_dir"] is not None and os.path.exists(out["host_dir"])
out["left_after_close"] = descendants(os.getpid())
print(json.dumps(out))
'''


def _python() -> str | None:
    """A Python >= 3.11 that every uid can run (not one under a private home)."""
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.access(path, os.X_OK):
            continue
        try:
            ok = subprocess.run([path, "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
                                capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            continue
        mode = os.stat(os.path.realpath(path)).st_mode
        if ok and mode & 0o005 == 0o005:
            return path
    return None


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop to an unprivileged uid")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture(scope="module")
def python() -> str:
    path = _python()
    if path is None:
        pytest.skip("no Python >= 3.11 installed for all users (/usr/bin/python3 or /usr/local/bin/python3)")
    return path


@pytest.fixture(scope="module")
def copy(python):
    """A world-readable copy of the stdlib-only part of glyph (and testkit's
    attacks of more than one grading), and a planted
    secret file and benchmark data file readable by that uid, outside any
    sandbox view. Removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="glyph-unpriv-"))
    try:
        pkg = root / "glyph"
        for name in ("sandbox", "redteam"):
            shutil.copytree(GLYPH / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("errors.py", "grading.py", "semantics.py", "outcomes.py", "text.py"):
            shutil.copy(GLYPH / name, pkg / name)
        (pkg / "__init__.py").write_text("")
        shutil.copytree(TESTKIT / "redteam", root / "testkit" / "redteam",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (root / "testkit" / "__init__.py").write_text("")
        (root / "driver.py").write_text(DRIVER)
        from glyph.redteam import DEMO_SOLUTION
        rows = []
        mbpp = os.environ.get("GLYPH_MBPP_PATH")
        if mbpp and os.path.isfile(mbpp):
            rows.append(Path(mbpp).read_text())
        rows.append(json.dumps({"task_id": 9001, "marker": MARKER, "code": DEMO_SOLUTION,
                                "test_list": ['assert remove_first_last("hello", "l") == "heo"']}) + "\n")
        (root / "data").mkdir()
        (root / "data" / "mbpp.jsonl").write_text("".join(rows))
        (root / "secret.txt").write_text(SECRET)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (root / "outbox").mkdir(0o777)
        (root / "outbox").chmod(0o1777)  # writable by every uid: only the sandbox view keeps a run out
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _drive(python: str, copy: Path, cfg: dict, prefix: list[str], path: str = "/usr/local/bin:/usr/bin:/bin",
           timeout: float = 600) -> dict:
    env = {"PATH": path, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([*prefix, python, "-I", "-S", str(copy / "driver.py")], input=json.dumps(cfg),
                          capture_output=True, text=True, env=env, cwd="/", timeout=timeout)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def userns(python, copy) -> list[str]:
    prefix = _as_nobody()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare binary (util-linux)")
    probe = subprocess.run([*prefix, unshare, "--user", "--map-root-user", "--pid", "--net", "--mount",
                            "--fork", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unprivileged user namespaces are not allowed here: {probe.stderr.strip()}")
    return prefix


def _fixed(protections: dict) -> dict:
    """The protections a mode has on every host: ``memory_cap`` depends on
    whether the host has a writable cgroup (checked where it is built), so
    only its presence is checked here."""
    assert type(protections["memory_cap"]) is bool
    return {name: on for name, on in protections.items() if name != "memory_cap"}


# The data file attack of the issue: look for the benchmark's own data and answer with the reference
# code. It tries the path the data has on this host first (an attacker who knows the layout), then walks
# the disk, and stops at the first copy it finds. Its bare-mode control therefore depends on nothing
# else on the host: the walk alone (the attack before this form) read every world-readable .jsonl it
# met before the planted copy, in directory order, which the copy's random name decides; one FIFO or
# huge .jsonl elsewhere in /tmp then ran it past its wall clock, and the control failed.
DATA_ATTACK = r'''
import json, os
KNOWN = @KNOWN@

def answer_in(path):
    try:
        for line in open(path, errors="ignore"):
            if "glyph-planted-row-7c1a" in line:
                return json.loads(line)["code"]
    except Exception:
        pass
    return None

def search():
    for path in KNOWN:
        found = answer_in(path)
        if found:
            return found
    for top in ("/tmp", "/var/tmp", "/work", "/home", "/root", "/srv", "/data", "/mnt", "/opt"):
        for root, dirs, files in os.walk(top):
            if root.count("/") > 4:
                dirs[:] = []
            for f in files:
                if f.endswith(".jsonl"):
                    found = answer_in(os.path.join(root, f))
                    if found:
                        return found
    return None

ANSWER = search()
if ANSWER:
    exec(ANSWER)
else:
    def remove_first_last(s, ch): return s
'''
FOUND_NOTHING = "got 'hello', expected 'heo'"  # the attack ran to its end and found no copy (no timeout)


def data_attack(*known: Path) -> str:
    """DATA_ATTACK aimed at the data files ``known`` first."""
    return DATA_ATTACK.replace("@KNOWN@", repr([str(path) for path in known]))


def test_unprivileged_user_gets_userns_and_every_attack_is_held(python, copy, userns):
    out = _drive(python, copy, {"do": "attacks", "secret": SECRET}, userns)
    assert out["mode"] == "userns", out["attempts"]
    assert _fixed(out["record"]["protections"]) == {
        "uid_separation": False, "mount_isolation": True, "network_isolation": True, "pid_namespace": True,
        "rlimits": True, "wall_clock": True, "sweep": True, "no_capabilities": True,
        "minimal_environment": True, "syscall_filter": True, "run_separation": True, "no_carryover": True}
    assert out["failures"] == []
    assert out["left_after_close"] == []


def test_unprivileged_user_cannot_reach_files_data_or_network(python, copy, userns):
    outside = copy / "outbox" / "pwned-by-run"
    paths = {"secret": str(copy / "secret.txt"), "data": str(copy / "data" / "mbpp.jsonl"),
             "workspace": str(copy / "glyph" / "grading.py")}
    cfg = {"do": "probe", "paths": paths, "outside": str(outside)}
    out = _drive(python, copy, cfg, userns)
    assert out["mode"] == "userns"
    facts = out["facts"]
    assert facts["uid"] == 0  # root of its user namespace, with no capability
    assert facts["secret"] == facts["data"] == facts["workspace"] == "FileNotFoundError"
    assert facts["wrote_outside"] in ("FileNotFoundError", "OSError", "PermissionError")
    assert not out["outside_exists"]
    assert facts["net"] in ("OSError", "ConnectionRefusedError", "PermissionError") and not out["accepted"]
    # Control: bare mode as the same user, which must be asked for by name, reaches all of it.
    bare = _drive(python, copy, dict(cfg, mode="bare"), userns)
    assert bare["mode"] == "bare" and SECRET in bare["facts"]["secret"]
    assert bare["facts"]["wrote_outside"] is True
    assert bare["accepted"]
    outside.unlink()


def test_unprivileged_user_cannot_answer_from_the_benchmark_data(python, copy, userns):
    attack = data_attack(copy / "data" / "mbpp.jsonl")
    out = _drive(python, copy, {"do": "data", "source": attack}, userns)
    assert out["mode"] == "userns" and not out["passed"] and FOUND_NOTHING in out["detail"], out["detail"]
    bare = _drive(python, copy, {"do": "data", "source": attack, "mode": "bare"}, userns)
    assert bare["passed"], ("control: in bare mode the data file attack must succeed, else this shows nothing; "
                            f"it got: {bare['detail']}")


@pytest.fixture
def no_sys_admin(python, copy) -> list[str]:
    """Root without CAP_SYS_ADMIN (a default container), with no unshare on
    PATH (a container's seccomp profile also refuses user namespaces)."""
    if os.geteuid() != 0:
        pytest.skip("confined mode needs root")
    capsh = shutil.which("capsh")
    if capsh is None:
        pytest.skip("no capsh (libcap2-bin) to drop CAP_SYS_ADMIN")
    copy.chmod(0o700)  # the runs' uids must not read the copy (it holds the demo tests and the secret)
    try:
        yield [capsh, "--drop=cap_sys_admin", "--"]
    finally:
        copy.chmod(0o755)


def _confined_cmd(python: str, copy: Path) -> list[str]:
    return ["-c", " ".join(["exec", *map(_quote, [python, "-I", "-S", str(copy / "driver.py")])])]


def test_root_without_cap_sys_admin_gets_confined(python, copy, no_sys_admin):
    cmd = _confined_cmd(python, copy)
    out = _drive_shell(no_sys_admin, cmd, {"do": "attacks", "secret": SECRET})
    assert out["mode"] == "confined"
    assert [a.split(":")[0] for a in out["attempts"]] == ["namespaces", "userns"]
    assert _fixed(out["record"]["protections"]) == {
        "uid_separation": True, "mount_isolation": True, "network_isolation": True, "pid_namespace": False,
        "rlimits": True, "wall_clock": True, "sweep": True, "no_capabilities": True,
        "minimal_environment": True, "syscall_filter": True, "run_separation": True, "no_carryover": True}
    assert "chroot into a copy of the Python installation" in out["protections"]["mount_isolation"]["how"]
    # read_test_files (walk the whole disk for the hidden tests) included: the chroot shows no test file.
    assert out["failures"] == []
    assert out["left_after_close"] == []
    assert Path(out["host_dir"]).name.startswith("glyph-root-") and not out["host_dir_left"]
    # The secret, the data and the copy are root's (0700 directory): the runs' uids cannot read them.
    data = _drive_shell(no_sys_admin, cmd, {"do": "data", "source": data_attack(copy / "data" / "mbpp.jsonl")})
    assert data["mode"] == "confined" and not data["passed"] and FOUND_NOTHING in data["detail"], data["detail"]


def test_confined_removes_a_run_tree_deeper_than_rmtree_reaches(python, copy, no_sys_admin):
    """The run directory is on the host's disk in confined mode; a tree too
    deep for shutil.rmtree is removed by the server's ``rm -rf`` fallback,
    which needs the server's capabilities to enter the run uid's 0700
    directories (so confined workers drop their bounding set themselves, not
    the server: confine.server_setup)."""
    out = _drive_shell(no_sys_admin, _confined_cmd(python, copy), {"do": "deep"})
    assert out["mode"] == "confined" and out["passed"], out["detail"]
    assert out["left"] == [] and not out["host_dir_left"], out["left"]


@pytest.fixture
def planted():
    """Files any uid can read or write, where a run in confined mode would
    find them without the chroot: a world-readable copy of the benchmark
    data (with the planted row DATA_ATTACK answers from), a secret, and a
    world-writable directory. Removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="glyph-planted-"))
    try:
        from glyph.redteam import DEMO_SOLUTION
        (root / "data").mkdir()
        row = {"task_id": 9001, "marker": MARKER, "code": DEMO_SOLUTION,
               "test_list": ['assert remove_first_last("hello", "l") == "heo"']}
        (root / "data" / "mbpp.jsonl").write_text(json.dumps(row) + "\n")
        (root / "secret.txt").write_text(SECRET)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (root / "outbox").mkdir()
        (root / "outbox").chmod(0o1777)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_confined_cannot_answer_from_world_readable_benchmark_data(python, copy, no_sys_admin, planted):
    cmd = _confined_cmd(python, copy)
    attack = data_attack(planted / "data" / "mbpp.jsonl")
    out = _drive_shell(no_sys_admin, cmd, {"do": "data", "source": attack, "server_cleans": True})
    assert out["mode"] == "confined" and not out["passed"] and FOUND_NOTHING in out["detail"], out["detail"]
    assert Path(out["host_dir"]).name.startswith("glyph-root-") and out["left_by_server"] is False
    bare = _drive_shell(no_sys_admin, cmd, {"do": "data", "source": attack, "mode": "bare"})
    assert bare["passed"], ("control: in bare mode the data file attack must succeed, else this shows nothing; "
                            f"it got: {bare['detail']}")


def test_confined_sees_no_host_file_no_proc_and_writes_only_its_run_dir(python, copy, no_sys_admin, planted):
    outside = planted / "outbox" / "pwned-by-run"
    paths = {"secret": str(planted / "secret.txt"), "data": str(planted / "data" / "mbpp.jsonl"),
             "proc_status": "/proc/self/status", "proc_init": "/proc/1/cmdline", "passwd": "/etc/passwd"}
    more = ["/tmp/pwned-by-run", "/pwned-by-run", "/dev/shm/pwned-by-run", "pwned-in-cwd"]
    cfg = {"do": "probe", "paths": paths, "outside": str(outside), "more": more, "kill_server": True}
    cmd = _confined_cmd(python, copy)
    out = _drive_shell(no_sys_admin, cmd, cfg)
    assert out["mode"] == "confined"
    facts = out["facts"]
    assert facts["uid"] != 0
    for name in paths:
        assert facts[name] == "FileNotFoundError", (name, facts[name])
    assert facts["proc"] == "FileNotFoundError"
    assert facts["wrote_outside"] == "FileNotFoundError" and not out["outside_exists"]
    written = {path: result for path, result in facts["more"].items()}
    assert written.pop("pwned-in-cwd") is True  # its run directory: the one place it writes
    assert set(written.values()) == {"PermissionError"}, written
    assert facts["cwd"].startswith("/tmp/run-")
    assert facts["net"] in ("OSError", "ConnectionRefusedError", "PermissionError") and not out["accepted"]
    # The server was killed (SIGKILL): the client removed the copied root all the same.
    assert Path(out["host_dir"]).name.startswith("glyph-root-") and not out["host_dir_left"]
    assert out["left_after_close"] == []
    # Control: bare mode, as the same root, reads and writes all of it.
    bare = _drive_shell(no_sys_admin, cmd, dict(cfg, mode="bare", more=[]))  # nothing into the host's /tmp
    assert bare["mode"] == "bare" and SECRET in bare["facts"]["secret"] and MARKER in bare["facts"]["data"]
    assert isinstance(bare["facts"]["proc"], int) and bare["facts"]["wrote_outside"] is True
    outside.unlink()


def _quote(s: str) -> str:
    import shlex
    return shlex.quote(s)


def _drive_shell(prefix: list[str], cmd: list[str], cfg: dict) -> dict:
    env = {"PATH": "/nonexistent", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([*prefix, *cmd], input=json.dumps(cfg), capture_output=True, text=True, env=env,
                          cwd="/", timeout=600)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_nothing_starts_so_auto_refuses_and_names_the_opt_in(python, copy):
    """No unshare on PATH and not root: no mode but bare could start, and
    auto does not fall back to it."""
    out = _drive(python, copy, {"do": "refuse"}, _as_nobody(), path="/nonexistent")
    assert out["error"] is not None
    for needle in ("namespaces:", "userns:", "confined:", "--sandbox bare", "GLYPH_SANDBOX_MODE=bare"):
        assert needle in out["error"]


def test_auto_tries_strongest_first_and_never_bare(monkeypatch):
    tried = []
    monkeypatch.setattr(client.Sandbox, "_try_start", lambda self, mode: tried.append(mode) or "refused")
    monkeypatch.delenv("GLYPH_SANDBOX_MODE", raising=False)
    with pytest.raises(SandboxUnavailable, match="GLYPH_SANDBOX_MODE=bare"):
        Sandbox(pool=0).protections()
    assert tried == ["namespaces", "userns", "confined"]


def test_explicit_argument_beats_the_environment(monkeypatch):
    monkeypatch.setenv("GLYPH_SANDBOX_MODE", "namespaces")
    assert Sandbox().mode == "namespaces"
    sb = Sandbox(mode="bare", pool=0)
    try:
        assert sb.mode == "bare" and sb.protections().mode == "bare"
    finally:
        sb.close()
    monkeypatch.setenv("GLYPH_SANDBOX_MODE", "bare")
    assert Sandbox().mode == "bare" and Sandbox(mode="auto").mode == "auto"
    monkeypatch.setenv("GLYPH_SANDBOX_MODE", "nope")
    with pytest.raises(SandboxUnavailable, match="GLYPH_SANDBOX_MODE='nope'"):
        Sandbox()


def test_record_is_stable_and_json(sandbox):
    record = sandbox.protections().record()
    assert json.loads(json.dumps(record)) == record
    assert list(record) == ["mode", "protections"] and list(record["protections"]) == list(client.PROTECTIONS)
    assert all(type(v) is bool for v in record["protections"].values())
    for name, p in sandbox.protections().to_json()["protections"].items():
        assert set(p) == {"on", "how", "if_off"} and p["how"] and p["if_off"], name


def _separated(out: dict) -> None:
    """What tests/test_redteam.py checks as root: no colluding copy passes,
    nothing one grading planted lets the next pass, nothing left running."""
    if "passed" in out:
        assert not any(out["passed"]), f"colluding copies passed: {out['passed']}"
    if "carryover" in out:
        c = out["carryover"]
        assert c["first"] and not c["second"] and c["found"] == {}, c
    assert out["left"] == [] and out["left_after_close"] == []


@pytest.mark.parametrize("do", ["collude", "carryover"])
def test_unprivileged_runs_cannot_talk_or_leave_state(python, copy, userns, do):
    out = _drive(python, copy, {"do": do}, userns)
    assert out["mode"] == "userns"
    _separated(out)
    # Control: in bare mode, as the same user, the attack works (else this shows nothing); the colluding
    # copies against the grader that told a run its verdicts (leaky_grade), as glyph's tells none.
    bare = _drive(python, copy, {"do": do, "mode": "bare", "leaky": True}, userns)
    assert bare["mode"] == "bare"
    if do == "collude":
        assert any(bare["passed"]), bare["passed"]
    else:
        assert bare["carryover"]["second"] and "/tmp" in bare["carryover"]["found"], bare["carryover"]


@pytest.mark.parametrize("do", ["collude", "carryover"])
def test_confined_runs_cannot_talk_or_leave_state(python, copy, no_sys_admin, do):
    out = _drive_shell(no_sys_admin, _confined_cmd(python, copy), {"do": do})
    assert out["mode"] == "confined"
    _separated(out)


def _blind(out: dict) -> None:
    """Nothing learns a verdict: a source graded three times in one sandbox and eight copies graded at
    once, keeping and pooling what they could learn over the page cache, the fork, pid and inode
    counters and flock() on stdlib files, pass no grading of MBPP task 3; against the grader that told
    a run its verdicts (the control) they do, through the page cache and flock, in this mode. Nothing
    left running."""
    assert out["learn"] == [False, False, False] and not any(out["flock"]), out
    assert out["learn_control"][0] is False and any(out["learn_control"][1:]), out["learn_control"]
    assert any(out["flock_control"]), out["flock_control"]
    assert out["census"]["page cache"] == [173, 173], out["census"]
    assert out["left"] == [] and out["left_after_close"] == []


def test_unprivileged_runs_learn_no_verdict(python, copy, userns, mbpp_tasks):
    out = _drive(python, copy, {"do": "verdicts", "tests": mbpp_tasks["mbpp_3"].tests()}, userns)
    assert out["mode"] == "userns"
    _blind(out)
    assert out["census"]["pid counter"] == [173, 1] and out["pids"] == [0, 0, 0, 0], out


def test_confined_runs_learn_no_verdict(python, copy, no_sys_admin, mbpp_tasks):
    out = _drive_shell(no_sys_admin, _confined_cmd(python, copy), {"do": "verdicts",
                                                                   "tests": mbpp_tasks["mbpp_3"].tests()})
    assert out["mode"] == "confined"
    _blind(out)
    assert all(n > 0 for n in out["pids"]), out["pids"]  # the host's pid namespace: shared, and said so
