"""The reward, the metrics and the reason of a verified rollout: the
study's reward rule (an end with FINAL and no protocol error, a visible test
that passed by its trusted outcome, a final solution that passes the hidden
suite the reward grades), the metrics every profile shares, and the profile's
own episode and prediction metrics (``glyph.profiles``).
"""

from __future__ import annotations

from glyph.agent.trace import BUDGET_EXHAUSTED, FINAL, PROTOCOL_ERROR, Trace, VerifiedCandidate
from glyph.envs.mbpp.finalize.regrade import Suites, TaskTests
from glyph.outcomes import Outcome
from glyph.profiles import Profile
from glyph.record import Metrics

PASS = Outcome.PASS.value


def rewardable(visible: list[str], tamper: list[str], final: bool, model_errors: tuple = ()) -> bool:
    """The study's conditions on the episode itself: no tampering, an end
    with ``FINAL:`` (``final``: ``check_end``'s decision) and no protocol
    error the trace lists (``Profile.model_errors``), a visible test that
    passed (by its trusted outcome)."""
    return not tamper and final and not model_errors and PASS in visible


def compute_metrics(profile: Profile, trace: Trace, candidates: list[VerifiedCandidate], visible: list[str],
                    tamper: list[str], suites: Suites, tests: TaskTests, disagreements: int, *, final: bool,
                    reused: bool = False) -> Metrics:
    """Every metric: the ones every profile shares, then the profile's episode and prediction metrics
    (``Profile.prediction_metrics``); ``plus_passed`` where the task has plus tests; ``reused``: no
    grading of the final solution ran in finalize (``final_grade_reused``)."""
    ok = rewardable(visible, tamper, final, profile.model_errors(trace))
    passed = ok and suites[tests.reward][0] == PASS
    return Metrics(
        passed=float(passed),
        base_passed=float(ok and suites["base"][0] == PASS),
        plus_passed=None if suites["plus"] is None else float(ok and suites["plus"][0] == PASS),
        tampered=float(bool(tamper)),
        grade_disagreements=float(disagreements),
        final_grade_reused=float(reused),
        visible_test_calls=float(len(trace.tests)),
        visible_tool_calls=float(len(trace.calls)),
        had_executed_failure=float(any(v != PASS for v in visible)),
        budget_exhausted=float(trace.end == BUDGET_EXHAUSTED),
        protocol_error=float(trace.end == PROTOCOL_ERROR),
        **profile.prediction_metrics(trace, candidates, visible, passed),
    )


def reason(trace: Trace, final_source: str | None, visible: list[str], tamper: list[str], suites: Suites,
           tests: TaskTests, *, final: bool, model_errors: tuple = ()) -> str:
    """Why the rollout got its reward: the first that applies of a missing
    ``solution.py``, a pass, tampering, an unfinished or non-FINAL episode
    (``final``: ``check_end``'s decision), no passing visible test, the
    hidden suites' outcome."""
    final_outcome = suites[tests.reward][0]
    if final_source is None:
        return "solution.py is missing"
    if rewardable(visible, tamper, final, model_errors) and final_outcome == PASS:
        return "passed"
    if tamper:
        return "tampered: " + "; ".join(tamper[:3])
    if trace.end is None:
        return "the program did not finish (killed, or the rollout timed out)"
    if not (trace.final and trace.end == FINAL):
        return f"ended by {trace.end}: {trace.error}"
    if not final:  # a record that disagrees is tampering: here no trusted record was given
        return "the trace says the episode ended with FINAL, but no trusted record of its end was given"
    if PASS not in visible:
        return "no visible test passed"
    return (f"the final solution gets {final_outcome} on the hidden tests"
            + (" (with the plus tests)" if tests.reward == "plus" else ""))


