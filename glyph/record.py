"""The typed records glyph's environments write into ``trace.info``, and the
one rule for what a rollout was.

Two records, each under one key:

* ``HarnessRecord`` (``trace.info["glyph_harness"]``): what glyph-mbpp's
  harness recorded around the agent program, trusted: the grading limits,
  the protocol (arm, budget, profile, switches), the test service's log and
  its record of the episode's end, the interception's calls at the program's
  exit, the program's exit. Finalize, the report and credit read it.
* ``MbppRecord`` (``trace.info["glyph"]``): what finalize
  (``glyph.envs.mbpp.finalize``) judged: reward, reason, how the episode
  ended, typed metrics, the verified candidates PREDICT trains on; or the
  fault that stopped the rollout (``reward`` None, ``fault`` set).
  glyph-conventions writes a ``ConventionsRecord`` there instead.

Each carries a version. A rollout an earlier glyph wrote still decodes
(``harness_record``, ``mbpp_record``): its ten ``glyph_*`` keys become a
version 0 ``HarnessRecord``, and a version 0 ``MbppRecord`` gets its end and
its timeout from the reason it recorded them in. A record of the wrong shape
raises ``RecordError``.

``status`` is the one rule for what a rollout was: ``ok``, or an incident
(``tampered``, ``timed_out``, ``errored``). PREDICT (``glyph.predict``), the
report, credit assignment and the demo all read records through this module.
"""

from __future__ import annotations

from typing import Any

import msgspec

from glyph.agent.trace import INFRA_ENDS, PredictionTarget, VerifiedCandidate
from glyph.errors import RunError
from glyph.text import encodable_data

INFO_KEY = "glyph"
"""The key of ``trace.info`` that holds the rollout record."""
HARNESS_KEY = "glyph_harness"
"""The key of ``trace.info`` that holds the harness record."""
MBPP_ENV_ID = "glyph-mbpp"
CONVENTIONS_ENV_ID = "glyph-conventions"
"""The environments' ids (verifiers' plugin ids; an episode's ``env.id``)."""
HARNESS_VERSION = 1
RECORD_VERSION = 1

OK, ERRORED, TIMED_OUT, TAMPERED = "ok", "errored", "timed_out", "tampered"
INCIDENTS = (ERRORED, TIMED_OUT, TAMPERED)
FAULTS = ("endpoint_error", "tester_error", "finalize_error")
TIMED_OUT_REASON = "the rollout timed out; "
"""What finalize puts before the reason of a rollout a deadline ended."""


class RecordError(RunError):
    """A ``trace.info`` record that is not one of the expected kind."""


# ---------------------------------------------------------------- the harness record


class ProtocolRecord(msgspec.Struct, kw_only=True):
    """The protocol the program ran under, as the harness configured it."""

    arm: str
    max_tool_calls: int
    test_cost: int
    profile: str = "glyph"
    """The profile (``glyph.profiles``); a rollout from before the study profile ran glyph's."""
    project: str | None = None
    """The task's project folder (where ``solution.py`` is), for a profile that has one."""
    switches: dict[str, Any] | None = None


class ServiceEnd(msgspec.Struct, kw_only=True):
    """The program's report to the test service of how the episode ended."""

    end: str | None
    turns: int


class InterceptionRecord(msgspec.Struct, kw_only=True):
    """verifiers' interception record as the program left it: what is recorded later is no turn of its."""

    calls: int
    stop_condition: str | None = None


class HarnessRecord(msgspec.Struct, kw_only=True):
    """What glyph-mbpp's harness recorded around the agent program (trusted: written outside the runtime)."""

    version: int = HARNESS_VERSION
    """0: decoded from the ``glyph_*`` keys of an earlier glyph."""
    limits: dict[str, float] | None = None
    """The grading limits (``{"cpu_s", "wall_s"}``) of every python_test and of finalize."""
    env_pid: int | None = None
    """The env process that ran it (one of a serve pool's workers)."""
    protocol: ProtocolRecord | None = None
    service_log: list[dict[str, Any]] | None = None
    """The test service's log of the rollout's gradings; None: no service (a container runtime)."""
    service_end: ServiceEnd | None = None
    """The program's report of its end (with a service log; None: it never reported)."""
    service_faults: list[Any] | None = None
    interception: InterceptionRecord | None = None
    program: dict[str, Any] | None = None
    """How the program ran and exited (``exit_code``, ``stderr``, ``start``, CPU)."""
    endpoint_fault_confirmed: str | None = None
    """For a container's endpoint fault: the trusted record that confirmed it."""


