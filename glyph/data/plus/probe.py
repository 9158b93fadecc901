"""Running a reference solution on probes, in glyph's sandbox (never in
this process), measured by a count, not a clock.

What it guarantees: every probe runs under a tracer (``_HELPER``, added to
the session's setup) that counts the trace events (calls, lines, returns,
exceptions) of the reference's own code (``solution.py`` and the test
setup) and stops the probe past ``cap`` of them. The count is a function of
the reference, the probe and what ran before it in the session, never of
the machine's speed or load, and so is every decision taken on it: an
``Answer`` is ``ok`` only when its probe returned within ``cap`` events,
without raising, plain data (the sandbox's wire types) that a literal of
at most ``MAX_REPR`` characters reproduces.

Two backstops see what the count cannot, work outside the reference's own
lines (one C-level operation on a huge list, ``sum(range(10**15))``): the
tracer also stops a probe past ``CPU_S`` of CPU time (checked every
``_CPU_EVERY`` events), and a probe still running after ``WALL_S`` is
killed. All three are one outcome (``OVER``: the same label, the same
``cap`` counted against the batch's ``RUN_OPS``, and a fresh session for
the next probe), so that which of them stopped a probe, which the load can
change, changes no byte of what is written. A batch stops after
``RUN_OPS`` events, ``MAX_OVER`` probes over their limit, or
``MAX_KILLS`` of them killed by the wall clock (the rest ``skipped``; the
last bounds the time a task whose every probe never returns can take, and
is the one rule a clock can move: a probe must spend under ``CPU_S`` of
CPU yet over ``WALL_S`` of wall clock to be killed in one run and not
another). A session that ends under a probe (its own limits) is
replaced and the probe retried once in the fresh one. ``SeedSandboxes``
starts servers whose hash seeds differ (checked by asking each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from glyph.data.plus.plain import MAX_REPR, renders
from glyph.sandbox import Limits, Run, Sandbox, SandboxUnavailable
from glyph.sandbox.runtime import wire

SEEDS = 3  # sandbox servers, each with its own hash seed
OPS_FLOOR = 200_000  # trace events of the reference's code a probe may always spend ...
OPS_FACTOR = 10  # ... or this many times the most a visible test spends ...
OPS_CEIL = 10_000_000  # ... but never more (about a second, traced, on a 2-core machine)
RUN_OPS = 50_000_000  # events one batch may spend (a probe over its limit counts its cap); the rest skipped
CPU_S = 5.0  # backstop: CPU seconds a probe may spend (work the count cannot see)
WALL_S = 60.0  # backstop: a probe still running after this long is killed (one C call that never returns)
MAX_OVER = 100  # probes over their limit before a task stops trying more ...
MAX_KILLS = 3  # ... or probes killed at WALL_S
OVER = "over its limit"
SESSION_LIMITS = Limits(cpu_s=300, wall_s=600, memory_bytes=512 << 20)
_HASH_PROBE = "hash('glyph plus tests')"
_CPU_EVERY = 256

_FN = "__glyph_plus_probe__"
# The tracer, defined in each probing session after the reference and its setup. It counts the events
# of frames whose code is the reference's or the setup's (not the stdlib's, not this function's) and
# raises a BaseException past the cap (or CPU_S); a reference that catches it has run over all the same.
_HELPER = f'''
def {_FN}(thunk, cap, cpu_s):
    import sys
    import time
    files = ("solution.py", "<test setup>")
    spent = 0
    over = False
    start = time.process_time()

    class OverLimit(BaseException):
        pass

    def local(frame, event, arg):
        nonlocal spent, over
        spent += 1
        if spent > cap or (spent % {_CPU_EVERY} == 0 and time.process_time() - start > cpu_s):
            over = True
            raise OverLimit
        return local

    def call(frame, event, arg):
        if frame.f_code.co_filename in files:
            return local(frame, event, arg)
        return None

    status, value = "ok", None
    sys.settrace(call)
    try:
        value = thunk()
    except BaseException:
        status = "raised"
    finally:
        sys.settrace(None)
    if over or time.process_time() - start > cpu_s:
        return [spent, "over", None]
    return [spent, status, value]
'''


def helper_setup(setup: str) -> str:
    """A probing session's setup: the task's, then the tracer."""
    return setup + "\n" + _HELPER


def traced(probe: str, cap: int) -> str:
    """The expression a session evaluates for ``probe``: [events, status, value]."""
    return f"{_FN}(lambda: (\n{probe}\n), {int(cap)}, {CPU_S!r})"


@dataclass
class Answer:
    """One probe's fate in one run: ``value`` set when it answered plain data;
    ``ops``: the trace events it counts against its batch."""

    ok: bool
    value: Any = None
    ops: int = 0
    why: str = ""


class Runner:
    """Evaluates probes against a reference in one sandbox server: a session
    per batch, a fresh one after a probe over its limit or one that ends the session."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def _open(self, source: bytes, setup: str) -> Run | None:
        blobs = {"source": source, "setup": helper_setup(setup).encode()}
        run = self.sandbox.open({"mode": "solution"}, blobs, SESSION_LIMITS)
        msg = run.recv()
        if msg is not None and msg.get("ev") == "ready":
            return run
        run.finish(kill=True)
        return None

    def evaluate(self, source: str, setup: str, probes: list[str], cap: int, over: list[str],
                 budget: int = RUN_OPS) -> list[Answer]:
        """One answer per probe, in order, each stopped at ``cap`` events; after
        ``budget`` events spent, ``MAX_OVER`` probes over their limit or ``MAX_KILLS``
        killed (tallied in ``over``, shared by a task's batches), the rest are ``skipped``."""
        answers: list[Answer] = []
        src = source.encode()
        session: list[Run | None] = [None]
        spent = 0
        for probe in probes:
            if spent >= budget or len(over) >= MAX_OVER or over.count("killed") >= MAX_KILLS:
                answers.append(Answer(False, why="skipped"))
                continue
            answer, killed = self._one(src, setup, probe, cap, len(answers), session)
            if answer.why == "the run ended":  # a session limit, perhaps reached under load: once more, fresh
                answer, killed = self._one(src, setup, probe, cap, len(answers), session)
            if answer.why == OVER:
                over.append("killed" if killed else "stopped")
                self._close(session, kill=True)  # however it was stopped, the next probe starts fresh
            spent += answer.ops
            answers.append(answer)
        self._close(session)
        return answers

    @staticmethod
    def _close(session: list, kill: bool = False) -> None:
        run = session[0]
        session[0] = None
        if run is None:
            return
        if not kill:
            run.send({"op": "exit"})
        run.finish(kill=kill)

    def _one(self, src: bytes, setup: str, probe: str, cap: int, rid: int, session: list
             ) -> tuple[Answer, bool]:
        """The probe's answer, and whether the wall clock killed it."""
        if session[0] is None:
            session[0] = self._open(src, setup)
            if session[0] is None:
                return Answer(False, why="the reference did not load"), False
        run = session[0]
        resp = None
        if run.send({"op": "eval", "id": rid, "expr": traced(probe, cap)}):
            try:
                resp = run.recv(timeout=WALL_S)
            except TimeoutError:
                return Answer(False, ops=cap, why=OVER), True  # evaluate replaces the session
        return self._read(resp, cap, rid, session), False

    def _read(self, resp: dict | None, cap: int, rid: int, session: list) -> Answer:
        if resp is None:
            self._close(session, kill=True)
            return Answer(False, ops=cap, why="the run ended")
        if resp.get("ev") != "ret" or resp.get("id") != rid:
            self._close(session, kill=True)
            return Answer(False, why="out of turn")
        if "exc" in resp:  # the tracer itself failed (the reference's own exceptions come back as "raised")
            return Answer(False, why="raised")
        if "notplain" in resp:
            return Answer(False, why="not plain data")
        try:
            ops, status, value = wire.decode(resp.get("value"))
        except (wire.WireError, TypeError, ValueError):
            return Answer(False, why="malformed")
        if type(ops) is not int:
            return Answer(False, why="malformed")
        if status == "over":
            return Answer(False, ops=cap, why=OVER)
        if status != "ok":
            return Answer(False, ops=ops, why="raised")
        if not renders(value) or len(repr(value)) > MAX_REPR:
            return Answer(False, value, ops, why="no literal reproduces it")
        return Answer(True, value, ops)


