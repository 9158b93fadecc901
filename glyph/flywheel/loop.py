"""The lesson loop: reinforcement learning at the context layer.

1. Baseline: every holdout task K times with no lessons; reward 1 when the
   hidden test passes (``conventions.grade``, glyph's grader).
2. Rounds: the train tasks K times each with the kept lessons; the failures
   clustered by mode (by outcome signature, ``OUTCOME[:ExceptionClass]``,
   where a task has no mode); the writer distils one lesson from the largest
   cluster not yet tried (ties by name), seeing train rollouts only; the
   holdout re-rolled K times with the kept lessons plus the candidate;
   ``gain = rate(with) - rate(accepted level)``, and the gate (``gate.py``)
   decides. A kept lesson's holdout rate becomes the accepted level. The
   loop stops after two consecutive rejections, when no untried cluster is
   left, or at ``max_rounds``.
3. With ``--gate aa``, between the two: the holdout re-rolled ``aa_runs``
   times with no lesson (phase ``aa``, round = re-roll index), whose
   pairwise rate differences give the A/A band (``gate.aa_band``) every
   round's gain is held to. ``Flywheel.measure_aa`` does this step alone
   (``glyph flywheel aa``), into a directory ``run --gate aa`` resumes.

What it guarantees:

* Every rollout is stored (``store.py``) before it is counted; a rerun on
  the same directory and configuration reuses every stored rollout (and
  every stored lesson) and requests only what is missing, so an interrupted
  run resumes to the same result as an uninterrupted one.
* A model call that fails after its retries is recorded as excluded with
  its reason and never scored: rates are over scored rollouts, a
  comparison uses the tasks with scored rollouts on both sides, and
  dropped tasks and exclusions are counted in the run document.
* Grades are cached by (task id, sha256 of the code) within a process. This
  is sound because the grader is deterministic for these tasks (small pure
  functions under generous limits); a solution near a time limit could in
  principle grade differently twice, and then the first grade stands.
* Model calls and gradings run on ``concurrency`` threads (the sandbox
  client is thread-safe); records are written by the calling thread only.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from glyph.agent.trace import sha256
from glyph.data import conventions
from glyph.data.conventions import ConventionTask
from glyph.errors import ConfigError
from glyph.flywheel import gate as gates
from glyph.flywheel.agents import Agent, ModelCallFailed, RolloutKey
from glyph.flywheel.options import RunConfig
from glyph.flywheel.store import Store, fingerprint
from glyph.flywheel.writers import Cluster, Failure, Writer
from glyph.report.stats import Bootstrap, wilson

MAX_REJECTIONS = 2
_EXC_CLASS = re.compile(r"^([A-Z][\w.]*):")


class FlywheelError(ConfigError):
    """The run cannot start (an empty split, a bad task file)."""


@dataclass(frozen=True)
class Graded:
    outcome: str
    signature: str
    detail: str
    passed: bool


def signature_of(outcome: str, detail: str) -> str:
    """``OUTCOME`` or ``OUTCOME:ExceptionClass`` (the class the first failing
    check reports; ``AssertionError`` is implied by ASSERTION_FAILURE)."""
    m = _EXC_CLASS.match(detail or "")
    exc = m.group(1) if m else ""
    if not exc or (outcome == "ASSERTION_FAILURE" and exc == "AssertionError"):
        return outcome
    return f"{outcome}:{exc}"


class GradeCache:
    """``conventions.grade`` once per (task id, sha256 of code); safe from threads."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str], Graded] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self.gradings = 0

    def grade(self, task: ConventionTask, code: str) -> Graded:
        key = (task.id, sha256(code))
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._done:
                g = conventions.grade(task, code)
                failing = next((c for c in g.checks if c.outcome is not None and not c.passed), None)
                detail = failing.detail if failing is not None and failing.detail else g.detail
                self._done[key] = Graded(g.outcome.value, signature_of(g.outcome.value, detail), detail, g.passed)
                self.gradings += 1
            return self._done[key]


# ---------------------------------------------------------------- rates


def task_rates(by_task: dict[str, list[dict]]) -> dict[str, float]:
    """Per task, the pass rate over its scored rollouts (tasks with none left out)."""
    out = {}
    for task, rows in by_task.items():
        scored = [r["reward"] for r in rows if not r["excluded"]]
        if scored:
            out[task] = sum(scored) / len(scored)
    return out


