"""Every attack in glyph.redteam: not passed, no process left, no file left
outside the run directory, grader alive (and not restarted)."""

import hashlib
import os
import resource
import socket
from pathlib import Path

import pytest
from conftest import sandbox_processes, sandbox_tmp

import glyph
from glyph.grading import grade
from glyph.redteam import ATTACKS, DEMO_SOLUTION, DEMO_TESTS, REFEREE_TESTS, aimed_at_a_listener
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


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack, sandbox):
    source, listener = aimed_at_a_listener(attack)
    before = snapshot()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    g = grade(source, "", REFEREE_TESTS if attack.referee else DEMO_TESTS, limits=LIMITS, sandbox=sandbox)

    assert not g.passed, f"{attack.name} was rewarded: {g.detail}"
    assert sandbox_processes(sandbox) == [], "processes left behind"
    assert sandbox_tmp(sandbox) == [], "files left in the runs' /tmp"
    assert snapshot() == before, "files outside the sandbox changed"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024, "grader memory grew"
    assert SECRET not in g.stdout + g.stderr + g.detail
    if listener is not None:
        with pytest.raises(socket.timeout):
            listener.accept()
        listener.close()
    assert sandbox.restarts == 0, "the server died"
    assert grade(DEMO_SOLUTION, "", DEMO_TESTS, sandbox=sandbox).passed, "grader broken after the attack"
