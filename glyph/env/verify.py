"""Trusted finalize: turn what a rollout left behind into a reward, metrics
and verified PREDICT targets. Framework-free (no verifiers import), so it is
tested directly.

The trace (``.glyph/trace.json``) was written where the agent worked; it is
untrusted. Every claim in it is checked against a trusted outcome, graded
under the rollout's one ``Limits`` (``GlyphHarnessConfig.limits()``):

* on the local runtime the test service's own log of what it graded for this
  rollout is the trusted record: the claims must match it (in order, visible
  and shadow; an entry repeated under one ``request`` id, a retried POST,
  counts once), and its outcomes are taken as they are, not graded again;
* each candidate's source matches its recorded hash, and its recorded
  outcome (visible or shadow test) matches the trusted one: the log's, or,
  for a source with no trusted record (the container runtime, a candidate
  never tested), glyph's grader's;
* each visible test result matches the trusted outcome of the source it names;
* the final ``solution.py`` is the last candidate (nothing changed it after
  the program ended).

Any mismatch marks the rollout tampered: reward 0, metric ``tampered`` = 1,
except a disagreement an honest grading reproduces: where a claim differs
from glyph's grading, the source is graded again (``REGRADES`` times), and a
claim one of those gradings gives (a run near its limit, a non-deterministic
solution) is accepted (honest grading gives it) and counted in the metric
``grade_disagreements``; so are two outcomes the service logged for one
source. A forged outcome no grading gives stays tampering.

Reward = 1 only for a terminal ``FINAL:``, a visible test that passed
(by its trusted outcome), and a final solution that passes the hidden tests: the study's
definition. A rollout with no trace, a crashed program or a timeout scores 0
with the reason recorded.

Two hidden suites: ``base`` (the task's hidden tests, the study's) and, when
the task has generated plus tests (``glyph.tasks.plus``), ``plus`` = base
followed by them. ``TaskTests.reward`` names the one the reward grades; the
other is recorded too (metric ``base_passed``, and ``plus_passed`` only where
the task has plus tests, so a run without them does not read as failing
them), under the same rule (FINAL, a passing visible test, no tamper).

Both come from one grading of the plus suite. The fast path grades checks
in order in one session and stops at the first failure, so its first checks,
the base suite's, run exactly as they would alone: same session state, same
limits spent so far. A failure among them is the base outcome; a failure
after them means base passed. Where that does not hold (the referee path,
which runs ``test_*`` functions last) base is graded on its own; so it is
when plus tests that do not compile would otherwise break a base reward.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from glyph.grading import InvalidTests, grade
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
    plus: tuple[str, ...] | None = None
    """The task's generated plus tests (``glyph.tasks.plus``); None: not available."""
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
        return grade(source, self.tests.setup, tests, limits=self.limits).outcome.value

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
            g = grade(source, t.setup, base_text, limits=self.limits)
            return g.outcome.value, g.detail

        if not t.plus:
            base = base_alone()
            return {"base": base, "plus": None if t.plus is None else base}
        try:
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
           "protocol_error", "no_trace", "base_passed", "grade_disagreements")
PLUS_METRICS = ("plus_passed",)  # recorded only where the task has plus tests


def metric_defaults(plus: bool) -> dict[str, float]:
    """Every metric at 0 (``plus``: the task has plus tests)."""
    return {m: 0.0 for m in METRICS + (PLUS_METRICS if plus else ())}


def _rate(hits: int, n: int) -> float:
    return hits / n if n else 0.0


def _logged(service_log: list[dict]) -> list[tuple[str, str, bool]]:
    """The service log's ``(sha256, outcome, shadow)`` entries in order, an
    entry repeated under one ``request`` id counted once (a retried POST)."""
    seen: set[str] = set()
    out = []
    for e in service_log:
        request = e.get("request")
        if request is not None:
            if request in seen:
                continue
            seen.add(request)
        out.append((e["sha256"], e["outcome"], e["shadow"]))
    return out