def counts(by_task: dict[str, list[dict]], tasks: Iterable[str] | None = None) -> tuple[int, int]:
    """(passes, scored rollouts) over the scored rollouts of ``tasks`` (default all)."""
    keep = set(by_task) if tasks is None else set(tasks)
    scored = [r["reward"] for t, rows in by_task.items() if t in keep for r in rows if not r["excluded"]]
    return sum(scored), len(scored)


def pooled(by_task: dict[str, list[dict]], tasks: Iterable[str] | None = None) -> tuple[float | None, int]:
    """(pass rate over the scored rollouts of ``tasks`` (default all), scored count)."""
    passes, n = counts(by_task, tasks)
    return (passes / n if n else None), n


CURVE_INTERVAL = {"method": "wilson", "level": 0.95,
                  "of": "each curve point's pass rate over the scored holdout rollouts of its measurement "
                        "(n)",
                  "assumes": "rollouts independent: a task's K rollouts count as K draws",
                  "clustered": {"method": "task cluster bootstrap", "level": 0.95, "resamples": 2000,
                                "seed": 0,
                                "of": "the same pooled rate, tasks resampled with their rollouts "
                                      "(task_lo/task_hi, candidate_task_lo/candidate_task_hi)",
                                "assumes": "tasks exchangeable draws from a population of tasks; a task's "
                                           "rollouts may be correlated"}}
"""What a curve point's intervals are: ``lo``/``hi`` (the accepted level) and ``candidate_lo``/
``candidate_hi`` Wilson's, ``task_lo``/``task_hi`` and ``candidate_task_*`` the task cluster bootstrap's."""
_CLUSTERED = Bootstrap(resamples=CURVE_INTERVAL["clustered"]["resamples"],
                       seed=CURVE_INTERVAL["clustered"]["seed"])


def rate_interval(by_task: dict[str, list[dict]] | None, prefix: str = "") -> dict:
    """``{prefix}lo``, ``{prefix}hi``, ``{prefix}n``: the 95% Wilson interval
    (``glyph.report.stats.wilson``, the report's) of the pooled rate of
    ``by_task`` and its scored count; ``{prefix}task_lo``/``task_hi``: the 95%
    interval of the same rate from a cluster bootstrap over tasks (the report's
    ``Bootstrap.ratio``: tasks resampled with all their rollouts, so
    correlation within a task widens it); all ``None`` for no measurement."""
    keys = [f"{prefix}{k}" for k in ("lo", "hi", "n", "task_lo", "task_hi")]
    if by_task is None:
        return dict.fromkeys(keys)
    passes, n = counts(by_task)
    ci = wilson(passes, n)
    per_task = [counts(by_task, [t]) for t in sorted(by_task)]
    per_task = [(p, m) for p, m in per_task if m]
    clustered = (_CLUSTERED.ratio(np.array([[p] for p, _ in per_task]), np.array([[m] for _, m in per_task]),
                                  "flywheel-curve") if per_task else None)
    values = (ci[0] if ci else None, ci[1] if ci else None, n,
              clustered[0] if clustered else None, clustered[1] if clustered else None)
    return {k: (v if k.endswith("n") else _r(v)) for k, v in zip(keys, values)}


def curve_point(round_: int, level: float | None, level_rows: dict[str, list[dict]], cand_rows=None, **fields) -> dict:
    """One learning-curve point: the accepted level and the candidate (rate,
    intervals, count), then ``fields`` (kept, level_before, band_pp, decisions)."""
    cand = None if cand_rows is None else pooled(cand_rows)[0]
    return ({"round": round_, "accepted": _r(level), "candidate": _r(cand)} | fields | rate_interval(level_rows)
            | rate_interval(cand_rows, "candidate_"))


def clusters(train: dict[str, list[dict]], tasks: dict[str, ConventionTask]) -> list[Cluster]:
    """The scored failures of the train rollouts, grouped by mode (or outcome
    signature for mode-less tasks), largest first, ties by name."""
    groups: dict[str, list[Failure]] = {}
    modes: dict[str, str] = {}
    for task_id in sorted(train):
        t = tasks[task_id]
        for r in sorted(train[task_id], key=lambda r: r["k"]):
            if r["excluded"] or r["reward"]:
                continue
            name = t.mode or r["signature"]
            modes[name] = t.mode
            groups.setdefault(name, []).append(Failure(task=t.id, split=t.split, spec=t.spec, code=r["code"],
                                                       outcome=r["outcome"], detail=r["detail"]))
    out = [Cluster(name, modes[name], tuple(fs)) for name, fs in groups.items()]
    return sorted(out, key=lambda c: (-c.size, c.name))


# ---------------------------------------------------------------- the loop


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


