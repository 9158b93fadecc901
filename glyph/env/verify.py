"""Trusted finalize: turn what a rollout left behind into a reward, metrics
and verified PREDICT targets. Framework-free (no verifiers import), so it is
tested directly.

The trace (``.glyph/trace.json``) was written where the agent worked; it is
untrusted. Every claim in it is checked against glyph's own grader:

* each candidate's source matches its recorded hash, and its recorded
  outcome (visible or shadow test) matches a re-grade;
* each visible test result matches a re-grade of the source it names;
* on the local runtime, the claims match the test service's own log of what
  it graded for this rollout (in order, visible and shadow);
* the final ``solution.py`` is the last candidate (nothing changed it after
  the program ended).

Any mismatch marks the rollout tampered: reward 0, metric ``tampered`` = 1.
Reward = 1 only for a terminal ``FINAL:``, a visible test that passed
(re-graded), and a final solution that passes the hidden tests: the study's
definition. A rollout with no trace, a crashed program or a timeout scores 0
with the reason recorded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from glyph.grading import grade
from glyph.outcomes import Outcome
from glyph.protocol import PLACEHOLDER
from glyph.sandbox import Limits


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class TaskTests:
    setup: str
    visible: tuple[str, ...]
    hidden: tuple[str, ...]


@dataclass
class Regrader:
    """Grades each distinct source once."""

    tests: TaskTests
    limits: Limits
    cache: dict = field(default_factory=dict)

    def visible(self, source: str) -> str:
        key = ("v", sha256(source))
        if key not in self.cache:
            self.cache[key] = grade(source, self.tests.setup, "\n".join(self.tests.visible),
                                    limits=self.limits).outcome.value
        return self.cache[key]

    def hidden(self, source: str) -> tuple[str, str]:
        g = grade(source, self.tests.setup, "\n".join(self.tests.hidden), limits=self.limits)
        return g.outcome.value, g.detail


METRICS = ("passed", "first_patch_correct", "prediction_accuracy", "predictions", "bad_patch_rejection_rate",
           "unnecessary_rejection_rate", "recovered_after_executed_failure", "had_executed_failure",
           "visible_test_calls", "visible_tool_calls", "tampered", "budget_exhausted", "revise_count",
           "protocol_error", "no_trace")


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def verify(trace: object, final_source: str | None, tests: TaskTests, limits: Limits,
           service_log: list[dict] | None = None, program: dict | None = None) -> dict:
    """The ``info["glyph"]`` of a rollout: reward, metrics, reasons, and the
    verified candidates (``sampled_label`` vs ``verified_label``, with the
    exact context before each prediction turn) that PREDICT trains on."""
    out = {"reward": 0.0, "reason": "", "tamper": [], "candidates": [], "final_outcome": None,
           "metrics": {m: 0.0 for m in METRICS}, "program": program or {}}
    m = out["metrics"]
    if not isinstance(trace, dict):
        out["reason"] = "the program left no trace" if trace is None else "the trace is not a JSON object"
        m["no_trace"] = 1.0
        if trace is not None:
            out["tamper"].append("malformed trace")
            m["tampered"] = 1.0
        return out
    rg = Regrader(tests, limits)
    tamper = out["tamper"]
    try:
        candidates = list(trace.get("candidates", []))
        test_calls = list(trace.get("tests", []))
        calls = list(trace.get("calls", []))
        known = {sha256(PLACEHOLDER): PLACEHOLDER}
        for c in candidates:
            if sha256(c["source"]) != c["sha256"]:
                tamper.append(f"candidate {c.get('index')}: source does not match its hash")
                continue
            known[c["sha256"]] = c["source"]
            verified = rg.visible(c["source"])
            if "verified_label" in c and c["verified_label"] != verified:
                tamper.append(f"candidate {c.get('index')}: recorded {c['verified_label']}, re-grade {verified}")
            out["candidates"].append({
                "index": c.get("index"), "sha256": c["sha256"], "verified_label": verified,
                "sampled_label": c.get("sampled_label"), "decision": c.get("decision"),
                "shadow": bool(c.get("shadow")), "context": c.get("context"),
                "prediction_turn": c.get("prediction_turn"), "prediction_call": c.get("prediction_call")})
        visible = []
        for t in test_calls:
            source = known.get(t.get("sha256"))
            if source is None:
                tamper.append(f"test {t.get('call')}: tested source is no recorded candidate")
                continue
            regraded = rg.visible(source)
            if t.get("outcome") != regraded:
                tamper.append(f"test {t.get('call')}: recorded {t.get('outcome')}, re-grade {regraded}")
            visible.append(regraded)
        if service_log is not None:
            claimed = [(t.get("sha256"), t.get("outcome"), False) for t in test_calls]
            claimed_shadow = sorted((c["sha256"], c.get("verified_label"), True) for c in candidates if c.get("shadow"))
            logged = [(e["sha256"], e["outcome"], e["shadow"]) for e in service_log]
            if trace.get("end") == "tester_error" and logged:
                logged = logged[:-1]  # graded, but the answer never reached the program
            if [e for e in logged if not e[2]] != claimed or sorted(e for e in logged if e[2]) != claimed_shadow:
                tamper.append("the trace's tests differ from what the test service graded")
        last = candidates[-1]["source"] if candidates else PLACEHOLDER
        if final_source is not None and final_source != last:
            tamper.append("solution.py changed after the last recorded patch")
        end = trace.get("end")
        is_final = trace.get("final") is True and end == "final"
    except (KeyError, TypeError, AttributeError) as exc:
        tamper.append(f"malformed trace ({type(exc).__name__}: {exc})")
        candidates, visible, calls, end, is_final = [], [], [], None, False
    if final_source is None:
        out["reason"] = "solution.py is missing"
        final_outcome = Outcome.OTHER.value
    else:
        final_outcome, detail = rg.hidden(final_source)
        out["final_detail"] = detail
    out["final_outcome"] = final_outcome

    preds = [c for c in out["candidates"] if c["sampled_label"] is not None]
    failing = [c for c in preds if c["verified_label"] != Outcome.PASS.value]
    passing = [c for c in preds if c["verified_label"] == Outcome.PASS.value]
    m["tampered"] = float(bool(tamper))
    m["predictions"] = float(len(preds))
    m["prediction_accuracy"] = _rate(sum(c["sampled_label"] == c["verified_label"] for c in preds), len(preds))
    m["bad_patch_rejection_rate"] = _rate(sum(c["decision"] == "REVISE" for c in failing), len(failing))
    m["unnecessary_rejection_rate"] = _rate(sum(c["decision"] == "REVISE" for c in passing), len(passing))
    m["revise_count"] = float(sum(c["decision"] == "REVISE" for c in preds))
    m["first_patch_correct"] = float(bool(out["candidates"]) and out["candidates"][0]["verified_label"] == "PASS")
    m["visible_test_calls"] = float(len(test_calls))
    m["visible_tool_calls"] = float(len(calls))
    m["had_executed_failure"] = float(any(v != Outcome.PASS.value for v in visible))
    m["budget_exhausted"] = float(end == "budget_exhausted")
    m["protocol_error"] = float(end == "protocol_error")
    passed = not tamper and is_final and Outcome.PASS.value in visible and final_outcome == Outcome.PASS.value
    m["passed"] = float(passed)
    m["recovered_after_executed_failure"] = float(passed and m["had_executed_failure"] == 1.0)
    out["reward"] = m["passed"]
    if not out["reason"]:
        out["reason"] = ("passed" if passed else
                         "tampered: " + "; ".join(tamper[:3]) if tamper else
                         "the program did not finish (killed, or the rollout timed out)" if end is None else
                         f"ended by {end}: {trace.get('error')}" if not is_final else
                         "no visible test passed" if Outcome.PASS.value not in visible else
                         f"the final solution gets {final_outcome} on the hidden tests")
    return out
