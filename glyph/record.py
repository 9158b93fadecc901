"""The typed rollout record: what glyph's environments write to
``trace.info["glyph"]`` and every reader decodes.

glyph-mbpp's finalize (``glyph.envs.mbpp.finalize``) builds an
``MbppRecord``; its harness and finalize write a fault record (``reward``
None, ``fault`` set) where the machinery failed. glyph-conventions writes a
``ConventionsRecord``. ``encode`` turns a record into the JSON-ready dict
verifiers stores; ``mbpp_record`` / ``conventions_record`` decode one back
(fields a record lacks take their defaults, so a record saved by an earlier
glyph still decodes; a record of the wrong shape raises ``RecordError``).

``status`` is the one rule for what a rollout was: ``ok``, or an incident
(``tampered``, ``timed_out``, ``errored``). PREDICT (``glyph.predict``), the
report, credit assignment and the demo all read records through this module.
"""

from __future__ import annotations

from typing import Any

import msgspec

from glyph.outcomes import Outcome
from glyph.text import encodable_data

INFO_KEY = "glyph"
"""The key of ``trace.info`` that holds the record."""
MBPP_ENV_ID = "glyph-mbpp"
CONVENTIONS_ENV_ID = "glyph-conventions"
"""The environments' ids (verifiers' plugin ids; an episode's ``env.id``)."""

OK, ERRORED, TIMED_OUT, TAMPERED = "ok", "errored", "timed_out", "tampered"
INCIDENTS = (ERRORED, TIMED_OUT, TAMPERED)
INFRA_ENDS = ("endpoint_error", "tester_error", "program_error")
"""Program ends that are failures of the machinery (``glyph.agent.program``), not of the model's work."""
FAULTS = ("endpoint_error", "tester_error", "finalize_error")
TIMED_OUT_REASON = "the rollout timed out; "
"""What finalize puts before the reason of a rollout a deadline ended."""


class RecordError(ValueError):
    """A ``trace.info["glyph"]`` that is not a record of the expected kind."""


class VerifiedCandidate(msgspec.Struct, frozen=True, kw_only=True):
    """A candidate as PREDICT trains on it: Arm B's prediction for it, and its
    trusted (``verified_label``) outcome."""

    index: int
    sha256: str
    verified_label: str
    sampled_label: str | None = None
    decision: str | None = None
    shadow: bool = False
    context: list[dict[str, Any]] | None = None
    """The messages before the prediction turn, as the program recorded them."""
    prediction_turn: str | None = None
    prediction_call: str | None = None


PASS = Outcome.PASS.value


def study_episode(first_target: str | None, visible: list[str]) -> tuple[bool, bool, bool]:
    """(first patch correct, had an executed failure, recovered) as the PREDICT study defines
    them (its ``src/glyph/taskset.py`` metrics): the first prediction target's outcome
    (``first_target``, None: no target) where there is one, else the first visible test's; a
    visible test that did not pass; a visible PASS after the first visible failure, whatever
    the reward. ``visible``: the trusted outcome of each visible python_test, in order. The one
    place finalize's study metrics and ``glyph report``'s study definitions come from."""
    first_fail = next((i for i, v in enumerate(visible) if v != PASS), None)
    first = first_target == PASS if first_target is not None else bool(visible) and visible[0] == PASS
    return first, first_fail is not None, first_fail is not None and PASS in visible[first_fail + 1:]


class MbppRecord(msgspec.Struct, kw_only=True):
    """One glyph-mbpp rollout as finalize judged it (or the fault that stopped it)."""

    reward: float | None = 0.0
    """None: not scored (a fault: ``fault`` says which)."""
    reason: str = ""
    fault: str | None = None
    """``endpoint_error``, ``tester_error`` or ``finalize_error``: the rollout is errored."""
    confirmed_by: str | None = None
    """For a container's endpoint fault: the trusted record that confirmed it."""
    tamper: list[str] = []
    candidates: list[VerifiedCandidate] = []
    final_outcome: str | None = None
    final_detail: str | None = None
    base_outcome: str | None = None
    plus_outcome: str | None = None
    plus_detail: str | None = None
    reward_suite: str = "base"
    metrics: dict[str, float] = {}
    visible_outcomes: list[str] | None = None
    """The trusted outcome of each visible python_test, in order (None: a record from before it was kept,
    or a fault's); the study profile's report definitions read it (``glyph.report.load``)."""
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
        return bool(self.metrics.get("tampered") or self.tamper)


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
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise RecordError(f"trace.info[{INFO_KEY!r}] is not a {kind.__name__}: {exc}") from None


def mbpp_record(info: Any) -> MbppRecord | None:
    """The ``MbppRecord`` in ``info`` (a trace's ``info`` dict); None when there is none."""
    return _decode(info, MbppRecord)


def conventions_record(info: Any) -> ConventionsRecord | None:
    return _decode(info, ConventionsRecord)


def status(record: MbppRecord | None, *, ok: bool, reward: float | None, timed_out: bool) -> str:
    """What a glyph-mbpp rollout was: ``tampered`` (finalize found a claim that
    does not hold), ``timed_out`` (a deadline ended it), ``errored`` (not ok, no
    reward, no record, no trace, or a fault or infrastructure end), else ``ok``.
    ``ok``: the trace and episode are ok; ``reward``: the recorded score;
    ``timed_out``: the framework recorded a deadline (``glyph.vfcompat``)."""
    if record is not None and record.tampered:
        return TAMPERED
    if timed_out or (record is not None and record.reason.startswith(TIMED_OUT_REASON)):
        return TIMED_OUT
    if not ok or reward is None or record is None or record.fault or record.metrics.get("no_trace") \
            or any(f"ended by {end}:" in record.reason for end in INFRA_ENDS):
        return ERRORED
    return OK


def passed(record: MbppRecord | None, *, ok: bool, reward: float | None, timed_out: bool) -> bool:
    """A rollout passed: it is ``ok`` and its reward is 1."""
    return status(record, ok=ok, reward=reward, timed_out=timed_out) == OK and reward == 1.0
