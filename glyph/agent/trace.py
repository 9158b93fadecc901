"""The program trace's schema, where it is written: what the agent program
records in ``.glyph/trace.json`` (``Trace``), and the verified prediction the
trusted side derives from each candidate (``VerifiedCandidate``).

The episodes (``glyph.agent.profiles``) and the tools fill these classes;
``Trace.to_json`` is what the program saves. The trusted side reads the same
classes back (``glyph.envs.mbpp.finalize`` decodes a saved trace into
``Trace`` or the profile's subclass with ``msgspec.convert``: a field of the
wrong type is a malformed trace, a key it does not know is ignored), and
``glyph.record`` stores ``VerifiedCandidate`` in the rollout record that
PREDICT, the report and credit read. A field is added here, once.

One name per fact, everywhere: ``sampled_label`` is the outcome class the
policy wrote in ``<PREDICTION>``; ``verified_label`` is the outcome a test of
the candidate gave (recorded by the program, then checked by finalize against
a trusted grading: in a ``VerifiedCandidate`` it is the trusted one).

Stdlib only: shipped into the runtime with the agent layer.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Literal

from glyph.text import source_bytes

FINAL, PROTOCOL_ERROR, BUDGET_EXHAUSTED = "final", "protocol_error", "budget_exhausted"
"""The ends an episode reaches on the model's account."""
ENDPOINT_ERROR, TESTER_ERROR, PROGRAM_ERROR = "endpoint_error", "tester_error", "program_error"
"""The ends a fault of the machinery gives it (the model endpoint, the tester, the program itself)."""
INFRA_ENDS = (ENDPOINT_ERROR, TESTER_ERROR, PROGRAM_ERROR)


def sha256(text: str) -> str:
    """The sha256 a trace records for a source: of ``text`` as the workspace holds it (UTF-8,
    surrogateescape: ``glyph.text.source_bytes``, which never raises, so finalize hashes a
    tampered trace's source too)."""
    return hashlib.sha256(source_bytes(text)).hexdigest()


End = Literal["final", "protocol_error", "budget_exhausted", "endpoint_error", "tester_error", "program_error"]


@dataclass(kw_only=True)
class Prediction:
    """Arm B's prediction on a candidate: what PREDICT trains on."""

    sampled_label: str | None = None
    """The label the policy wrote in ``<PREDICTION>`` (None: no prediction turn)."""
    decision: str | None = None
    """``KEEP`` or ``REVISE``."""
    shadow: bool = False
    """Its test was a shadow test (REVISE: the outcome hidden from the agent)."""
    context: list[dict[str, str]] | None = None
    """The messages before the prediction turn, as the program sent them."""
    prediction_turn: str | None = None
    """The assistant turn that carries the prediction, as the model wrote it."""
    prediction_call: str | None = None
    """The id of that turn's call."""


@dataclass(kw_only=True)
class Candidate(Prediction):
    """A patched ``solution.py`` (each successful apply_patch of it), with the prediction made on it."""

    index: int
    source: str
    sha256: str
    call: str | None = None
    """The apply_patch call that made it."""
    verified_label: str | None = None
    """The outcome its visible (or shadow) test gave, as the program recorded it; None: never tested."""


@dataclass(kw_only=True)
class VerifiedCandidate(Prediction):
    """A candidate as the trusted side verified it (``glyph.record.MbppRecord.candidates``): no
    source, and ``verified_label`` from a trusted grading."""

    index: int
    sha256: str
    verified_label: str


@dataclass(kw_only=True)
class TestCall:
    """A visible ``python_test``: the sha256 of the ``solution.py`` it tested and its outcome."""

    __test__ = False  # not a pytest class

    call: str
    sha256: str
    outcome: str


@dataclass(kw_only=True)
class ToolCall:
    """A tool call that ran, and the status it answered."""

    id: str
    tool: str
    status: str


@dataclass(kw_only=True)
class PredictionTarget(Prediction):
    """The study profile's record of a prediction (its ``prediction_targets``): made on whatever the
    pending patch left in ``solution.py``, a candidate or not."""

    candidate_sha256: str
    verified_label: str
    candidate_call: str | None = None
    """The apply_patch call the prediction was made after."""


@dataclass(kw_only=True)
class Trace:
    """One episode as the program records it. Lists start empty and ``end`` None, as a trace saved
    mid-episode (after every turn) has them."""

    arm: str | None = None
    candidates: list[Candidate] = field(default_factory=list)
    tests: list[TestCall] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    end: End | None = None
    """How the episode ended; None: it did not (yet)."""
    error: str | None = None
    """Why, for any end but ``final``."""
    final: bool = False
    budget: int | None = None
    """The tool budget it started with (``max_tool_calls``)."""
    test_cost: int | None = None
    budget_left: int | None = None
    turns: int = 0
    """Model replies applied."""
    messages: list[dict] = field(default_factory=list)
    """The conversation, opening messages first."""
    seconds: float | None = None
    reply_truncated: int | None = None
    """The length of a reply cut at the program's cap."""
    tester_sandbox: dict | None = None
    """The local tester's sandbox record (a container runtime)."""
    report_error: str | None = None
    """Why the end could not be reported to the test service."""

    def to_json(self) -> dict:
        """The JSON object the program saves."""
        return asdict(self)


@dataclass(kw_only=True)
class StudyTrace(Trace):
    """The study profile's trace: ``Trace``, and the study's own records of its predictions and of
    the protocol errors that ended the episode."""

    prediction_targets: list[PredictionTarget] = field(default_factory=list)
    protocol_errors: list[str] = field(default_factory=list)
