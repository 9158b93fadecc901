"""Trusted finalize: what a rollout left behind becomes its record
(``glyph.record.MbppRecord``: reward, metrics, reasons and the verified
PREDICT targets). Framework-free, so it is tested directly.

The trace was written where the agent worked; it is untrusted, and every
claim in it is checked against a trusted outcome graded under the rollout's
one ``Limits``: the test service's log where there is one (the local
runtime; taken as it is, a retried request counted once), else glyph's
grader. A trace whose claims do not hold (a source that does not match its
hash, an outcome no trusted grading gives, a test of an unrecorded source, a
``solution.py`` changed after the last patch, a shape the program never
writes) is tampered: reward 0, metric ``tampered`` 1. A disagreement an
honest grading reproduces (a run near its limit, a non-deterministic
solution: ``REGRADES`` more gradings) is accepted and counted in
``grade_disagreements``.

Reward 1 only for an episode that ended with ``FINAL:``, a visible test that
passed (by its trusted outcome) and a final solution that passes the hidden
suite the reward grades: ``base`` (the task's hidden tests) or ``plus`` (those, then
its generated plus tests). The other suite is recorded too (``base_passed``,
and ``plus_passed`` where the task has plus tests) under the same rule. Both
come from one grading where that is exact: the fast path stops at the first
failing check, so a failure among the base checks is the base outcome and a
later one means base passed; otherwise base is graded on its own.

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
disagreed, and for a log that recorded no key. ``info.glyph.final_grade``
and the metric ``final_grade_reused`` say which; the tamper checks are the
same either way.

Whether the episode ended with FINAL is the trace's claim, and it counts only
where every trusted record of the end given to ``verify`` says so too (none
given: it did not; ``check_end``):

* the test service's record (the local runtime, ``service_end``): the
  program reports its end to the service before it saves the trace with it;
  no report (the program killed) is no FINAL, and a trace whose end differs
  from the report is tampered;
* the interception's record of the model replies (``ModelReplies``: what
  verifiers' interception server committed for each model call, on any
  runtime), replayed through the program's own turn logic
  (``glyph.agent.program.Episode.turn``, in a scratch workspace: the budget,
  the call ids and Arm B's duty to predict after a successful patch are the
  protocol state; python_test's outcome is not). It says FINAL only where
  its last reply ends the episode as FINAL and no reply ended it before.
  Code that runs beside the program (a container, bare) can rewrite the
  trace but not what the model replied; it can add model calls of its own
  (the secret is readable there), and a reply recorded after the one that
  ended the episode is no FINAL. Not covered: a program stopped by a fault
  after a reply that ended nothing, then a call of that code's own that
  the model answers with FINAL.

A trace that says FINAL where a record does not is tampered, the reason
naming the record.

**The study profile** (``profile = "study"``, as the harness recorded it in
``trace.info["glyph_protocol"]``, never as the trace says): the trace is
``StudyEpisode``'s (``glyph.agent.study_episode``: beside ``candidates`` and
``tests`` it records ``prediction_targets`` and ``protocol_errors``),
``solution.py`` starts as the study's placeholder, and the interception's
record is replayed through ``StudyEpisode``. The reward is the study's rule
(its ``taskset.py``): an episode that ended with FINAL and no protocol error,
a visible test that passed and a final solution that passes its tests, each
decided by glyph's trusted records and grader as above; a budget-exhausted
end is no FINAL and scores 0, as in the study. Each prediction target must
name a recorded candidate and an outcome a trusted grading gives it.

``verify`` never raises on what the rollout left; a fault of the trusted side
(the grader, the service log) raises, and the rollout is errored, not scored.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import NamedTuple

import msgspec

from glyph.agent.program import PROFILES, REPLY_CAP, make_episode, workspace
from glyph.agent.protocol import PLACEHOLDER
from glyph.agent.tools import sha256
from glyph.grading import InvalidTests, grade, grading_key
from glyph.outcomes import Outcome
from glyph.record import MbppRecord, VerifiedCandidate, study_episode
from glyph.sandbox import Limits


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
        return grading_key(self.tests.setup, "\n".join(self.tests.hidden), self.limits)

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
        g = grade(source, self.tests.setup, tests, limits=self.limits)
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
            recorded = self._recorded_base(source)
            if recorded is not None:
                self.final_reused = True
                return recorded
            self.final_gradings += 1
            g = grade(source, t.setup, base_text, limits=self.limits)
            return g.outcome.value, g.detail

        if not t.plus:
            base = base_alone()
            return {"base": base, "plus": None if t.plus is None else base}
        try:
            self.final_gradings += 1
            p = grade(source, t.setup, base_text + "\n" + "\n".join(t.plus), limits=self.limits)
        except InvalidTests as exc:
            if t.reward == "plus":
                raise
            return {"base": base_alone(), "plus": (Outcome.OTHER.value, f"the plus tests are unusable: {exc}")}
        plus = (p.outcome.value, p.detail)
        if p.path != "fast":  # the referee runs test_* functions last: no prefix to read
            return {"base": base_alone(), "plus": plus}
        failed = next((c for c in p.checks if c.outcome is not None and not c.passed), None)
        if failed is not None and failed.line is not None and failed.line > base_text.count("\n") + 1:
            return {"base": (Outcome.PASS.value, ""), "plus": plus}  # every base check passed first
        return {"base": plus, "plus": plus}


METRICS = ("passed", "first_patch_correct", "prediction_accuracy", "predictions", "bad_patch_rejection_rate",
           "unnecessary_rejection_rate", "recovered_after_executed_failure", "had_executed_failure",
           "visible_test_calls", "visible_tool_calls", "tampered", "budget_exhausted", "revise_count",
           "protocol_error", "no_trace", "base_passed", "grade_disagreements", "invalid_predictions",
           "final_grade_reused")
PLUS_METRICS = ("plus_passed",)  # recorded only where the task has plus tests
OUTCOME_NAMES = frozenset(o.value for o in Outcome)


def metric_defaults(plus: bool) -> dict[str, float]:
    """Every metric at 0 (``plus``: the task has plus tests)."""
    return {m: 0.0 for m in METRICS + (PLUS_METRICS if plus else ())}


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


# ---------------------------------------------------------------- the trace, typed


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """A patched ``solution.py`` (``glyph.agent.tools.execute``), with Arm B's
    prediction for it (``glyph.agent.program.Episode.turn``) where one was made."""

    index: int
    source: str
    sha256: str
    call: str | None = None
    """The apply_patch call that made it (not checked: nothing depends on it)."""
    verified_label: str | msgspec.UnsetType = msgspec.UNSET
    """The recorded outcome of its visible (or shadow) test; UNSET: never tested.
    A recorded label is a claim, so an explicit null is malformed, not "none"."""
    shadow: bool = False
    sampled_label: str | None = None
    decision: str | None = None
    context: list[dict[str, str]] | None = None
    """The messages before the prediction turn, passed on to PREDICT as recorded."""
    prediction_turn: str | None = None
    prediction_call: str | None = None


class TestCall(msgspec.Struct, frozen=True, kw_only=True):
    """A ``python_test``: the sha256 of the ``solution.py`` it tested and the outcome it claims."""

    __test__ = False  # not a pytest class

    call: str
    sha256: str
    outcome: str


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """Any tool call that ran (only counted: ``visible_tool_calls``)."""

    id: str | None = None
    tool: str | None = None
    status: str | None = None


class Trace(msgspec.Struct, frozen=True, kw_only=True):
    """The part of ``.glyph/trace.json`` finalize reads (``glyph.agent.program.run``
    writes it; other keys, ``messages``, ``turns``..., are not read). Missing
    lists and ends default to empty, as a trace saved mid-episode has them."""

    candidates: tuple[Candidate, ...] = ()
    tests: tuple[TestCall, ...] = ()
    calls: tuple[ToolCall, ...] = ()
    end: str | None = None
    """How the episode ended (``final``, ``protocol_error``, ...); None: it did not."""
    error: str | None = None
    final: bool = False


class PredictionTarget(msgspec.Struct, frozen=True, kw_only=True):
    """One of ``StudyEpisode``'s prediction targets (the study profile): the
    candidate predicted on (by sha256) and the outcome its test gave."""

    candidate_sha256: str
    actual: str
    shadow: bool = False
    sampled_prediction: str | None = None
    decision: str | None = None


class StudyTrace(Trace, frozen=True, kw_only=True):
    """The study profile's trace: ``Trace`` and what ``StudyEpisode`` records beside it."""

    prediction_targets: tuple[PredictionTarget, ...] = ()
    protocol_errors: tuple[str, ...] = ()


