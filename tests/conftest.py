import os
from pathlib import Path

import pytest

from glyph.sandbox import Sandbox


@pytest.fixture(scope="session")
def mbpp_path() -> str:
    path = os.environ.get("GLYPH_MBPP_PATH")
    if not path:
        pytest.skip("needs MBPP data: set GLYPH_MBPP_PATH to an MBPP JSONL in the official schema "
                    "(CI: ../shared/data/mbpp/mbpp.jsonl)")
    return path


@pytest.fixture(scope="session")
def mbpp_tasks(mbpp_path):
    from glyph.data import mbpp
    return mbpp.load(mbpp_path)


@pytest.fixture(scope="module")
def sandbox():
    """A server with no pre-forked workers: after a grading, any process in
    its namespace (or below it) is a leftover."""
    sb = Sandbox(pool=0)
    sb.protections()
    yield sb
    sb.close()


def _stat(pid: int) -> tuple[int, str]:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[1]), fields[0].decode()


def sandbox_processes(sb: Sandbox) -> list[int]:
    """Live host pids of every process the server started (not the server).
    Namespaces mode: every process in its pid namespace; other modes: its
    descendants (in userns mode each run has a pid namespace of its own,
    nested in the server's, and its orphans are re-parented inside it)."""
    server = sb.server_pid()
    assert server is not None, "the sandbox server is not running"
    found = []
    if sb.info.mode == "namespaces":
        ns = os.readlink(f"/proc/{server}/ns/pid")
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == server:
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns and _stat(int(name))[1] != "Z":
                    found.append(int(name))
            except OSError:
                continue
        return found
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = _stat(int(name))
            except OSError:
                pass
    for pid, (ppid, state) in parents.items():
        p = ppid
        while p > 1 and p != server:
            p = parents.get(p, (0, ""))[0]
        if p == server and state != "Z":
            found.append(pid)
    return found


def sandbox_tmp(sb: Sandbox) -> list[str]:
    """What is left in the runs' private /tmp (seen through the server's root)."""
    server = sb.server_pid()
    if not sb.info.protections["mount_isolation"]["on"]:
        pytest.skip("no private filesystem view on this machine")
    return os.listdir(f"/proc/{server}/root/tmp")


# tests/pin/ needs the pinned PRIME-RL stack (torch, PRIME-RL on PYTHONPATH, verifiers a60a606):
# tests/test_pin.py runs it there. In the main venv it is not collected.
collect_ignore = [] if os.environ.get("GLYPH_PIN_STACK") else ["pin"]


@pytest.fixture(autouse=True)
def _verifiers_free_calls_none(request):
    """A test marked ``verifiers_free`` (not run again at the pin, tests/test_pin.py) calls no
    verifiers code, in any thread: a profile hook records every Python call into the package."""
    if request.node.get_closest_marker("verifiers_free") is None:
        yield
        return
    import sys
    import threading

    import verifiers
    root = os.path.dirname(verifiers.__file__) + os.sep
    hits: list[str] = []

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root) and len(hits) < 5:
            hits.append(f"{frame.f_code.co_filename[len(root):]}:{frame.f_code.co_name}")

    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert not hits, f"marked verifiers_free, but it called verifiers: {hits}"


def _pin_runs(session):
    """tests/test_pin.py's background runs (``PinRuns``), when this session selected one of its tests."""
    for item in session.items:
        runs = getattr(getattr(item, "module", None), "RUNS", None)
        if item.path.name == "test_pin.py" and runs is not None:
            return runs
    return None


def pytest_collection_modifyitems(session, config, items):
    """tests/test_pin.py's tests wait for the background runs: they go last, so the rest of the
    suite runs meanwhile."""
    items.sort(key=lambda item: item.path.name == "test_pin.py")


def pytest_collection_finish(session):
    runs = _pin_runs(session)
    if runs is not None and not session.config.option.collectonly:
        runs.start(session.config._tmp_path_factory.mktemp("pin-runs"))


def pytest_sessionfinish(session):
    runs = _pin_runs(session)
    if runs is not None:
        runs.stop()


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory, mbpp_path) -> dict:
    """``glyph demo --tasks 3`` once per profile, both at once (the eval CLI, both arms, the mix
    policy: revise, hack and oracle on the first three tasks of the profile's test split), shared by
    the profile x command matrix (``test_profile_matrix.py``) and the eval CLI's tests
    (``test_eval_profiles.py``). Per profile: ``out`` (the eval runs, ``arm_<a|b>-<profile>``),
    ``code`` (the command's exit status) and ``text`` (what it printed)."""
    import subprocess
    import sys
    import types

    root = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", COLUMNS="200")
    procs = {p: subprocess.Popen([sys.executable, "-m", "glyph.cli.app", "demo", "--tasks", "3", "--out",
                                  str(root / p), "--profile", p, "--mbpp-path", mbpp_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for p in ("study", "glyph")}
    runs = {}
    for profile, proc in procs.items():
        text, _ = proc.communicate(timeout=600)
        runs[profile] = types.SimpleNamespace(out=root / profile, code=proc.returncode, text=text)
    return runs
