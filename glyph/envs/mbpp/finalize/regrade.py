"""Re-grading, for finalize: ``Regrader`` grades each distinct source once in
glyph's sandbox under the rollout's one ``Limits``, trusting what the test
service's log already graded; ``grade_hidden`` grades the final solution on
the hidden suites.

One grading per candidate: the base suite's grade of the final solution is
taken from the test service's record, not graded again, where the service
graded that exact source (its bytes' sha256) under finalize's own
``grading_key`` for the base suite (``glyph.grading``: the same setup, tests
and limits; the key is the service's, computed from what it holds), and
every grade recorded for it is one (outcome, detail). finalize's own
visible grading of a source (a container, where there is no service, or a
claim the log lacks) counts the same way where the visible tests are the
base suite. MBPP's hidden tests are its visible ones in both profiles, so
an honest final solution that was tested is graded once. It is graded
again where the hidden suite differs (``--env.taskset.challenge-tests``),
where plus tests are graded with it (a task with plus tests: the fast
path's one grading of base then plus), where ``solution.py`` is no source
graded under the key (changed after the last test), where its gradings
disagreed, and for a log that recorded no key. ``MbppRecord.final_grade``
and the metric ``final_grade_reused`` say which; the tamper checks are the
same either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glyph.agent.trace import sha256
from glyph.grading import InvalidTests, grade, grading_key
from glyph.outcomes import Outcome
from glyph.sandbox import Limits
from glyph.semantics import GLYPH, Semantics


@dataclass(frozen=True)
class TaskTests:
    setup: str
    visible: tuple[str, ...]
    hidden: tuple[str, ...]
    plus: tuple[str, ...] | None = None
    """The task's generated plus tests (``glyph.data.plus``); None: not available."""
    reward: str = "base"
    """``base``: the reward grades ``hidden``; ``plus``: ``hidden`` then ``plus``."""

    def __post_init__(self) -> None:
        if self.reward not in ("base", "plus"):
            raise ValueError(f"reward suite {self.reward!r}: use base or plus")
        if self.reward == "plus" and self.plus is None:
            raise ValueError("the reward grades the plus tests, but the task has none recorded")


REGRADES = 2  # further gradings of a source whose claimed outcome differs from glyph's grading