_OLD_HARNESS_KEYS = {"glyph_limits": "limits", "glyph_env_pid": "env_pid", "glyph_protocol": "protocol",
                     "glyph_service_log": "service_log", "glyph_service_end": "service_end",
                     "glyph_service_faults": "service_faults", "glyph_interception": "interception",
                     "glyph_program": "program", "glyph_endpoint_fault_confirmed": "endpoint_fault_confirmed"}
"""The ``trace.info`` keys an earlier glyph wrote, one per field."""


def harness_record(info: Any) -> HarnessRecord | None:
    """The harness record in a trace's ``info``: its ``glyph_harness``, else the ``glyph_*`` keys an
    earlier glyph wrote (version 0); None where the harness wrote neither."""
    if not isinstance(info, dict):
        return None
    raw = info.get(HARNESS_KEY)
    if raw is None:
        old = {field: info[key] for key, field in _OLD_HARNESS_KEYS.items() if key in info}
        if not old:
            return None
        raw = {**old, "version": 0}
    try:
        return msgspec.convert(raw, HarnessRecord)
    except msgspec.ValidationError as exc:
        raise RecordError(f"trace.info[{HARNESS_KEY!r}] is not a HarnessRecord: {exc}") from None


def store_harness(info: dict, rec: HarnessRecord) -> None:
    """Write ``rec`` into a trace's ``info`` (its strings made encodable, as ``store`` does)."""
    info[HARNESS_KEY] = encodable_data(msgspec.to_builtins(rec))


# ---------------------------------------------------------------- the rollout record


class Metrics(msgspec.Struct, kw_only=True):
    """A glyph-mbpp rollout's metrics (verifiers gets them flat: ``flat``). The episode and prediction
    metrics follow the rollout's profile's definitions (``glyph.profiles``)."""

    passed: float = 0.0
    first_patch_correct: float = 0.0
    prediction_accuracy: float = 0.0
    predictions: float = 0.0
    bad_patch_rejection_rate: float = 0.0
    unnecessary_rejection_rate: float = 0.0
    recovered_after_executed_failure: float = 0.0
    had_executed_failure: float = 0.0
    visible_test_calls: float = 0.0
    visible_tool_calls: float = 0.0
    tampered: float = 0.0
    budget_exhausted: float = 0.0
    revise_count: float = 0.0
    protocol_error: float = 0.0
    no_trace: float = 0.0
    base_passed: float = 0.0
    grade_disagreements: float = 0.0
    invalid_predictions: float = 0.0
    final_grade_reused: float = 0.0
    plus_passed: float | None = None
    """None: the task has no plus tests."""

    def flat(self) -> dict[str, float]:
        """The metrics as verifiers records them: name -> value, ``plus_passed`` only where graded."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


class MbppRecord(msgspec.Struct, kw_only=True):
    """One glyph-mbpp rollout as finalize judged it (or the fault that stopped it)."""

    version: int = RECORD_VERSION
    reward: float | None = 0.0
    """None: not scored (a fault: ``fault`` says which)."""
    reason: str = ""
    end: str | None = None
    """How the episode ended, as its trace says (``glyph.agent.trace``: ``final``, ``protocol_error``, an
    infrastructure end...); None: it did not, or no trace."""
    timed_out: bool = False
    """A deadline ended the rollout."""
    fault: str | None = None
    """``endpoint_error``, ``tester_error`` or ``finalize_error``: the rollout is errored."""
    confirmed_by: str | None = None
    """For a container's endpoint fault: the trusted record that confirmed it."""
    tamper: list[str] = []
    candidates: list[VerifiedCandidate] = []
    prediction_targets: list[PredictionTarget] = []
    """A profile that records its predictions as targets (the study's): each target of a candidate the
    trace recorded, its ``verified_label`` the trusted one. What PREDICT's study CE rule trains."""
    final_outcome: str | None = None
    final_detail: str | None = None
    base_outcome: str | None = None
    plus_outcome: str | None = None
    plus_detail: str | None = None
    reward_suite: str = "base"
    metrics: Metrics = msgspec.field(default_factory=Metrics)
    visible_outcomes: list[str] | None = None
    """The trusted outcome of each visible python_test, in order (None: a record from before it was kept,
    or a fault's)."""
    program: dict[str, Any] = {}
    visible_gradings: int = 0
    final_grade: str | None = None
    """How finalize got the final solution's grade: ``reused`` (the test service's record of that
    exact source under the same tests and limits: no grading ran in finalize) or ``graded``; None:
    no ``solution.py`` (or a fault, or a record from before it was kept)."""
    final_gradings: int = 0
    """Gradings of the final solution on the hidden suites that ran in finalize."""
    sandbox: dict[str, Any] | None = None
    """The sandbox mode and protections that graded it."""

    @property
    def tampered(self) -> bool:
        return bool(self.metrics.tampered or self.tamper)


