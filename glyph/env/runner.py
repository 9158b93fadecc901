"""The visible-test runner for container runtimes, where the container is the
isolation (no glyph sandbox service to reach). Stdlib only; shipped into
the runtime beside the agent program.

Runs solution + setup + tests in a fresh ``python3 -I`` in its own session
under the rollout's grading limits (the harness passes
``GlyphHarnessConfig.limits()`` in the program config: ``RLIMIT_CPU`` =
``cpu_s``, the whole session killed at ``wall_s``), and classifies the
outcome from a structured report the child writes to a pipe (phase and
exception class), never from its printed text. Either limit reached is
``TIMEOUT``, as glyph's grader classifies it. The child may lie in that
report: this runner is a convenience for the agent; every outcome it gives is
re-graded by the trusted grader in finalize under the same limits, and a
mismatch no re-grade reproduces marks the rollout tampered.

Not bridged: this is a second runner, not the grader's code (issue 11 asks
the container path to ship the local grading code instead).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile

from glyph.outcomes import outcome_of_exception

_CHILD = r"""
import json, os, resource, sys
cpu = int(sys.argv[4])  # SIGXCPU at the soft limit, SIGKILL one second on; before any solution code runs
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
fd = int(sys.argv[1])
def report(**kw):
    os.write(fd, json.dumps(kw).encode())
    os._exit(0)
def base(exc):
    return next(c.__name__ for c in type(exc).__mro__ if c.__module__ == "builtins")
src = open(sys.argv[2], "rb").read()
setup, tests = json.loads(open(sys.argv[3]).read())
try:
    code = compile(src, "solution.py", "exec", dont_inherit=True)
except (SyntaxError, ValueError) as exc:
    report(phase="compile", base="SyntaxError")
ns = {"__name__": "solution"}
try:
    exec(code, ns)
    exec(compile(setup, "<setup>", "exec"), ns)
    for t in tests:
        exec(compile(t, "<test>", "exec"), ns)
except BaseException as exc:
    report(phase="run", base=base(exc))
report(phase="done", base=None)
"""


def run_tests(source: str, setup: str, tests: list[str], cpu_s: float, wall_s: float) -> str:
    """The outcome class of running ``tests`` against ``source`` within
    ``cpu_s`` seconds of CPU (the child's own, rounded up to whole seconds:
    ``RLIMIT_CPU``'s unit) and ``wall_s`` of wall clock."""
    cpu = max(1, math.ceil(cpu_s))

    with tempfile.TemporaryDirectory(prefix="glyph-runner-") as tmp:
        sol, spec = os.path.join(tmp, "solution.py"), os.path.join(tmp, "tests.json")
        with open(sol, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(source)
        with open(spec, "w") as f:
            json.dump([setup, tests], f)
        r, w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-I", "-c", _CHILD, str(w), sol, spec, str(cpu)],
                                pass_fds=[w], cwd=tmp,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        os.close(w)
        try:
            proc.wait(timeout=wall_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = proc.wait()
        with os.fdopen(r, "rb") as f:
            raw = f.read(4096)
    if timed_out or (not raw and code == -signal.SIGXCPU):
        return "TIMEOUT"
    try:
        rep = json.loads(raw)
    except ValueError:
        return "OTHER"
    if rep.get("phase") == "done":
        return "PASS"
    return outcome_of_exception(str(rep.get("base")), compiling=rep.get("phase") == "compile").value
