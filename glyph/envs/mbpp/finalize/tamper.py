"""The tamper checks. The trace was written where the agent worked; it is untrusted, and every
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
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from glyph.agent.trace import TESTER_ERROR, Trace, VerifiedCandidate, sha256
from glyph.envs.mbpp.finalize.regrade import Regrader


class MalformedTrace(ValueError):
    """The trace does not have the shape the program writes: tampering, never a crash."""


def parse_trace(raw: dict, shape: type[Trace] = Trace) -> Trace:
    """``raw`` (the trace's JSON object) as a ``Trace`` (``shape``: the profile's, its
    ``AgentProfile.trace_type``); raises ``MalformedTrace`` naming what is wrong and
    where (``$.candidates[0].source``)."""
    try:
        trace = msgspec.convert(raw, shape)
    except msgspec.ValidationError as exc:
        raise MalformedTrace(f"malformed trace: {exc}") from None
    for c in trace.candidates:
        if c.shadow and c.verified_label is None:  # the shadow test is what made it one
            raise MalformedTrace(f"malformed trace: candidate {c.index} is a shadow candidate "
                                 "with no verified_label")
    return trace


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
    if trace.end == TESTER_ERROR and logged:
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
        if c.verified_label is None:  # never tested
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


def known_sources(trace: Trace, placeholder: str) -> dict[str, str]:
    """The sources a visible test may name, by sha256: each candidate whose
    source matches its hash, and the placeholder ``solution.py`` starts as."""
    known = {sha256(placeholder): placeholder}
    known.update((c.sha256, c.source) for c in trace.candidates if sha256(c.source) == c.sha256)
    return known


def verify_tests(trace: Trace, rg: Regrader, placeholder: str) -> tuple[list[str], list[str]]:
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


def check_final_source(trace: Trace, final_source: str | None, placeholder: str) -> list[str]:
    """The tamper reason, if any, where ``solution.py`` is not the last
    candidate (the placeholder where there is none)."""
    last = trace.candidates[-1].source if trace.candidates else placeholder
    if final_source is not None and final_source != last:
        return ["solution.py changed after the last recorded patch"]
    return []


