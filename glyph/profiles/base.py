"""What a protocol profile is on the trusted side: ``Profile``, which names
its agent half (``glyph.agent.profiles``) and holds everything that differs
between profiles outside the runtime: the task rows, the renderer, the
harness settings and switches (and their validation), the grading
semantics finalize adds, the metric and prediction definitions.

Every other module asks ``glyph.profiles.get(name)``; none compares profile
names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, NamedTuple, Protocol

from glyph.agent.profiles.base import AgentProfile, Tester
from glyph.agent.trace import PredictionTarget, Trace, VerifiedCandidate
from glyph.data.mbpp import MbppTask
from glyph.data.replay import Replay, replay
from glyph.outcomes import Outcome
from glyph.sandbox import Limits
from glyph.semantics import GLYPH, Semantics

PASS = Outcome.PASS.value
TOOL_TIMEOUT_S = 10.0
"""``GlyphHarnessConfig.tool_timeout`` where neither a config nor a profile's ``settings`` set it."""
OUTCOMES = frozenset(o.value for o in Outcome)


class TaskRow(NamedTuple):
    """One MBPP task as a profile reads it."""

    task: MbppTask
    text: str
    setup: str
    tests: tuple[str, ...]
    """The visible tests (MBPP's hidden tests are the same)."""
    code: str
    """The reference solution."""
    challenge: tuple[str, ...]
    """MBPP's challenge tests (``--env.taskset.challenge-tests``)."""


class Regrading(Protocol):
    """What a profile's grading semantics ask of finalize's regrader (``finalize.regrade.Regrader``)."""

    def agrees(self, source: str, claimed: object) -> bool: ...

    def visible(self, source: str) -> str: ...


def rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


class Profile(ABC):
    """A protocol profile's trusted half."""

    name: ClassVar[str]
    agent: ClassVar[AgentProfile]
    renderer: ClassVar[str]
    """The chat format its policy sees (a name of ``glyph.render.RENDERERS``)."""
    settings: ClassVar[dict[str, Any]] = {}
    """What ``GlyphHarnessConfig``'s settings take where a config leaves them unset."""
    switches: ClassVar[tuple[str, ...]] = ()
    """The harness switches it takes (each one of glyph's departures, off by default)."""
    split_keys: ClassVar[tuple[str, ...]] = ()
    """The split draws ``--env.taskset.split-key`` may pick (none: the profile's own, fixed)."""
    invalid_class: ClassVar[bool] = False
    """The report's confusion counts a sampled label that is no outcome class (an ``INVALID`` column)."""
    definitions: ClassVar[str]
    """What its episode metrics and predictions mean, as the report says it."""
    semantics: ClassVar[Semantics] = GLYPH
    """How its gradings read a solution's run (``glyph.semantics``): every python_test and finalize's."""
    reuse_final_grade: ClassVar[bool] = True
    """finalize takes the final solution's base grade from the test service's record where it has one
    (``finalize.regrade``); False: the final verification re-runs the tests."""

    # ------------------------------------------------------------ tasks and harness

    @abstractmethod
    def row(self, task: MbppTask) -> TaskRow:
        """``task`` as this profile's rows carry it."""

    @abstractmethod
    def split(self, rows: dict[int, TaskRow], seed: int, split_key: str | None = None) -> dict[str, list[int]]:
        """The task ids of each split (``sft``, ``rl``, ``validation``, ``test``), in order."""

    def user_prompt(self, task: MbppTask) -> str:
        """The user message that opens ``task``'s episodes under this profile (the same for both arms and
        any budget): what tells a recorded conversation's task."""
        row, agent = self.row(task), self.agent
        opening = agent.messages("a", row.text, row.setup, list(row.tests), agent.project(task.task_id), 8)
        return opening[1]["content"]

    def limits(self, tool_timeout: float) -> Limits:
        """The grading limits of a python_test and of finalize: ``tool_timeout`` of CPU, twice that of
        wall clock."""
        return Limits(cpu_s=float(tool_timeout), wall_s=2 * float(tool_timeout))

    def grading(self) -> tuple[Limits, Semantics]:
        """The limits and semantics its env grades a python_test under by default (its ``settings``'
        ``tool_timeout``): what ``glyph grade --profile`` grades with."""
        return self.limits(float(self.settings.get("tool_timeout", TOOL_TIMEOUT_S))), self.semantics

    def switch_values(self, given: dict[str, Any]) -> dict | None:
        """The switches the program runs under (``given``: the harness's switches that are set); a
        ValueError for one this profile does not take."""
        if given:
            raise ValueError(f"{', '.join(given)}: a switch the {self.name} profile does not take")
        return None

    @abstractmethod
    def sft_setup(self, row: dict, arm: str, tasks: dict[int, MbppTask] | None,
                  sandbox=None) -> tuple[dict, Tester]:
        """(program config, tester) under which an SFT trace of this profile was made: its budget,
        workspace and test limits; ``tasks``: MBPP by id, for a row that does not carry its tests (a
        missing task is a ``glyph.errors.DataError``)."""

    def replay_sft(self, n: int, row: dict, arm: str, tasks: dict[int, MbppTask] | None = None,
                   sandbox=None) -> Replay:
        """Row ``n`` of an SFT file replayed through this profile's episode (``glyph.data.replay``)."""
        cfg, tester = self.sft_setup(row, arm, tasks, sandbox)
        return replay(n, row, self.agent, cfg, tester)

    # ------------------------------------------------------------ finalize

    def check_trace(self, trace: Trace, regrader: Regrading) -> list[str]:
        """The tamper reasons of what this profile's trace adds to ``Trace``."""
        return []

    def verified_targets(self, trace: Trace, regrader: Regrading) -> list[PredictionTarget]:
        """The prediction targets its trace records (none: the profile records predictions on its
        candidates only), each with its trusted ``verified_label``."""
        return []

    def model_errors(self, trace: Trace) -> tuple[str, ...]:
        """Protocol errors the trace lists (a rollout with one is never rewarded)."""
        return ()

    @abstractmethod
    def prediction_metrics(self, trace: Trace, candidates: list[VerifiedCandidate], visible: list[str],
                           passed: bool) -> dict[str, float]:
        """Its definitions of the episode and prediction metrics (``first_patch_correct``,
        ``predictions``, ``prediction_accuracy``, ``invalid_predictions``, the rejection rates,
        ``revise_count``, ``recovered_after_executed_failure``), from the verified candidates, the
        trusted outcome of each visible test and whether the rollout passed."""

    # ------------------------------------------------------------ the report

    @abstractmethod
    def predictions(self, candidates: list[VerifiedCandidate]) -> tuple[tuple[str, str, str | None], ...]:
        """(sampled, verified, decision) of each prediction the report's confusion counts."""
