"""The glyph-conventions taskset and task (``glyph.data.conventions``).

Each task's prompt is ``conventions.messages(task, lessons)``: the spec and
the lessons in context, the only thing the flywheel changes. Two protocols
(``--env.taskset.protocol``): ``single`` (one reply; its code block is
``solution.py``) and ``agent`` (glyph-mbpp's agent protocol, arm a, whose only
visible test is ``IMPORT_CHECK``).

Guarantees: the hidden test and the references live in the task data, on the
trusted side only. finalize grades the final ``solution.py`` with
``conventions.grade`` (glyph's grader, in glyph's sandbox, in a thread):
reward 1.0 iff PASS, and ``info.glyph`` is a ``glyph.record`` conventions
record. A rollout that hit its deadline is handled as glyph-mbpp's is
(``glyph.vfcompat``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import field_validator

from glyph import record
from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.glyph import SOLUTION_FILE
from glyph.data import conventions
from glyph.envs.conventions.validate import validate_task
from glyph.envs.local import read_text
from glyph.errors import DataError
from glyph.outcomes import Outcome
from glyph.record import ConventionsRecord
from glyph.sandbox import get_sandbox
from glyph.vfcompat import timed_out

IMPORT_CHECK = "import solution  # python_test checks only that solution.py imports\n" \
               "assert solution.__name__ == 'solution'"
"""The agent protocol's one visible test: it reveals nothing of the hidden test."""
MAX_READ = 8 << 20
SHOWN_ERRORS = 3


# ---------------------------------------------------------------- data


def data_problem(path: str) -> str | None:
    """One line on what makes the task file at ``path`` unusable, or None."""
    _, errors = conventions.read_tasks(path)
    if not errors:
        return None
    more = ""
    if len(errors) > SHOWN_ERRORS:
        more = (f"; and {len(errors) - SHOWN_ERRORS} more"
                f" (`glyph conventions validate --tasks {path}` lists them)")
    return "; ".join(errors[:SHOWN_ERRORS]) + more


def read_lessons(path: str) -> list[str]:
    """The kept lessons of a flywheel run file (``run.json``), in order.
    Raises ValueError, naming the file, where it is not one."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    lessons = doc.get("lessons") if isinstance(doc, dict) else None
    if not isinstance(lessons, list):
        raise ValueError(f"{path}: no \"lessons\" list (expected a `glyph flywheel run` run.json)")
    kept = []
    for i, entry in enumerate(lessons):
        if not isinstance(entry, dict) or not isinstance(entry.get("kept"), bool) \
                or not isinstance(entry.get("text"), str):
            raise ValueError(f"{path}: lessons[{i}] needs a string \"text\" and a boolean \"kept\"")
        if entry["kept"] and entry["text"].strip():
            kept.append(entry["text"])
    return kept


class ConventionsData(vf.TaskData):
    """One conventions task under one set of lessons. ``hidden_test`` and the
    references are read on the trusted side only (recorded in the eval
    output, never given to the program)."""

    mode: str = ""
    split: Literal["train", "holdout"] = "holdout"
    spec: str = ""
    lessons: list[str] = []
    """The lessons in context, in order."""
    task_text: str = ""
    """The conventions user prompt (``conventions.user_prompt``): what the agent protocol is given."""
    protocol: Literal["single", "agent"] = "single"
    hidden_test: str = ""
    reference_broken: str = ""
    reference_fixed: str = ""

    def task(self) -> conventions.ConventionTask:
        return conventions.ConventionTask(self.name or "", self.mode, self.split, self.spec, self.hidden_test,
                                          self.reference_broken, self.reference_fixed)


def info_record(data: ConventionsData, reward: float | None, reason: str, outcome: str | None = None,
                detail: str = "", fault: str | None = None) -> ConventionsRecord:
    return ConventionsRecord(reward=reward, outcome=outcome, detail=detail, mode=data.mode, split=data.split,
                             protocol=data.protocol, reason=reason, fault=fault)


class ConventionsTask(vf.Task[ConventionsData]):
    async def validate(self, runtime: vf.Runtime) -> bool:
        """verifiers' gold check: the fixed reference passes, the broken one does not
        (``glyph.envs.conventions.validate``)."""
        return await validate_task(self, runtime)

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Grade the final solution.py. A failure of the grading itself is recorded and
        raised, so verifiers fails the rollout (errored, not scored); ``info.glyph.sandbox``
        records the sandbox mode and protections that graded it."""
        d = self.data
        try:
            code = await read_text(runtime, SOLUTION_FILE, MAX_READ)
            if code is None:
                info = info_record(d, 0.0, "no solution.py in the workspace")
            else:
                g = await asyncio.to_thread(conventions.grade, d.task(), code)
                passed = g.outcome is Outcome.PASS
                reason = "passed" if passed else f"{g.outcome.value}: {g.detail}"
                info = info_record(d, 1.0 if passed else 0.0, reason, g.outcome.value, g.detail)
                info.sandbox = get_sandbox().protections().record()
        except Exception as exc:
            record.store(trace.info, info_record(d, None, f"finalize failed: {type(exc).__name__}: {exc}",
                                                 fault="finalize_error"))
            raise
        if d.protocol == "agent":  # what the agent program says of itself: untrusted, for reading only
            end = trace.info.get("glyph_agent_end")
            if end and end != "final":
                info.reason += f" (the agent ended with {end})"
        record.store(trace.info, info, timed_out=timed_out(trace))

    @vf.reward(weight=1.0)
    async def passed(self, trace: vf.Trace) -> float:
        return record.reward_of(trace.info, ConventionsRecord)

    @vf.metric
    async def outcomes(self, trace: vf.Trace) -> dict[str, float]:
        """One 0/1 metric per outcome class of the final solution (``outcome_pass``, ...)."""
        got = getattr(record.conventions_record(trace.info), "outcome", None)
        return {f"outcome_{o.value.lower()}": float(o.value == got) for o in Outcome}