@dataclass
class Regrader:
    """Grades each distinct source once, trusting ``seed``: visible-test
    outcomes already known per sha256 (the test service's log)."""

    tests: TaskTests
    limits: Limits
    semantics: Semantics = GLYPH
    """How every grading here reads a run (the profile's: ``glyph.semantics``)."""
    reuse_final: bool = True
    """The base suite's grade of the final solution may be the service's record (the module
    docstring); False: the final verification re-runs the tests, as the study's did."""
    cache: dict = field(default_factory=dict)
    trusted: dict[str, set[str]] = field(default_factory=dict)
    """Every outcome the trusted record (the service log) gives each sha256."""
    gradings: int = 0
    disagreements: int = 0
    recorded: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """The (outcome, detail) of each sha256 graded under the base suite's key: by the test
    service (``seed_grades``), or here, where the visible tests are the base suite."""
    final_gradings: int = 0
    """Gradings of the final solution on a hidden suite that ran here."""
    final_reused: bool = False
    """The base suite's grade of the final solution came from the service's record."""

    def base_key(self) -> str:
        """The ``grading_key`` of the base suite under the rollout's limits."""
        return grading_key(self.tests.setup, "\n".join(self.tests.hidden), self.limits, self.semantics)

    def seed_grades(self, service_log: list[dict]) -> None:
        """Take the service log's full grades made under the base suite's key (an entry
        with another key, or none, is not this suite's). Trusted: an entry with a key and
        no detail is glyph's fault and raises."""
        key = self.base_key()
        for e in service_log:
            if e.get("key") == key:
                self.recorded.setdefault(e["sha256"], set()).add((e["outcome"], e["detail"]))

    def _recorded_base(self, source: str) -> tuple[str, str] | None:
        """The one trusted grade of ``source`` on the base suite; None where it was graded
        under another key, never, or with two grades (a grading near its limit)."""
        got = self.recorded.get(sha256(source), set())
        return next(iter(got)) if len(got) == 1 else None

    def seed(self, log: list[tuple[str, str, bool]]) -> None:
        """Take ``(sha256, outcome, shadow)`` entries as trusted outcomes; a
        source logged with two outcomes counts as a disagreement."""
        for sha, outcome, _ in log:
            seen = self.trusted.setdefault(sha, set())
            if seen and outcome not in seen:
                self.disagreements += 1
            seen.add(outcome)
            self.cache.setdefault(("v", sha), outcome)

    def _grade_visible(self, source: str) -> str:
        self.gradings += 1
        tests = "\n".join(self.tests.visible)
        g = grade(source, self.tests.setup, tests, limits=self.limits, semantics=self.semantics)
        if tests == "\n".join(self.tests.hidden):  # a grade of the base suite too
            self.recorded.setdefault(sha256(source), set()).add((g.outcome.value, g.detail))
        return g.outcome.value

    def visible(self, source: str) -> str:
        key = ("v", sha256(source))
        if key not in self.cache:
            self.cache[key] = self._grade_visible(source)
        return self.cache[key]

    def agrees(self, source: str, claimed: object) -> bool:
        """Whether ``claimed`` is a trusted outcome of ``source``: logged for
        it, or given by glyph's grading (graded again up to ``REGRADES``
        times where it differs: a reproduced claim is a disagreement, not
        tampering)."""
        sha = sha256(source)
        if sha in self.trusted:
            return claimed in self.trusted[sha]
        if claimed == self.visible(source):
            return True
        if claimed not in Outcome.__members__:
            return False
        seen = self.trusted.setdefault(sha, {self.visible(source)})
        for _ in range(REGRADES):
            seen.add(self._grade_visible(source))
            if claimed in seen:
                self.disagreements += 1
                return True
        return False

    def hidden(self, source: str) -> dict[str, tuple[str, str] | None]:
        """The final solution's (outcome, detail) on each suite: ``base``,
        ``plus`` (None when the task has no plus tests). One grading of the
        plus suite gives both on the fast path (see the module docstring)."""
        t = self.tests
        base_text = "\n".join(t.hidden)

        def base_alone() -> tuple[str, str]:
            recorded = self._recorded_base(source) if self.reuse_final else None
            if recorded is not None:
                self.final_reused = True
                return recorded
            self.final_gradings += 1
            g = grade(source, t.setup, base_text, limits=self.limits, semantics=self.semantics)
            return g.outcome.value, g.detail

        if not t.plus:
            base = base_alone()
            return {"base": base, "plus": None if t.plus is None else base}
        try:
            self.final_gradings += 1
            p = grade(source, t.setup, base_text + "\n" + "\n".join(t.plus), limits=self.limits,
                      semantics=self.semantics)
        except InvalidTests as exc:
            if t.reward == "plus":
                raise
            return {"base": base_alone(), "plus": (Outcome.OTHER.value, f"the plus tests are unusable: {exc}")}
        plus = (p.outcome.value, p.detail)
        if p.path != "fast" or self.semantics.as_main:  # the referee runs test_* functions last; one file's
            # PASS needs its end too: no prefix to read
            return {"base": base_alone(), "plus": plus}
        failed = next((c for c in p.checks if c.outcome is not None and not c.passed), None)
        if failed is not None and failed.line is not None and failed.line > base_text.count("\n") + 1:
            return {"base": (Outcome.PASS.value, ""), "plus": plus}  # every base check passed first
        return {"base": plus, "plus": plus}



Suites = dict[str, tuple[str, str] | None]


def grade_hidden(rg: Regrader, final_source: str | None) -> Suites:
    """The final solution's (outcome, detail) on each hidden suite
    (``Regrader.hidden``); a missing ``solution.py`` gets ``OTHER`` on each."""
    if final_source is None:
        missing = (Outcome.OTHER.value, "solution.py is missing")
        return {"base": missing, "plus": None if rg.tests.plus is None else missing}
    return rg.hidden(final_source)


