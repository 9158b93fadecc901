"""The glyph-mbpp taskset and task: rows from ``glyph.tasks.mbpp``, trusted
finalize (``glyph.env.verify``) and the study's reward and metrics.

``hidden`` decides what the reward grades: ``base`` (the study's: the task's
hidden tests) or ``plus`` (those, then the plus tests ``glyph data plus``
generated from the reference solution). Wherever a task's plus tests are
found (``plus_path``) finalize grades both and records each as a metric, so
one run gives pass@1 on both."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import verifiers.v1 as vf

from glyph.env.verify import TaskTests, metric_defaults, verify
from glyph.protocol import SOLUTION_FILE
from glyph.sandbox import Limits
from glyph.tasks import mbpp, plus
from glyph.vfcompat import timed_out

TRACE_FILE = ".glyph/trace.json"
MAX_TRACE_BYTES = 32 << 20


class GlyphData(vf.TaskData):
    """One MBPP task for one arm. ``hidden_*`` are graded on the trusted side
    only (they are recorded in the eval output, never given to the program)."""

    arm: Literal["a", "b"] = "a"
    task_text: str = ""
    visible_tests: list[str] = []
    hidden_setup: str = ""
    hidden_tests: list[str] = []
    plus_tests: list[str] | None = None
    """Generated plus tests (graded after ``hidden_tests``); None: not available."""
    hidden: Literal["base", "plus"] = "base"
    reference: str = ""


class GlyphTask(vf.Task[GlyphData]):
    grade_limits = Limits(cpu_s=10, wall_s=20)

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Re-grade everything the rollout claims (never raises: a failure
        here is recorded and scored 0, so no rollout goes unscored)."""
        try:
            raw = await _read(runtime, TRACE_FILE)
            final = await _read(runtime, SOLUTION_FILE)
            try:
                data = json.loads(raw) if raw is not None else None
            except ValueError:
                data = "unparseable"
            d = self.data
            tests = TaskTests(d.hidden_setup, tuple(d.visible_tests), tuple(d.hidden_tests),
                              None if d.plus_tests is None else tuple(d.plus_tests), d.hidden)
            service_log = trace.info.get("glyph_service_log")
            info = await asyncio.to_thread(verify, data, final, tests, self.grade_limits, service_log,
                                           trace.info.get("glyph_program"))
        except Exception as exc:  # deliberate: record the fault, score 0
            info = {"reward": 0.0, "reason": f"finalize failed: {type(exc).__name__}: {exc}",
                    "metrics": metric_defaults(self.data.plus_tests is not None), "candidates": []}
        if timed_out(trace):
            info["reason"] = "the rollout timed out; " + info["reason"]
        trace.info["glyph"] = info

    @vf.reward(weight=1.0)
    async def passed(self, trace: vf.Trace) -> float:
        return float(trace.info.get("glyph", {}).get("reward", 0.0))

    @vf.metric
    async def glyph_metrics(self, trace: vf.Trace) -> dict[str, float]:
        return dict(trace.info.get("glyph", {}).get("metrics") or metric_defaults(self.data.plus_tests is not None))


async def _read(runtime: vf.Runtime, path: str) -> str | None:
    try:
        return (await runtime.read(path, max_bytes=MAX_TRACE_BYTES)).decode("utf-8", "surrogateescape")
    except Exception:  # absent or unreadable: verify() records why
        return None


class GlyphTasksetConfig(vf.TasksetConfig):
    arm: Literal["a", "b"] = "a"
    """a: test and react; b: predict the outcome of each patch, then KEEP or REVISE."""
    split: Literal["sft", "rl", "validation", "test"] = "test"
    data_path: str | None = None
    """An MBPP JSONL in the official schema; default $GLYPH_MBPP_PATH, else the official download."""
    seed: int = 42
    challenge_tests: bool = False
    """Add MBPP's challenge tests to the hidden tests (11 tasks have them)."""
    hidden: Literal["base", "plus"] = "base"
    """What the reward grades: base (the study's hidden tests) or plus (those, then the generated plus tests)."""
    plus_path: str | None = None
    """The folder of plus tests (`glyph data plus`); default $GLYPH_PLUS_PATH, else artifacts/plus
    when it exists. Where a task's tests are found they are graded and recorded as a metric."""


class GlyphTaskset(vf.Taskset[GlyphTask, GlyphTasksetConfig]):
    def load(self):
        cfg = self.config
        source = mbpp.load_source(cfg.data_path)
        by_id = {t.task_id: t for t in source.tasks}
        folder = plus.resolve_dir(cfg.plus_path)
        if cfg.hidden == "plus" and not folder.is_dir():
            raise mbpp.DataError(f"--env.taskset.hidden plus: no plus tests at {folder}; run "
                                 f"`glyph data plus --out {folder.parent}` or set --env.taskset.plus-path")
        for task_id in mbpp.make_splits(by_id, cfg.seed)[cfg.split]:
            t = by_id[task_id]
            row = mbpp.task_row(t, cfg.split)
            hidden = list(t.test_list) + (list(t.challenge_test_list) if cfg.challenge_tests else [])
            plus_tests = plus.load_tests(folder, t) if cfg.hidden == "plus" else \
                plus.current(folder, t) if folder.is_dir() else None
            yield GlyphTask(GlyphData(id=t.id, name=t.id, prompt=row["prompt"][cfg.arm], arm=cfg.arm,
                                      task_text=t.text, visible_tests=list(t.test_list),
                                      hidden_setup=t.test_setup_code, hidden_tests=hidden,
                                      plus_tests=plus_tests, hidden=cfg.hidden, reference=t.code),
                            cfg.task)