class MalformedTrace(ValueError):
    """The trace does not have the shape the program writes: tampering, never a crash."""


def parse_trace(raw: dict, shape: type[Trace] = Trace) -> Trace:
    """``raw`` (the trace's JSON object) as a ``Trace`` (``shape``: ``StudyTrace``
    for the study profile); raises ``MalformedTrace`` naming what is wrong and
    where (``$.candidates[0].source``)."""
    try:
        trace = msgspec.convert(raw, shape)
    except msgspec.ValidationError as exc:
        raise MalformedTrace(f"malformed trace: {exc}") from None
    for c in trace.candidates:
        if c.shadow and c.verified_label is msgspec.UNSET:  # the shadow test is what made it one
            raise MalformedTrace(f"malformed trace: candidate {c.index} is a shadow candidate "
                                 "with no verified_label")
    return trace


# ---------------------------------------------------------------- the jobs


class Logged(NamedTuple):
    """One grading in the test service's log (``glyph.envs.mbpp.test_service``)."""

    sha256: str
    outcome: str
    shadow: bool


def logged_entries(service_log: list[dict]) -> list[Logged]:
    """The service log's entries in order, an entry repeated under one
    ``request`` id counted once (a retried POST). The log is trusted: one
    that lacks a field is glyph's fault and raises."""
    seen: set[str] = set()
    out = []
    for e in service_log:
        request = e.get("request")
        if request is not None:
            if request in seen:
                continue
            seen.add(request)
        out.append(Logged(e["sha256"], e["outcome"], e["shadow"]))
    return out