def verify(trace: object, final_source: str | None, tests: TaskTests, limits: Limits,
           service_log: list[dict] | None = None, program: dict | None = None) -> dict:
    """The ``info["glyph"]`` of a rollout: reward, metrics, reasons, and the
    verified candidates (``sampled_label`` vs ``verified_label``, with the
    exact context before each prediction turn) that PREDICT trains on."""
    out = {"reward": 0.0, "reason": "", "tamper": [], "candidates": [], "final_outcome": None,
           "base_outcome": None, "plus_outcome": None, "reward_suite": tests.reward,
           "metrics": metric_defaults(tests.plus is not None), "program": program or {}}
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
        if service_log is not None:
            logged = _logged(service_log)
            rg.seed(logged)
            claimed = [(t.get("sha256"), t.get("outcome"), False) for t in test_calls]
            claimed_shadow = sorted((c["sha256"], c.get("verified_label"), True)
                                    for c in candidates if c.get("shadow"))
            if trace.get("end") == "tester_error" and logged:
                logged = logged[:-1]  # graded, but the answer never reached the program
            visible_logged, shadow_logged = [e for e in logged if not e[2]], sorted(e for e in logged if e[2])
            if visible_logged != claimed or shadow_logged != claimed_shadow:
                tamper.append("the trace's tests differ from what the test service graded")
        known = {sha256(PLACEHOLDER): PLACEHOLDER}
        for c in candidates:
            if sha256(c["source"]) != c["sha256"]:
                tamper.append(f"candidate {c.get('index')}: source does not match its hash")
                continue
            known[c["sha256"]] = c["source"]
            if "verified_label" in c:
                verified = c["verified_label"] if rg.agrees(c["source"], c["verified_label"]) else None
                if verified is None:
                    verified = rg.visible(c["source"])
                    tamper.append(f"candidate {c.get('index')}: recorded {c['verified_label']}, "
                                  f"re-grade {verified}")
            else:
                verified = rg.visible(c["source"])
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
            if rg.agrees(source, t.get("outcome")):
                visible.append(t.get("outcome"))
            else:
                trusted = rg.visible(source)
                tamper.append(f"test {t.get('call')}: recorded {t.get('outcome')}, re-grade {trusted}")
                visible.append(trusted)
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
        missing = (Outcome.OTHER.value, "solution.py is missing")
        suites = {"base": missing, "plus": None if tests.plus is None else missing}
    else:
        suites = rg.hidden(final_source)
    final_outcome, detail = suites[tests.reward]
    if final_source is not None:
        out["final_detail"] = detail
    out["final_outcome"] = final_outcome
    out["base_outcome"] = suites["base"][0]
    if suites["plus"] is not None:
        out["plus_outcome"], out["plus_detail"] = suites["plus"]

    preds = [c for c in out["candidates"] if c["sampled_label"] is not None]
    failing = [c for c in preds if c["verified_label"] != Outcome.PASS.value]
    passing = [c for c in preds if c["verified_label"] == Outcome.PASS.value]
    m["tampered"] = float(bool(tamper))
    m["grade_disagreements"] = float(rg.disagreements)
    out["visible_gradings"] = rg.gradings  # visible-test gradings finalize ran (none where the log had each)
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
    rewardable = not tamper and is_final and Outcome.PASS.value in visible
    passed = rewardable and final_outcome == Outcome.PASS.value
    m["passed"] = float(passed)
    m["base_passed"] = float(rewardable and suites["base"][0] == Outcome.PASS.value)
    if suites["plus"] is not None:
        m["plus_passed"] = float(rewardable and suites["plus"][0] == Outcome.PASS.value)
    m["recovered_after_executed_failure"] = float(passed and m["had_executed_failure"] == 1.0)
    out["reward"] = m["passed"]
    if not out["reason"]:
        out["reason"] = ("passed" if passed else
                         "tampered: " + "; ".join(tamper[:3]) if tamper else
                         "the program did not finish (killed, or the rollout timed out)" if end is None else
                         f"ended by {end}: {trace.get('error')}" if not is_final else
                         "no visible test passed" if Outcome.PASS.value not in visible else
                         f"the final solution gets {final_outcome} on the hidden tests"
                         + (" (with the plus tests)" if tests.reward == "plus" else ""))
    return out
