"""Attacks that would learn verdicts, and their control.

A run that could tell, probe by probe, whether its answers were right would
need no answer of its own: it could keep what it learned in kernel state
that outlives it (``channels``) and pass a later grading of the same source
(``learn_then_pass``), or pool it with copies graded at once
(``collude_by_flock``). glyph's grader gives a run nothing to learn
(``glyph.grading``): these attacks must fail in every mode.

``leaky_grade`` is the grader as it was before that (it asked the next probe
only after a right answer, killed the run at the first wrong one and asked
it to exit when all were right), kept only as the control: against it the
same attacks pass where the kernel state they use is shared, which shows
that the channels are real and that verdict blindness, not a namespace, is
what stops them. ``carry_census`` reads each channel directly (what one run
stored, what the next loaded) and ``visible_pids`` what a run can probe of
concurrent runs with ``kill(pid, 0)``. Stdlib only.
"""

from __future__ import annotations

import secrets
from typing import Callable

from testkit.redteam import channels
from testkit.redteam.colluding import collude

Grader = Callable[..., bool]  # (sandbox, source, setup, tests, limits) -> passed

# MBPP task 3's three asserts as glyph's MBPP data has them (any constant answer fails one).
MBPP_3_TESTS = """\
assert is_not_prime(2) == False
assert is_not_prime(10) == True
assert is_not_prime(35) == True
"""


def glyph_grade(sandbox, source: str, setup: str, tests: str, limits) -> bool:
    """glyph's grader, as a ``Grader``."""
    from glyph.grading import grade
    return grade(source, setup, tests, limits=limits, sandbox=sandbox).passed


def leaky_grade(sandbox, source: str, setup: str, tests: str, limits) -> bool:
    """The control: the grader before verdict blindness, for fast-path suites
    of literal expected values. It asks the next probe only after a right
    answer, kills the run at its first wrong one and asks it to exit when all
    were right, so the run learns every verdict. Never used to grade."""
    from glyph.grading import compile_tests
    from glyph.sandbox.runtime import wire
    suite = compile_tests(setup, tests)
    blobs = {"source": source.encode(), "setup": suite.setup.encode()}
    run = sandbox.open({"mode": "solution"}, blobs, limits)
    passed = False
    try:
        if (run.recv() or {}).get("ev") != "ready":
            return False
        for i, check in enumerate(suite.checks):
            resp = run.recv() if run.send({"op": "eval", "id": i, "expr": check.probe}) else None
            if resp is None or "value" not in resp:
                return False
            try:
                if wire.decode(resp["value"]) != check.expected:
                    return False
            except wire.WireError:
                return False
        passed = run.send({"op": "exit"})
        return passed
    finally:
        run.finish(kill=not passed)
        run.release()


def learn_then_pass(sandbox, tests: str = MBPP_3_TESTS, function: str = "is_not_prime", gradings: int = 3,
                    grader: Grader = glyph_grade, wall_s: float = 20.0) -> list[bool]:
    """Grade one source that computes nothing ``gradings`` times, one after
    another in ``sandbox``; it answers from what earlier gradings learned and
    stored in every channel of ``channels`` (``channels.SEQUENTIAL``). Whether
    each passed."""
    from glyph.sandbox import Limits
    source = channels.source(channels.SEQUENTIAL, secrets.token_hex(8), function)
    return [grader(sandbox, source, "", tests, Limits(cpu_s=10, wall_s=wall_s)) for _ in range(gradings)]


def collude_by_flock(sandbox, copies: int = 8, tests: str = MBPP_3_TESTS, function: str = "is_not_prime",
                     grader: Grader = glyph_grade) -> list[bool]:
    """Grade ``copies`` copies of a source that computes nothing at once; they
    pool what each learns over ``flock()`` on stdlib files every run sees
    (``channels.CONCURRENT``). Whether each passed."""
    source = channels.source(channels.CONCURRENT, secrets.token_hex(8), function)
    return collude(sandbox, copies, tests, function, source=source, grader=grader)


def carry_census(sandbox, value: int | None = None, tries: int = 1) -> dict:
    """One run stores ``value`` (under 256) in every channel, the next loads
    it: ``{channel: [stored, loaded]}`` (loaded None where the channel is
    not there). Where ``loaded == stored`` the state carried from one run to
    the next. The page cache is the host's: any process that reads one of
    its files between the two runs sets that bit (a CI run saw 173 load as
    1965), so up to ``tries`` censuses are taken, each on files a fresh token picks,
    and the first where the page cache carried ``value`` is returned (else
    the last)."""
    value = secrets.randbelow(256) if value is None else value
    for _ in range(tries):
        census = _census(sandbox, value)
        if census["page cache"] == [value, value]:
            break
    return census


def _census(sandbox, value: int) -> dict:
    from glyph.sandbox import Limits
    from glyph.sandbox.runtime import wire
    source = channels.source(channels.CENSUS, secrets.token_hex(8))
    out: dict = {}
    for expr in (f"store_all({value})", "load_all()"):
        run = sandbox.open({"mode": "solution"}, {"source": source.encode(), "setup": b""},
                           Limits(cpu_s=10, wall_s=20))
        try:
            if (run.recv() or {}).get("ev") != "ready":
                raise RuntimeError(f"the census run did not start: {run.stderr[-500:]!r}")
            run.send({"op": "eval", "id": 0, "expr": expr})
            resp = run.recv() or {}
            if "value" not in resp:
                raise RuntimeError(f"the census run failed: {resp}")
            out[expr] = wire.decode(resp["value"])
        finally:
            run.finish(kill=True)
            run.release()
    return {name: [value, loaded] for name, loaded in out["load_all()"].items()}


PIDS = r'''
import errno, os, time

def others(until):
    """The pids that kill(pid, 0) finds alive, but this run's own, probed until ``until`` (monotonic)."""
    seen = set()
    while True:
        for pid in range(1, 1 << 15):
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
                seen.add(pid)
            except PermissionError:
                seen.add(pid)
            except ProcessLookupError:
                pass
        if time.monotonic() >= until:
            return len(seen)
'''


def visible_pids(sandbox, copies: int = 4) -> list[int]:
    """``copies`` runs alive at once, each counting the pids ``kill(pid, 0)``
    finds (EPERM or success) but its own: in a pid namespace of its own,
    none."""
    import time

    from glyph.sandbox import Limits
    from glyph.sandbox.runtime import wire
    blobs = {"source": PIDS.encode(), "setup": b""}
    runs = [sandbox.open({"mode": "solution"}, blobs, Limits(cpu_s=10, wall_s=20)) for _ in range(copies)]
    try:
        for run in runs:
            if (run.recv() or {}).get("ev") != "ready":
                raise RuntimeError(f"a pid probe did not start: {run.stderr[-500:]!r}")
        until = time.monotonic() + 1.0  # every run alive while each probes
        for run in runs:
            run.send({"op": "eval", "id": 0, "expr": f"others({until!r})"})
        return [wire.decode((run.recv() or {}).get("value", {"i": "-0x1"})) for run in runs]
    finally:
        for run in runs:
            run.finish(kill=True)
            run.release()