def check_log(trace: Trace, logged: list[Logged]) -> list[str]:
    """The tamper reason, if any, where the trace's test claims (visible, in
    order; shadow, as a set) differ from what the test service graded."""
    if trace.end == "tester_error" and logged:
        logged = logged[:-1]  # graded, but the answer never reached the program
    claimed = [Logged(t.sha256, t.outcome, False) for t in trace.tests]
    claimed_shadow = sorted(Logged(c.sha256, c.verified_label, True) for c in trace.candidates if c.shadow)
    visible_logged = [e for e in logged if not e.shadow]
    shadow_logged = sorted(e for e in logged if e.shadow)
    if visible_logged != claimed or shadow_logged != claimed_shadow:
        return ["the trace's tests differ from what the test service graded"]
    return []


def verify_candidates(trace: Trace, rg: Regrader) -> tuple[list[VerifiedCandidate], list[str]]:
    """Each candidate whose source matches its hash, with its trusted outcome
    (its recorded one where a trusted grading gives it), and the tamper reasons:
    a hash that does not match, a recorded outcome no trusted grading gives."""
    verified, tamper = [], []
    for c in trace.candidates:
        if sha256(c.source) != c.sha256:
            tamper.append(f"candidate {c.index}: source does not match its hash")
            continue
        if c.verified_label is msgspec.UNSET:
            label = rg.visible(c.source)
        elif rg.agrees(c.source, c.verified_label):
            label = c.verified_label
        else:
            label = rg.visible(c.source)
            tamper.append(f"candidate {c.index}: recorded {c.verified_label}, re-grade {label}")
        verified.append(VerifiedCandidate(
            index=c.index, sha256=c.sha256, verified_label=label, sampled_label=c.sampled_label,
            decision=c.decision, shadow=c.shadow, context=c.context, prediction_turn=c.prediction_turn,
            prediction_call=c.prediction_call))
    return verified, tamper


def known_sources(trace: Trace, placeholder: str = PLACEHOLDER) -> dict[str, str]:
    """The sources a visible test may name, by sha256: each candidate whose
    source matches its hash, and the placeholder ``solution.py`` starts as."""
    known = {sha256(placeholder): placeholder}
    known.update((c.sha256, c.source) for c in trace.candidates if sha256(c.source) == c.sha256)
    return known


