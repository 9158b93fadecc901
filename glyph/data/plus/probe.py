"""Running a reference solution on probes, in glyph's sandbox (never in
this process).

What it guarantees: an ``Answer`` is ``ok`` only when its probe returned
within the time limit, without raising, plain data (the sandbox's wire
types) that a literal of at most ``MAX_REPR`` characters reproduces; a
probe still running just past its limit is killed and its session
replaced by a fresh one; a batch stops at its deadline or after
``MAX_HANGS`` kills (the rest ``skipped``). ``SeedSandboxes`` starts
servers whose hash seeds differ (checked by asking each).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from glyph.data.plus.plain import MAX_REPR, renders
from glyph.sandbox import Limits, Run, Sandbox, SandboxUnavailable
from glyph.sandbox.runtime import wire

SEEDS = 3  # sandbox servers, each with its own hash seed
PROBE_FLOOR_S = 0.05  # a probe may always take this long (wall clock, IPC included)
PROBE_FACTOR = 10  # ... or this many times the slowest visible test
PROBE_CAP_S = 1.0  # ... but never longer
MAX_HANGS = 30  # probes killed at their limit before a task stops trying more
SESSION_LIMITS = Limits(cpu_s=30, wall_s=60, memory_bytes=512 << 20)
_HASH_PROBE = "hash('glyph plus tests')"


@dataclass
class Answer:
    """One probe's fate in one run: ``value`` set when it answered plain data."""

    ok: bool
    value: Any = None
    seconds: float = 0.0
    why: str = ""


class Runner:
    """Evaluates probes against a reference in one sandbox server: a
    session per batch, a fresh one after a probe is killed or fails the run."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def _open(self, source: bytes, setup: str) -> Run | None:
        run = self.sandbox.open({"mode": "solution"}, {"source": source, "setup": setup.encode()}, SESSION_LIMITS)
        msg = run.recv()
        if msg is not None and msg.get("ev") == "ready":
            return run
        run.finish(kill=True)
        return None

    def evaluate(self, source: str, setup: str, probes: list[str], limit_s: float,
                 deadline: float, hangs: list[int]) -> list[Answer]:
        answers: list[Answer] = []
        run: Run | None = None
        src = source.encode()
        for probe in probes:
            if time.monotonic() > deadline or len(hangs) >= MAX_HANGS:
                answers.append(Answer(False, why="skipped"))
                continue
            if run is None:
                run = self._open(src, setup)
                if run is None:
                    answers.append(Answer(False, why="the reference did not load"))
                    continue
            t0 = time.perf_counter()
            resp, killed = None, False
            if run.send({"op": "eval", "id": len(answers), "expr": probe}):
                try:
                    resp = run.recv(timeout=limit_s + 0.02)  # a probe over the limit is dropped anyway
                except TimeoutError:
                    killed = True
            seconds = time.perf_counter() - t0
            if killed or resp is None:
                if killed:
                    hangs.append(1)
                answers.append(Answer(False, seconds=seconds, why="killed at its limit" if killed else "the run ended"))
                run.finish(kill=True)
                run = None
                continue
            if resp.get("ev") != "ret" or resp.get("id") != len(answers):
                answers.append(Answer(False, why="out of turn"))
                run.finish(kill=True)
                run = None
                continue
            if "exc" in resp:
                answers.append(Answer(False, seconds=seconds, why="raised"))
            elif "notplain" in resp:
                answers.append(Answer(False, seconds=seconds, why="not plain data"))
            else:
                try:
                    value = wire.decode(resp.get("value"))
                except wire.WireError:
                    answers.append(Answer(False, seconds=seconds, why="malformed"))
                    continue
                if seconds > limit_s:
                    answers.append(Answer(False, value, seconds, why="over the time limit"))
                elif not renders(value) or len(repr(value)) > MAX_REPR:
                    answers.append(Answer(False, value, seconds, why="no literal reproduces it"))
                else:
                    answers.append(Answer(True, value, seconds))
        if run is not None:
            run.send({"op": "exit"})
            run.finish()
        return answers


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


def probe_limit(seed_seconds: list[float]) -> float:
    """Per-probe time limit: scaled from the reference's slowest visible test."""
    return min(PROBE_CAP_S, max(PROBE_FLOOR_S, PROBE_FACTOR * max(seed_seconds, default=0.0)))