class ConventionsRecord(msgspec.Struct, kw_only=True):
    """One glyph-conventions rollout: the final solution's grade (or the fault)."""

    reward: float | None = 0.0
    reason: str = ""
    outcome: str | None = None
    detail: str = ""
    mode: str = ""
    split: str = ""
    protocol: str = ""
    fault: str | None = None
    sandbox: dict[str, Any] | None = None


def store(info: dict, rec: MbppRecord | ConventionsRecord, *, timed_out: bool = False) -> None:
    """Write ``rec`` into a trace's ``info``; ``timed_out``: a deadline ended
    the rollout, and its reason says so first. Every string is stored
    ``glyph.text.encodable``: reasons, details, the trace's ends and errors and
    the candidates' contexts hold text that model code controls, and
    verifiers cannot save a trace whose ``info`` holds a lone surrogate. (Only
    the stored copy is escaped; finalize checked each candidate's source
    against its hash before, and the record holds no source.)"""
    if timed_out:
        rec.reason = TIMED_OUT_REASON + rec.reason
        if isinstance(rec, MbppRecord):
            rec.timed_out = True
    info[INFO_KEY] = encodable_data(encode(rec))


def reward_of(info: Any, kind: type[MbppRecord] | type[ConventionsRecord]) -> float:
    """The recorded reward, 0.0 where there is no record or it was not scored."""
    got = _decode(info, kind)
    return float(got.reward or 0.0) if got is not None else 0.0


def fault_record(fault: str, reason: str, confirmed_by: str | None = None) -> MbppRecord:
    """The record of a glyph-mbpp rollout the machinery stopped: errored, never scored."""
    if fault not in FAULTS:
        raise ValueError(f"fault {fault!r} is not one of {', '.join(FAULTS)}")
    return MbppRecord(reward=None, reason=reason, fault=fault, confirmed_by=confirmed_by)


def encode(record: MbppRecord | ConventionsRecord) -> dict:
    """The record as ``trace.info["glyph"]`` stores it (JSON-ready builtins)."""
    return msgspec.to_builtins(record)


def _decode(info: Any, kind: type):
    raw = (info or {}).get(INFO_KEY) if isinstance(info, dict) or info is None else None
    if raw is None:
        return None
    if kind is MbppRecord and isinstance(raw, dict) and "version" not in raw:
        raw = _from_version_0(raw)
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise RecordError(f"trace.info[{INFO_KEY!r}] is not a {kind.__name__}: {exc}") from None


def _from_version_0(raw: dict) -> dict:
    """A record an earlier glyph wrote, which said how the episode ended and that it timed out only in
    its reason (``ended by <end>: ...``; ``TIMED_OUT_REASON`` first)."""
    reason = raw.get("reason") if isinstance(raw.get("reason"), str) else ""
    end = next((e for e in INFRA_ENDS if f"ended by {e}:" in reason), None)
    return {**raw, "version": 0, "end": end, "timed_out": reason.startswith(TIMED_OUT_REASON)}


def mbpp_record(info: Any) -> MbppRecord | None:
    """The ``MbppRecord`` in ``info`` (a trace's ``info`` dict); None when there is none."""
    return _decode(info, MbppRecord)


def conventions_record(info: Any) -> ConventionsRecord | None:
    return _decode(info, ConventionsRecord)


def status(record: MbppRecord | None, *, ok: bool, reward: float | None, timed_out: bool) -> str:
    """What a glyph-mbpp rollout was: ``tampered`` (finalize found a claim that
    does not hold), ``timed_out`` (a deadline ended it), ``errored`` (not ok, no
    reward, no record, no trace, a fault, or an episode an infrastructure fault
    ended), else ``ok``. ``ok``: the trace and episode are ok; ``reward``: the
    recorded score; ``timed_out``: the framework recorded a deadline
    (``glyph.vfcompat``)."""
    if record is not None and record.tampered:
        return TAMPERED
    if timed_out or (record is not None and record.timed_out):
        return TIMED_OUT
    if not ok or reward is None or record is None or record.fault or record.metrics.no_trace \
            or record.end in INFRA_ENDS:
        return ERRORED
    return OK


def passed(record: MbppRecord | None, *, ok: bool, reward: float | None, timed_out: bool) -> bool:
    """A rollout passed: it is ``ok`` and its reward is 1."""
    return status(record, ok=ok, reward=reward, timed_out=timed_out) == OK and reward == 1.0