def verify_tests(trace: Trace, rg: Regrader, placeholder: str = PLACEHOLDER) -> tuple[list[str], list[str]]:
    """The trusted outcome of each visible test, in order (its recorded one
    where a trusted grading gives it), and the tamper reasons: a test of a
    source that is no recorded candidate, a recorded outcome no trusted
    grading gives."""
    known = known_sources(trace, placeholder)
    visible, tamper = [], []
    for t in trace.tests:
        source = known.get(t.sha256)
        if source is None:
            tamper.append(f"test {t.call}: tested source is no recorded candidate")
        elif rg.agrees(source, t.outcome):
            visible.append(t.outcome)
        else:
            trusted = rg.visible(source)
            tamper.append(f"test {t.call}: recorded {t.outcome}, re-grade {trusted}")
            visible.append(trusted)
    return visible, tamper


def verify_targets(trace: StudyTrace, rg: Regrader) -> list[str]:
    """The study profile's tamper reasons: a prediction target that names no
    recorded candidate, or an outcome no trusted grading gives it; a trace
    that ends with FINAL and lists protocol errors (the episode never does)."""
    known = {c.sha256: c.source for c in trace.candidates if sha256(c.source) == c.sha256}
    tamper = []
    for k, t in enumerate(trace.prediction_targets):
        source = known.get(t.candidate_sha256)
        if source is None:
            tamper.append(f"prediction target {k}: its candidate is no recorded candidate")
        elif not rg.agrees(source, t.actual):
            tamper.append(f"prediction target {k}: recorded {t.actual}, re-grade {rg.visible(source)}")
    if trace.protocol_errors and (trace.final or trace.end == "final"):
        tamper.append("the trace says the episode ended with FINAL and lists protocol errors")
    return tamper


def check_final_source(trace: Trace, final_source: str | None, placeholder: str = PLACEHOLDER) -> list[str]:
    """The tamper reason, if any, where ``solution.py`` is not the last
    candidate (the placeholder where there is none)."""
    last = trace.candidates[-1].source if trace.candidates else placeholder
    if final_source is not None and final_source != last:
        return ["solution.py changed after the last recorded patch"]
    return []


# ---------------------------------------------------------------- how the episode ended


SERVICE_RECORD = "the test service's record"
REPLIES_RECORD = "the interception's record of the model replies"


@dataclass(frozen=True)
class ModelReplies:
    """The model's replies, in order, as verifiers' interception server
    recorded them (``glyph.envs.mbpp.harness.interception_record``; None: a
    reply with no text), with the protocol settings the program ran under
    (the harness's: ``trace.info["glyph_protocol"]``). ``stopped``: a stop
    condition verifiers set while the program ran (its last recorded reply
    may then never have reached the program)."""

    replies: tuple[str | None, ...]
    arm: str
    budget: int
    test_cost: int
    stopped: str | None = None
    profile: str = "glyph"
    """The turn semantics the program ran (``glyph.agent.program.PROFILES``), as the harness recorded it."""
    project: str | None = None
    """The study profile's project folder (where ``solution.py`` is), as the harness recorded it."""
    switches: dict | None = None
    """The study profile's switches (``study_episode.Switches``), as the harness recorded them."""


class Account(NamedTuple):
    """What one trusted record says of how the episode ended."""

    record: str
    final: bool
    says: str
    """The account, completing "<record> ..." in a reason."""
    end: str | None = None
    """The end the record names exactly (the program's report), to compare with the trace's."""


def service_account(service_end: dict | None) -> Account:
    """The test service's record: the program's report (``{"end", "turns"}``)
    or None, when it never reported (killed before the end). Trusted: a
    malformed one is glyph's fault and raises."""
    if service_end is None:
        return Account(SERVICE_RECORD, False, "has no report from the program of how the episode ended")
    end, turns = service_end["end"], service_end["turns"]
    return Account(SERVICE_RECORD, end == "final", f"says the program reported {end} after {turns} replies", end)


def _no_outcome(source: str, shadow: bool) -> str:
    return "PASS"  # python_test's outcome changes no protocol state: the replay needs none


