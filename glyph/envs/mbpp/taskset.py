"""The glyph-mbpp taskset and task: rows from ``glyph.data.mbpp``, trusted
finalize (``glyph.envs.mbpp.finalize``) and the study's reward and metrics.

``hidden`` decides what the reward grades: ``base`` (the study's: the task's
hidden tests) or ``plus`` (those, then the plus tests ``glyph data plus``
generated from the reference solution). Wherever a task's plus tests are
found (``plus_path``) finalize grades both and records each as a metric, so
one run gives pass@1 on both.

``profile`` (``glyph.profiles``; the harness's ``profile`` too) gives the task
rows (``Profile.row``: glyph's MBPP as it is, the study's normalised), the
splits (``Profile.split``) and the opening messages (its agent half's)."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import verifiers.v1 as vf
from pydantic import field_validator, model_validator

from glyph import profiles, record
from glyph.agent import program
from glyph.agent.profiles.glyph import DEFAULT_BUDGET
from glyph.data import mbpp, plus
from glyph.envs.local import read_text
from glyph.envs.mbpp import token_cap
from glyph.envs.mbpp.finalize import TaskTests, verify
from glyph.envs.mbpp.harness import interception_record, limits_from_record
from glyph.envs.mbpp.order import Order, taskset_class
from glyph.envs.mbpp.validate import validate_task
from glyph.errors import DataError
from glyph.sandbox import get_sandbox
from glyph.vfcompat import timed_out

DATA_OPTION = "--env.taskset.data-path"
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
    task_id: int = 0
    """The MBPP task id (the study profile's project folder is named by it)."""
    profile: str = profiles.DEFAULT
    """The taskset's profile; the harness runs only a task of its own."""


class GlyphTask(vf.Task[GlyphData]):
    async def validate(self, runtime: vf.Runtime) -> bool:
        """verifiers' gold check: the reference passes (``glyph.envs.mbpp.validate``)."""
        return await validate_task(self, runtime)

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Check everything the rollout claims, under the grading limits the
        harness recorded (its ``glyph.record.HarnessRecord``, from
        ``GlyphHarnessConfig.limits()``), taking outcomes from the test
        service's log where there is one, and how the episode ended from the
        program's report to the service and the interception's record of the
        model's replies (``harness.interception_record``). A failure here is
        glyph's, not the model's: recorded and raised, so the rollout is
        errored, never scored. ``info.glyph.sandbox`` records the sandbox
        mode and protections that graded it."""
        try:
            harness = record.harness_record(trace.info)
            proto = harness.protocol if harness is not None else None
            profile = proto.profile if proto is not None else "glyph"  # recorded before profiles: glyph's
            raw = await read_text(runtime, program.TRACE, MAX_TRACE_BYTES)
            final = await read_text(runtime, profiles.get(profile).agent.solution(proto and proto.project),
                                    MAX_TRACE_BYTES)
            try:
                data = json.loads(raw) if raw is not None else None
            except (ValueError, RecursionError):  # a deeply nested trace is as malformed as a broken one
                data = "unparseable"
            d = self.data
            tests = TaskTests(d.hidden_setup, tuple(d.visible_tests), tuple(d.hidden_tests),
                              None if d.plus_tests is None else tuple(d.plus_tests), d.hidden)
            h = harness or record.HarnessRecord()
            end = None if h.service_end is None else {"end": h.service_end.end, "turns": h.service_end.turns}
            info = await asyncio.to_thread(verify, data, final, tests, limits_from_record(h.limits), h.service_log,
                                           h.program, service_end=end, replies=interception_record(trace, harness),
                                           profile=profile)
            info.sandbox = get_sandbox().protections().record()
            token_cap.enforce(info, trace)  # a run's max_total_tokens, hard as the study's eval made it
        except Exception as exc:
            # A fault of the trusted side: recorded, then raised: verifiers fails the rollout,
            # errored and unscored (glyph.vfcompat, 7.).
            record.store(trace.info, record.fault_record("finalize_error",
                                                         f"finalize failed: {type(exc).__name__}: {exc}"))
            raise
        record.store(trace.info, info, timed_out=timed_out(trace))

    @vf.reward(weight=1.0)
    async def passed(self, trace: vf.Trace) -> float:
        return record.reward_of(trace.info, record.MbppRecord)

    @vf.metric
    async def glyph_metrics(self, trace: vf.Trace) -> dict[str, float]:
        got = record.mbpp_record(trace.info)
        plus = None if self.data.plus_tests is None else 0.0
        return (got.metrics if got is not None else record.Metrics(plus_passed=plus)).flat()


class GlyphTasksetConfig(vf.TasksetConfig):
    arm: Literal["a", "b"] = "a"
    """a: test and react; b: predict the outcome of each patch, then KEEP or REVISE."""
    split: Literal["sft", "rl", "validation", "test"] = "test"
    data_path: str | None = None
    """An MBPP JSONL in the official schema; default $GLYPH_MBPP_PATH, else the official download."""
    seed: int = mbpp.SEED
    challenge_tests: bool = False
    """Add MBPP's challenge tests to the hidden tests (11 tasks have them)."""
    hidden: Literal["base", "plus"] = "base"
    """What the reward grades: base (the study's hidden tests) or plus (those, then the generated plus tests)."""
    plus_path: str | None = None
    """The folder of plus tests (`glyph data plus`); default $GLYPH_PLUS_PATH, else artifacts/plus
    when it exists. Where a task's tests are found they are graded and recorded as a metric."""
    profile: str = profiles.DEFAULT
    """The task rows, matching the harness's ``profile`` (``glyph.profiles``). ``study`` (the default): the PREDICT
    study's (``glyph.data.study``): its splits (``study.make_splits``: tasks ordered by a SHA-256
    key; its ``train`` files are the ``rl`` split), its text, setup and tests normalised (CRLF to
    LF, stripped), the prompt its task rows carry (``study.prompt``). ``glyph``: glyph's splits
    (``mbpp.make_splits``) and prompts (``protocol.messages``), MBPP's text as it is."""
    split_key: Literal["study", "glyph"] | None = None
    """Study profile: which draw makes the splits. ``study`` (the default): the study's SHA-256
    order. ``glyph``: glyph's ``random.Random(seed)`` draw (``mbpp.make_splits``), the tasks still
    as the study writes them. The two share the official test split (ids 11-510); of the study's
    other ids glyph's draw keeps about half in the same split. The glyph profile always uses
    glyph's draw."""

    order: Order = "listed"
    """The order RL draws the ``rl`` split in (``glyph.envs.mbpp.order``): ``listed`` (cycled as listed,
    PRIME-RL 559b447's sampler) or ``study`` (the study's PRIME-RL d334ea5 draw: an endless taskset)."""

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        profiles.get(name)
        return name

    @model_validator(mode="after")
    def _split_key_of_the_profile(self):
        if self.split_key is not None and self.split_key not in profiles.get(self.profile).split_keys:
            raise ValueError(f"split_key: a switch the {self.profile} profile does not take; it uses its own draw")
        return self

    @field_validator("data_path")
    @classmethod
    def _usable_data(cls, path: str | None) -> str | None:
        """A missing or bad file given here is a config error naming this option (vf-eval shows it
        as one error, not a traceback from ``load``). Not run on the default (None): verifiers
        builds a default config at every CLI parse, ``--help`` included."""
        problem = mbpp.data_problem(path, option=DATA_OPTION)
        if problem:
            raise ValueError(problem)
        return path


class GlyphTaskset(vf.Taskset[GlyphTask, GlyphTasksetConfig]):
    def __new__(cls, config: GlyphTasksetConfig | None = None, *args, **kwargs):
        """The class ``config.order`` needs (``order.taskset_class``): endless for the study's draw."""
        return super().__new__(taskset_class(cls, config.order, config.split) if config else cls)

    def __iter__(self):
        """The tasks, as verifiers reads them (``vf-eval``, ``eval``, PRIME-RL).
        No usable data (none given and the download failed, or plus tests asked
        for and absent) ends the command with one line naming the option to
        change: a ``SystemExit``, as verifiers' CLI ends on a plugin's config
        error (``glyph.vfcompat``, 7.). ``load`` itself raises ``DataError``."""
        try:
            yield from super().__iter__()
        except DataError as exc:
            raise SystemExit(f"glyph-mbpp: {exc}") from exc

    def load(self):
        cfg = self.config
        source = mbpp.load_source(cfg.data_path, option=DATA_OPTION)
        by_id = {t.task_id: t for t in source.tasks}
        folder = plus.resolve_dir(cfg.plus_path)
        if cfg.hidden == "plus" and not folder.is_dir():
            raise DataError(f"--env.taskset.hidden plus: no plus tests at {folder}; run "
                                 f"`glyph data plus --out {folder.parent}` or set --env.taskset.plus-path")
        p = profiles.get(cfg.profile)
        rows = {t.task_id: p.row(t) for t in source.tasks}  # each task converted once
        for task_id in p.split(rows, cfg.seed, cfg.split_key)[cfg.split]:
            r, t = rows[task_id], by_id[task_id]
            plus_tests = plus.load_tests(folder, t) if cfg.hidden == "plus" else \
                plus.current(folder, t) if folder.is_dir() else None
            challenge = list(r.challenge) if cfg.challenge_tests else []
            prompt = p.agent.messages(cfg.arm, r.text, r.setup, list(r.tests), p.agent.project(task_id),
                                      DEFAULT_BUDGET)
            yield GlyphTask(GlyphData(id=t.id, name=t.id, prompt=prompt, arm=cfg.arm, task_text=r.text,
                                      visible_tests=list(r.tests), hidden_setup=r.setup,
                                      hidden_tests=list(r.tests) + challenge, plus_tests=plus_tests,
                                      hidden=cfg.hidden,
                                      reference=r.code, task_id=t.task_id, profile=cfg.profile),
                            cfg.task)