class ConventionsTasksetConfig(vf.TasksetConfig):
    data_path: str | None = None
    """A conventions JSONL ({id, mode, split, spec, hidden_test, reference_broken, reference_fixed});
    default: glyph's own tasks."""
    split: Literal["train", "holdout", "all"] = "holdout"
    """holdout: the sealed split the flywheel measures on; train: the one it learns from;
    all: both, in file order."""
    lessons: list[str] = []
    """Lessons put in every prompt (after those of lessons_path)."""
    lessons_path: str | None = None
    """A `glyph flywheel run` run.json: its kept lessons, in order, go in every prompt."""
    protocol: Literal["single", "agent"] = "single"
    """single: one reply, its code block is solution.py; agent: glyph-mbpp's agent protocol (arm a)."""

    @field_validator("data_path")
    @classmethod
    def _usable_tasks(cls, path: str | None) -> str | None:
        problem = path and data_problem(path)
        if problem:
            raise ValueError(problem)
        return path

    @field_validator("lessons_path")
    @classmethod
    def _usable_lessons(cls, path: str | None) -> str | None:
        if path:
            read_lessons(path)
        return path


class ConventionsTaskset(vf.Taskset[ConventionsTask, ConventionsTasksetConfig]):
    def load(self):
        cfg = self.config
        tasks = conventions.load_tasks(cfg.data_path)
        chosen = tasks if cfg.split == "all" else conventions.split(tasks, cfg.split)
        if not chosen:
            where = cfg.data_path or conventions.DATA_FILE
            raise DataError(
                f"--env.taskset.split {cfg.split}: {where} has no such tasks")
        lessons = (read_lessons(cfg.lessons_path) if cfg.lessons_path else []) + list(cfg.lessons)
        for t in chosen:
            text = conventions.user_prompt(t, lessons)
            prompt = conventions.messages(t, lessons) if cfg.protocol == "single" else \
                protocol.messages("a", text, [IMPORT_CHECK])
            yield ConventionsTask(ConventionsData(
                id=t.id, name=t.id, prompt=prompt, mode=t.mode, split=t.split, spec=t.spec, lessons=lessons,
                task_text=text, protocol=cfg.protocol, hidden_test=t.hidden_test,
                reference_broken=t.reference_broken, reference_fixed=t.reference_fixed), cfg.task)