def _replay_episode(record: ModelReplies, root: str):
    """The episode of the record's profile (``program.make_episode``), from a fresh scratch
    workspace ``root`` laid out as the harness lays it out (``program.workspace``)."""
    if record.profile not in PROFILES:
        raise ValueError(f"the recorded profile is {record.profile!r}")  # the harness's record: glyph's fault
    solution, placeholder = workspace(record.profile, record.project)
    os.makedirs(os.path.dirname(os.path.join(root, solution)), exist_ok=True)
    with open(os.path.join(root, solution), "w", encoding="utf-8", newline="") as f:
        f.write(placeholder)
    cfg = {"profile": record.profile, "arm": record.arm, "max_tool_calls": record.budget,
           "test_cost": record.test_cost, "revise_feedback": "none", "project": record.project,
           "switches": record.switches, "limits": {"cpu_s": 1.0, "wall_s": 1.0}}  # no test runs in a replay
    trace = {} if record.profile == "study" else {"candidates": [], "tests": [], "calls": []}
    return make_episode(cfg, trace, root)


def replies_account(record: ModelReplies) -> Account:
    """The interception's record, replayed through the episode of its profile
    (``Episode``, or ``StudyEpisode`` for the study's): FINAL only where the
    last reply ends the episode as FINAL and no earlier one ended it (each
    reply cut at ``REPLY_CAP``, as the program cuts it)."""
    n = len(record.replies)
    if record.stopped is not None:
        return Account(REPLIES_RECORD, False, f"ends with verifiers stopping the rollout ({record.stopped})")
    if not n:
        return Account(REPLIES_RECORD, False, "holds no reply")
    with tempfile.TemporaryDirectory(prefix="glyph-replay-") as root:
        ep = _replay_episode(record, root)
        for k, reply in enumerate(record.replies, 1):
            if reply is None:
                return Account(REPLIES_RECORD, False, f"has reply {k} of {n} with no text")
            if ep.turn(reply[:REPLY_CAP], _no_outcome) is None:
                break
        else:
            return Account(REPLIES_RECORD, False, f"ends with a {ep.call.tool} CALL (reply {n}), "
                                                  "which does not end the episode")
    if k < n:
        return Account(REPLIES_RECORD, False, f"ends the episode by {ep.end} at reply {k} of {n}, "
                                              f"with {n - k} more after it")
    if ep.end == "final":
        return Account(REPLIES_RECORD, True, f"ends with FINAL (reply {n})")
    return Account(REPLIES_RECORD, False, f"ends with {ep.end.replace('_', ' ')} (reply {n}): {ep.error}")


def check_end(trace: Trace, accounts: list[Account]) -> tuple[bool, list[str]]:
    """Whether the episode ended with FINAL: the trace says so and every
    trusted record does (no record: it did not); and the tamper reasons:
    the trace says FINAL where a record does not, or names an end other
    than the one the program reported."""
    claims = trace.final and trace.end == "final"
    tamper = []
    for a in accounts:
        if claims and not a.final:
            tamper.append(f"the trace says the episode ended with FINAL; {a.record} {a.says}")
        elif a.end is not None and trace.end is not None and trace.end != a.end:
            tamper.append(f"the trace says the episode ended by {trace.end}; {a.record} {a.says}")
    return claims and bool(accounts) and all(a.final for a in accounts), tamper


Suites = dict[str, tuple[str, str] | None]


def grade_hidden(rg: Regrader, final_source: str | None) -> Suites:
    """The final solution's (outcome, detail) on each hidden suite
    (``Regrader.hidden``); a missing ``solution.py`` gets ``OTHER`` on each."""
    if final_source is None:
        missing = (Outcome.OTHER.value, "solution.py is missing")
        return {"base": missing, "plus": None if rg.tests.plus is None else missing}
    return rg.hidden(final_source)


def rewardable(visible: list[str], tamper: list[str], final: bool, protocol_errors: tuple = ()) -> bool:
    """The study's conditions on the episode itself: no tampering, an end
    with ``FINAL:`` (``final``: ``check_end``'s decision) and no protocol
    error recorded (the study profile's trace lists them), a visible test
    that passed (by its trusted outcome)."""
    return not tamper and final and not protocol_errors and Outcome.PASS.value in visible