class SeedSandboxes:
    """``SEEDS`` sandbox servers whose hash seeds differ (checked)."""

    def __init__(self, n: int = SEEDS, pool: int = 1, mode: str | None = None) -> None:
        self.sandboxes: list[Sandbox] = []
        hashes: set[int] = set()
        try:
            while len(self.sandboxes) < n:
                sb = Sandbox(mode=mode, pool=pool)
                h = self._hash(sb)
                if h in hashes:  # the same random seed twice: start another
                    sb.close()
                    continue
                hashes.add(h)
                self.sandboxes.append(sb)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _hash(sb: Sandbox) -> int:
        run = sb.open({"mode": "solution"}, {"source": b"", "setup": b""}, Limits(cpu_s=5, wall_s=10))
        ready = run.recv()
        resp = run.recv() if ready and ready.get("ev") == "ready" and \
            run.send({"op": "eval", "id": 0, "expr": _HASH_PROBE}) else None
        run.finish(kill=True)
        if resp is None or "value" not in resp:
            raise SandboxUnavailable(f"the sandbox did not answer {_HASH_PROBE}: {resp}")
        return wire.decode(resp["value"])

    def close(self) -> None:
        for sb in self.sandboxes:
            sb.close()


def ops_cap(seed_ops: list[int]) -> int:
    """Per-probe cap, in trace events: scaled from the most a visible test spent."""
    return min(OPS_CEIL, max(OPS_FLOOR, OPS_FACTOR * max(seed_ops, default=0)))