class Flywheel:
    """One run: ``Flywheel(config, out, agent, writer).run()`` returns the run document."""

    def __init__(self, config: RunConfig, out: str | Path, agent: Agent, writer: Writer, *,
                 tasks: Sequence[ConventionTask] | None = None, concurrency: int = 8,
                 progress: bool = True, console=None, retry_excluded: bool = False) -> None:
        self.config, self.out, self.agent, self.writer = config, Path(out), agent, writer
        self.tasks = list(tasks) if tasks is not None else conventions.load_tasks(config.tasks)
        self.by_id = {t.id: t for t in self.tasks}
        self.holdout = conventions.split(self.tasks, "holdout")
        self.train = conventions.split(self.tasks, "train")
        for name, part in (("holdout", self.holdout), ("train", self.train)):
            if not part:
                raise FlywheelError(f"{config.tasks}: no {name} tasks (the loop needs both splits)")
        self.concurrency = max(1, concurrency)
        self.progress, self.console, self.retry_excluded = progress, console, retry_excluded
        self.grades = GradeCache()
        self.calls = 0  # agent calls this process made (reused rollouts make none)
        self._count_lock = threading.Lock()
        self._excluded: dict[str, int] = {}
        self.dropped = 0  # (comparison, task) pairs left out: every rollout of the task excluded
        self.aa: gates.AABand | None = None

    # -- rollouts

    def _rollout(self, task: ConventionTask, lessons: list[str], key: RolloutKey, fp: str) -> dict:
        t0 = time.perf_counter()
        base = {"phase": key.phase, "round": key.round, "task": task.id, "split": task.split, "k": key.k,
                "lessons": fp}
        try:
            reply = self.agent.reply(conventions.messages(task, lessons), key)
        except ModelCallFailed as exc:
            return base | {"reply": None, "code": None, "outcome": None, "signature": None, "detail": "",
                           "reward": None, "excluded": True, "reason": exc.reason,
                           "seconds": round(time.perf_counter() - t0, 4)}
        code = conventions.extract_code(reply)
        g = self.grades.grade(task, code)
        return base | {"reply": reply, "code": code, "outcome": g.outcome, "signature": g.signature,
                       "detail": g.detail, "reward": int(g.passed), "excluded": False, "reason": "",
                       "seconds": round(time.perf_counter() - t0, 4)}

    def _phase(self, store: Store, bars, phase: str, round_: int, tasks: list[ConventionTask],
               lessons: list[str], label: str) -> dict[str, list[dict]]:
        fp = fingerprint(lessons)
        K = self.config.K
        keys = [(t, RolloutKey(phase, round_, t.id, k)) for t in tasks for k in range(K)]
        todo = [(t, key) for t, key in keys if store.get((phase, round_, t.id, key.k, fp)) is None]
        bar = bars.add_task(label, total=len(keys), completed=len(keys) - len(todo)) if bars else None
        if todo:
            self._run_jobs(store, bars, bar, todo, lessons, fp)
        rows = {t.id: [store.get((phase, round_, t.id, k, fp)) for k in range(K)] for t in tasks}
        n_excluded = sum(r["excluded"] for rs in rows.values() for r in rs)
        if n_excluded == len(keys):
            reasons = Counter(r["reason"] for rs in rows.values() for r in rs)
            raise FlywheelError(
                f"every rollout of {label} was excluded (model calls failed after their retries), "
                f"most often: {reasons.most_common(1)[0][0]}. Fix the endpoint, then rerun the same command "
                "with --retry-excluded to request them again.")
        if n_excluded:
            self._excluded[phase] = self._excluded.get(phase, 0) + n_excluded
        return rows

    def _run_jobs(self, store: Store, bars, bar, todo, lessons: list[str], fp: str) -> None:
        """Run the rollouts on the pool, storing each as it finishes. On any
        exception (a crash, Ctrl-C) every rollout already finished is stored
        before it propagates; the ones in flight are lost and rerun on resume."""
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="flywheel")
        pending: set[Future] = set()
        queue = iter(todo)

        def fill() -> None:  # at most 2 x concurrency submitted ahead, so a crash loses little
            for t, key in queue:
                pending.add(pool.submit(self._call, t, lessons, key, fp))
                if len(pending) >= 2 * self.concurrency:
                    break

        def store_finished(futures) -> BaseException | None:
            first = None
            for fut in futures:
                if not fut.done() or fut.cancelled():
                    continue
                exc = fut.exception()
                if exc is None:
                    store.put(fut.result())
                    if bars:
                        bars.advance(bar)
                elif first is None:
                    first = exc
            return first

        try:
            fill()
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                exc = store_finished(done)
                if exc is not None:
                    raise exc
                fill()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            store_finished(pending)
            raise
        pool.shutdown(wait=True)

    def _call(self, task, lessons, key, fp) -> dict:
        with self._count_lock:
            self.calls += 1
        return self._rollout(task, lessons, key, fp)

    def _aa(self, store: Store, bars, runs: int) -> gates.AABand:
        """The holdout re-rolled ``runs`` times with no lesson; the A/A band of their rates."""
        fp, K = fingerprint([]), self.config.K
        keys = [(t, RolloutKey("aa", r, t.id, k)) for r in range(runs) for t in self.holdout for k in range(K)]
        todo = [(t, key) for t, key in keys if store.get(("aa", key.round, t.id, key.k, fp)) is None]
        bar = (bars.add_task(f"A/A ({runs} re-rolls)", total=len(keys), completed=len(keys) - len(todo))
               if bars else None)
        if todo:
            self._run_jobs(store, bars, bar, todo, [], fp)
        rates = []
        for r in range(runs):
            rows = [store.get(("aa", r, t.id, k, fp)) for t in self.holdout for k in range(K)]
            scored = [x["reward"] for x in rows if not x["excluded"]]
            if len(scored) < len(rows):
                self._excluded["aa"] = self._excluded.get("aa", 0) + len(rows) - len(scored)
            if not scored:
                raise FlywheelError(f"every rollout of A/A re-roll {r} was excluded (model calls failed after "
                                    "their retries); fix the endpoint and rerun with --retry-excluded")
            rates.append(sum(scored) / len(scored))
        return gates.aa_band(rates)

    def measure_aa(self, runs: int) -> dict:
        """Only the A/A measurement (``runs`` no-lesson re-rolls of the holdout),
        stored in the run directory; returns the bands document (:meth:`bands`)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        t0 = time.perf_counter()
        with Store(self.out, self.config, retry_excluded=self.retry_excluded) as store:
            bars_cm = (Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console, transient=False)
                       if self.progress else nullcontext(None))
            with bars_cm as bars:
                self.aa = self._aa(store, bars, runs)
            self.reused = store.reused
        self.seconds = time.perf_counter() - t0
        return {"K": self.config.K, "n_holdout": len(self.holdout), "seed": self.config.seed,
                "agent": self._agent_json(), "bands": self.bands(),
                "excluded": {"rollouts": sum(self._excluded.values()), "by_phase": dict(sorted(self._excluded.items()))},
                "tasks": self.config.tasks, "tasks_sha256": self.config.tasks_sha256}

    def bands(self) -> dict:
        """The three noise bands side by side (pp), and which one gates."""
        n = len(self.holdout) * self.config.K
        return {"formula_pp": _r(100 * gates.band_for(n), 4), "two_rate_pp": _r(100 * gates.two_rate_band(n), 4),
                "aa_pp": None if self.aa is None else _r(100 * self.aa.band, 4),
                "aa": None if self.aa is None else self.aa.to_json(),
                "gated_by": {"band": "formula", "paired": "paired", "aa": "aa"}[self.config.gate]}

    def _agent_json(self) -> dict:
        cfg = self.config
        return {"kind": cfg.agent, "base_url": cfg.base_url, "model": cfg.model, "p_lucky": cfg.p_lucky,
                "p_slip": cfg.p_slip}

    # -- comparison

    def _compare(self, cand: dict[str, list[dict]], level: dict[str, list[dict]]) -> dict:
        cr, lr = task_rates(cand), task_rates(level)
        common = sorted(set(cr) & set(lr))
        self.dropped += len(self.holdout) - len(common)
        with_rate, n_with = pooled(cand, common)
        level_rate, _ = pooled(level, common)
        gain = (with_rate - level_rate) if with_rate is not None and level_rate is not None else math.nan
        band = gates.band_for(n_with) if n_with else math.inf
        paired = gates.paired({t: cr[t] for t in common}, {t: lr[t] for t in common})
        keep = gates.decide(self.config.gate, gain, band, paired, self.aa)
        return {"gain": gain, "band": band, "paired": paired, "keep": keep, "n_tasks": len(common),
                "gates": gates.decisions(gain, band, paired, self.aa)}

    # -- the run

    def run(self) -> dict:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        cfg = self.config
        t0 = time.perf_counter()
        with Store(self.out, cfg, retry_excluded=self.retry_excluded) as store:
            for note in store.notes:
                if self.console is not None:
                    self.console.print(f"[yellow]{note}[/]")
            bars_cm = (Progress(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console, transient=False)
                       if self.progress else nullcontext(None))
            with bars_cm as bars:
                doc = self._loop(store, bars)
            self.reused = store.reused
        self.seconds = time.perf_counter() - t0
        return doc

    def _loop(self, store: Store, bars) -> dict:
        cfg = self.config
        baseline = self._phase(store, bars, "baseline", 0, self.holdout, [], "baseline (holdout)")
        level_rows = baseline
        base_rate, _ = pooled(baseline)
        level = base_rate
        if cfg.gate == "aa":
            self.aa = self._aa(store, bars, cfg.aa_runs)
        kept: list[str] = []
        tried: set[str] = set()
        lessons: list[dict] = []
        curve: list[dict] = [curve_point(0, level, level_rows, kept=None, band_pp=None)]
        rejections, writer_failures, stop = 0, 0, f"max rounds ({cfg.max_rounds})"
        for rnd in range(1, cfg.max_rounds + 1):
            train = self._phase(store, bars, "train", rnd, self.train, kept, f"round {rnd} train")
            untried = [c for c in clusters(train, self.by_id) if c.name not in tried]
            if not untried:
                stop = "no untried failure cluster"
                break
            cluster = untried[0]
            tried.add(cluster.name)
            stored = store.lesson(rnd, cluster.name)
            if stored is None:
                try:
                    stored = {"round": rnd, "cluster": cluster.name, "text": self.writer.write(cluster), "error": ""}
                except ModelCallFailed as exc:
                    stored = {"round": rnd, "cluster": cluster.name, "text": "", "error": exc.reason}
                stored = store.put_lesson(stored)
            entry = {"round": rnd, "mode": cluster.name, "text": stored["text"], "cluster_size": cluster.size}
            if stored["error"]:
                writer_failures += 1
                lessons.append(entry | {"gain_pp": None, "band_pp": None, "paired": None, "candidate": None,
                                        "kept": False, "error": stored["error"]}
                               | gates.lesson_fields(None, cfg.gate))
                curve.append(curve_point(rnd, level, level_rows, kept=False, band_pp=None, decisions=None))
                continue
            hold = self._phase(store, bars, "holdout", rnd, self.holdout, kept + [stored["text"]],
                               f"round {rnd} holdout")
            cmp = self._compare(hold, level_rows)
            cand_rate, _ = pooled(hold)
            lessons.append(entry | {"gain_pp": _r(100 * cmp["gain"], 4), "band_pp": _r(100 * cmp["band"], 4),
                                    "paired": cmp["paired"].to_json(), "candidate": _r(cand_rate),
                                    "kept": cmp["keep"], "error": ""}
                           | gates.lesson_fields(cmp["gates"], cfg.gate))
            band_level = level
            if cmp["keep"]:
                kept.append(stored["text"])
                level_rows, level, rejections = hold, cand_rate, 0
            else:
                rejections += 1
            curve.append(curve_point(rnd, level, level_rows, hold, kept=cmp["keep"], level_before=_r(band_level),
                                     band_pp=_r(100 * (self.aa.band if cfg.gate == "aa" else cmp["band"]), 4),
                                     decisions=gates.verdicts(cmp["gates"])))
            if rejections >= MAX_REJECTIONS:
                stop = f"{MAX_REJECTIONS} consecutive rejections"
                break
        return self._document(store, base_rate, level, kept, lessons, curve, stop, writer_failures)

    def _document(self, store, base_rate, final, kept, lessons, curve, stop, writer_failures) -> dict:
        cfg = self.config
        excluded = self._excluded
        gain = None if base_rate is None or final is None else final - base_rate
        return {
            "baseline": _r(base_rate), "final": _r(final), "gain_pp": _r(None if gain is None else 100 * gain, 4),
            "noise_band_pp": _r(100 * gates.band(len(self.holdout), cfg.K), 4),
            "K": cfg.K, "n_holdout": len(self.holdout), "n_train": len(self.train), "gate": cfg.gate,
            "seed": cfg.seed,
            "agent": self._agent_json(),
            "writer": {"kind": cfg.writer, "base_url": cfg.writer_base_url, "model": cfg.writer_model},
            "excluded": {"rollouts": sum(excluded.values()), "by_phase": dict(sorted(excluded.items())),
                         "tasks_dropped": self.dropped, "writer_failures": writer_failures},
            "rounds": len(curve) - 1, "stop": stop, "kept_lessons": kept,
            "lessons": lessons, "curve": curve, "curve_interval": CURVE_INTERVAL,
            "tasks": cfg.tasks, "tasks_sha256": cfg.tasks_sha256,
            "bands": self.bands(),
        }