def compute_metrics(trace: Trace, candidates: list[VerifiedCandidate], visible: list[str], tamper: list[str],
                    suites: Suites, tests: TaskTests, disagreements: int, *, final: bool,
                    reused: bool = False) -> dict[str, float]:
    """Every metric (``METRICS``, and ``PLUS_METRICS`` where the task has plus tests);
    ``reused``: no grading of the final solution ran in finalize (``final_grade_reused``)."""
    m = metric_defaults(tests.plus is not None)
    preds = [c for c in candidates if c.sampled_label is not None]
    failing = [c for c in preds if c.verified_label != Outcome.PASS.value]
    passing = [c for c in preds if c.verified_label == Outcome.PASS.value]
    m["tampered"] = float(bool(tamper))
    m["grade_disagreements"] = float(disagreements)
    m["final_grade_reused"] = float(reused)
    m["predictions"] = float(len(preds))
    m["prediction_accuracy"] = _rate(sum(c.sampled_label == c.verified_label for c in preds), len(preds))
    m["bad_patch_rejection_rate"] = _rate(sum(c.decision == "REVISE" for c in failing), len(failing))
    m["unnecessary_rejection_rate"] = _rate(sum(c.decision == "REVISE" for c in passing), len(passing))
    m["revise_count"] = float(sum(c.decision == "REVISE" for c in preds))
    m["first_patch_correct"] = float(bool(candidates) and candidates[0].verified_label == Outcome.PASS.value)
    m["visible_test_calls"] = float(len(trace.tests))
    m["visible_tool_calls"] = float(len(trace.calls))
    m["had_executed_failure"] = float(any(v != Outcome.PASS.value for v in visible))
    m["budget_exhausted"] = float(trace.end == "budget_exhausted")
    m["protocol_error"] = float(trace.end == "protocol_error")
    ok = rewardable(visible, tamper, final, getattr(trace, "protocol_errors", ()))
    passed = ok and suites[tests.reward][0] == Outcome.PASS.value
    m["passed"] = float(passed)
    m["base_passed"] = float(ok and suites["base"][0] == Outcome.PASS.value)
    if suites["plus"] is not None:
        m["plus_passed"] = float(ok and suites["plus"][0] == Outcome.PASS.value)
    m["recovered_after_executed_failure"] = float(passed and m["had_executed_failure"] == 1.0)
    if isinstance(trace, StudyTrace):
        m.update(study_metrics(trace.prediction_targets, visible))
    return m


def study_metrics(targets, visible: list[str]) -> dict[str, float]:
    """The study profile's metrics as the study defines them (its ``src/glyph/taskset.py``
    metrics and ``src/glyph/passk.py``), over its prediction targets (each checked against a
    trusted grading by ``verify_targets``) and the trusted visible outcomes:
    ``first_patch_correct`` is the first target's outcome where there is one, else the first
    visible test's; a prediction's accuracy and rejection rates count every target, a label
    that is no outcome class (``invalid_predictions``, the study's INVALID) as wrong;
    ``recovered_after_executed_failure`` is a visible PASS after the first visible failure,
    whatever the reward."""
    passes = [t.actual == Outcome.PASS.value for t in targets]
    bad = [t for t, ok in zip(targets, passes) if not ok]
    good = [t for t, ok in zip(targets, passes) if ok]
    first, _, recovered = study_episode(targets[0].actual if targets else None, visible)
    return {
        "first_patch_correct": float(first),
        "predictions": float(len(targets)),
        "prediction_accuracy": _rate(sum(t.sampled_prediction == t.actual for t in targets), len(targets)),
        "invalid_predictions": float(sum(t.sampled_prediction not in OUTCOME_NAMES for t in targets)),
        "bad_patch_rejection_rate": _rate(sum(t.decision == "REVISE" for t in bad), len(bad)),
        "unnecessary_rejection_rate": _rate(sum(t.decision == "REVISE" for t in good), len(good)),
        "revise_count": float(sum(t.decision == "REVISE" for t in targets)),
        "recovered_after_executed_failure": float(recovered),
    }


def reason(trace: Trace, final_source: str | None, visible: list[str], tamper: list[str], suites: Suites,
           tests: TaskTests, *, final: bool) -> str:
    """Why the rollout got its reward: the first that applies of a missing
    ``solution.py``, a pass, tampering, an unfinished or non-FINAL episode
    (``final``: ``check_end``'s decision), no passing visible test, the
    hidden suites' outcome."""
    final_outcome = suites[tests.reward][0]
    if final_source is None:
        return "solution.py is missing"
    if rewardable(visible, tamper, final, getattr(trace, "protocol_errors", ())) and final_outcome == Outcome.PASS.value:
        return "passed"
    if tamper:
        return "tampered: " + "; ".join(tamper[:3])
    if trace.end is None:
        return "the program did not finish (killed, or the rollout timed out)"
    if not (trace.final and trace.end == "final"):
        return f"ended by {trace.end}: {trace.error}"
    if not final:  # a record that disagrees is tampering: here no trusted record was given
        return "the trace says the episode ended with FINAL, but no trusted record of its end was given"
    if Outcome.PASS.value not in visible:
        return "no visible test passed"
    return (f"the final solution gets {final_outcome} on the hidden tests"
            + (" (with the plus tests)" if tests.reward == "plus" else ""))


