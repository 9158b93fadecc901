"""Every attack in glyph.redteam: not passed, no process left, no file left
outside the run directory, grader alive (and not restarted), and a grade
whose text UTF-8 can encode."""

import hashlib
import json
import os
import resource
import socket
from pathlib import Path

import pytest
from conftest import sandbox_processes, sandbox_tmp

import glyph
from glyph.grading import grade
from glyph.redteam import ATTACKS, DEMO_SOLUTION, DEMO_TESTS, aimed_at_a_listener
from glyph.sandbox import Limits

SECRET = "glyph-redteam-secret-4c1d"
os.environ["GLYPH_REDTEAM_SECRET"] = SECRET  # before any sandbox starts: it must not leak into runs
LIMITS = Limits(cpu_s=2, wall_s=4)
WATCHED_DIRS = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path.home(), Path.cwd(),
                Path(glyph.__file__).parent]
TRUSTED_FILES = [Path(glyph.__file__).parent / "grading.py",
                 *sorted((Path(glyph.__file__).parent / "sandbox").rglob("*.py")), Path(os.__file__)]


def snapshot():
    # Only the attacks' own marker names: other programs may use /tmp meanwhile.
    names = {d: sorted(n for n in os.listdir(d) if "pwned" in n) for d in WATCHED_DIRS if d.is_dir()}
    digests = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in TRUSTED_FILES}
    return names, digests


def test_at_least_twenty_distinct_attacks():
    assert len({a.name for a in ATTACKS}) == len(ATTACKS) >= 20


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.own_tests], ids=lambda a: a.name)
def test_an_attacks_own_tests_pass_the_reference(attack, sandbox):
    assert grade(DEMO_SOLUTION, "", attack.tests, limits=LIMITS, sandbox=sandbox).passed


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack, sandbox):
    source, listener = aimed_at_a_listener(attack)
    before = snapshot()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    g = grade(source, "", attack.tests, limits=LIMITS, sandbox=sandbox)

    assert not g.passed, f"{attack.name} was rewarded: {g.detail}"
    assert sandbox_processes(sandbox) == [], "processes left behind"
    assert sandbox_tmp(sandbox) == [], "files left in the runs' /tmp"
    assert snapshot() == before, "files outside the sandbox changed"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024, "grader memory grew"
    assert SECRET not in g.stdout + g.stderr + g.detail
    json.dumps(g.to_json(), ensure_ascii=False).encode("utf-8")  # what a store or a terminal takes
    if listener is not None:
        with pytest.raises(socket.timeout):
            listener.accept()
        listener.close()
    assert sandbox.restarts == 0, "the server died"
    assert grade(DEMO_SOLUTION, "", DEMO_TESTS, sandbox=sandbox).passed, "grader broken after the attack"


def _bare_control(fn, *args, tries: int = 3):
    """The attack in bare mode, where nothing separates runs: it must work
    there, else a test that it fails elsewhere shows nothing. Timing decides
    how many colluding copies find each other: a few tries."""
    from glyph.sandbox import Sandbox
    sb = Sandbox(mode="bare", pool=0)
    try:
        for _ in range(tries):
            result = fn(sb, *args)
            if (any(result) if isinstance(result, list) else result["second"]):
                return result
        return result
    finally:
        sb.close()


def test_colluding_copies_graded_at_once_pass_none(sandbox):
    """Eight copies of a solution that computes nothing, graded at once,
    pooling over abstract unix sockets which answers got them killed: each
    run has a network namespace of its own, so each copy is alone, answers
    True to everything and fails."""
    from glyph.redteam import collude
    passed = collude(sandbox)
    assert not any(passed), passed
    assert sandbox_processes(sandbox) == [] and sandbox.restarts == 0
    assert any(_bare_control(collude)), "control: in bare mode some colluding copies must pass"


def test_colluding_copies_pass_no_copy_of_mbpp_task_3(sandbox, mbpp_tasks):
    from glyph.redteam import collude
    task = mbpp_tasks["mbpp_3"]
    assert not any(collude(sandbox, tests=task.tests(), function="is_not_prime"))


def test_what_a_grading_plants_a_later_grading_does_not_find(sandbox):
    """The first grading plants its value in the kernel keyrings, SysV shared
    memory, /tmp, /var/tmp, /dev/shm, /run/lock, its home and cwd, the
    environment, an inheritable pipe and a daemon on an abstract socket; the
    second, which knows no value, finds none of it and fails."""
    from glyph.redteam import carryover
    before = snapshot()
    c = carryover(sandbox)
    assert c["first"], c
    assert not c["second"] and c["found"] == {}, c
    assert sandbox_processes(sandbox) == [], "processes left behind"
    assert _planted(c["token"]) == [] and snapshot()[1] == before[1], "files outside the sandbox changed"
    bare = _bare_control(carryover)
    assert bare["second"] and {"keyring -4", "sysv shm", "/tmp"} <= set(bare["found"]), bare
    assert _planted(bare["token"]) == [], "the bare control left files behind"


def _planted(token: str) -> list[str]:
    """The files carryover's planting named with its own token: another test
    session on the machine may plant its own meanwhile (the names alone would
    differ), this run's are what must be gone."""
    return [str(d / f"glyph-pwned-{token}") for d in WATCHED_DIRS if (d / f"glyph-pwned-{token}").exists()]


def test_keyring_calls_are_denied_in_every_isolating_run(sandbox):
    import json
    src = ("import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "NR = {'x86_64': (248, 249, 250), 'aarch64': (217, 218, 219)}[platform.machine()]\n"
           "def errnos():\n    out = []\n    for nr in NR:\n"
           "        libc.syscall(ctypes.c_long(nr), 0, 0, 0, 0, 0)\n        out.append(ctypes.get_errno())\n"
           "    return out\n")
    from glyph.sandbox import Limits
    from glyph.sandbox.runtime import wire
    run = sandbox.open({"mode": "solution"}, {"source": src.encode(), "setup": b""}, Limits())
    assert run.recv() == {"ev": "ready"}
    run.send({"op": "eval", "id": 0, "expr": "errnos()"})
    assert wire.decode(run.recv()["value"]) == [13, 13, 13]  # EACCES, from the filter (else EFAULT/EINVAL)
    run.send({"op": "exit"})
    run.finish()
    assert sandbox.info.protections["syscall_filter"]["on"], json.dumps(sandbox.info.protections)