# ---------------------------------------------------------------- the entry


def verify(trace: object, final_source: str | None, tests: TaskTests, limits: Limits,
           service_log: list[dict] | None = None, program: dict | None = None, *,
           service_end: dict | None = None, replies: ModelReplies | None = None,
           profile: str = "glyph") -> MbppRecord:
    """The rollout's record (``info["glyph"]``): reward, metrics, reasons, and the
    verified candidates (``sampled_label`` vs ``verified_label``, with the
    exact context before each prediction turn) that PREDICT trains on.
    The trusted records: ``service_log`` (the test service graded the
    rollout's python_tests: the local runtime) with ``service_end``, the
    program's report of its end (read only with a ``service_log``; None:
    it never reported), and ``replies``, the interception's record of the
    model's replies (any runtime); how the episode ended is decided from
    them (``check_end``). ``profile``: the protocol the harness ran
    (``trace.info["glyph_protocol"]``, trusted; the module docstring says
    what ``study`` changes). Never raises on what the rollout left (a
    malformed trace is tampering); a fault of the trusted side (the grader,
    the service log) raises."""
    out = MbppRecord(reward=0.0, reward_suite=tests.reward, metrics=metric_defaults(tests.plus is not None),
                     program=program or {})
    if not isinstance(trace, dict):
        out.reason = "the program left no trace" if trace is None else "the trace is not a JSON object"
        out.metrics["no_trace"] = 1.0
        if trace is not None:
            out.tamper.append("malformed trace")
            out.metrics["tampered"] = 1.0
        return out
    if profile not in ("glyph", "study"):
        raise ValueError(f"profile {profile!r}: use glyph or study")
    study = profile == "study"
    placeholder = workspace(profile, None)[1]
    rg = Regrader(tests, limits)
    logged = None if service_log is None else logged_entries(service_log)
    if service_log is not None:
        rg.seed_grades(service_log)  # the final solution's grade may be the service's: whatever the trace says
    accounts = ([] if service_log is None else [service_account(service_end)]) + \
        ([] if replies is None else [replies_account(replies)])
    tamper: list[str] = out.tamper
    candidates: list[VerifiedCandidate] = []
    visible: list[str] = []
    final = False
    try:
        t = parse_trace(trace, StudyTrace if study else Trace)
    except MalformedTrace as exc:
        t = Trace()  # nothing it claims is read
        tamper.append(str(exc))
    else:
        final, found = check_end(t, accounts)
        tamper += found
        if logged is not None:
            rg.seed(logged)
            tamper += check_log(t, logged)
        candidates, found = verify_candidates(t, rg)
        tamper += found
        visible, found = verify_tests(t, rg, placeholder)
        tamper += found
        if study:
            tamper += verify_targets(t, rg)
        tamper += check_final_source(t, final_source, placeholder)
    out.candidates = candidates
    suites = grade_hidden(rg, final_source)
    out.final_outcome, detail = suites[tests.reward]
    if final_source is not None:
        out.final_detail = detail
    out.base_outcome = suites["base"][0]
    if suites["plus"] is not None:
        out.plus_outcome, out.plus_detail = suites["plus"]
    if final_source is not None:
        out.final_grade = "reused" if rg.final_gradings == 0 else "graded"
    out.final_gradings = rg.final_gradings
    out.metrics = compute_metrics(t, candidates, visible, tamper, suites, tests, rg.disagreements, final=final,
                                  reused=out.final_grade == "reused")
    out.visible_outcomes = visible
    out.visible_gradings = rg.gradings  # visible-test gradings finalize ran (none where the log had each)
    out.reward = out.metrics["passed"]
    out.reason = reason(t, final_source, visible, tamper, suites, tests, final=final)
    return out
