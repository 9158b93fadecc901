"""Trusted finalize: what a rollout left behind becomes its record
(``glyph.record.MbppRecord``: reward, metrics, reasons and the verified
PREDICT targets). Framework-free, so it is tested directly. ``verify`` is the
entry; each job is a module of its own: ``regrade`` (the trusted gradings),
``tamper`` (each claim of the trace against them), ``end`` (how the episode
ended, from the trusted records), ``metrics`` (reward, metrics, reason).

The trace was written where the agent worked; it is untrusted, and every
claim in it is checked against a trusted outcome graded under the rollout's
one ``Limits`` (``tamper``). Whether the episode ended with FINAL is the
trace's claim, and it counts only where every trusted record of the end says
so too (``end``).

Reward 1 only for an episode that ended with ``FINAL:``, a visible test that
passed (by its trusted outcome) and a final solution that passes the hidden
suite the reward grades: ``base`` (the task's hidden tests) or ``plus`` (those, then
its generated plus tests). The other suite is recorded too (``base_passed``,
and ``plus_passed`` where the task has plus tests) under the same rule. Both
come from one grading where that is exact: the fast path stops at the first
failing check, so a failure among the base checks is the base outcome and a
later one means base passed; otherwise base is graded on its own.

**The profile** (as the harness recorded it, ``glyph.record.HarnessRecord``,
never as the trace says; ``glyph.profiles``) gives the trace's shape, the
placeholder ``solution.py`` starts as and the episode the interception's
record is replayed through, the checks its trace adds (the study's
prediction targets: each must name a recorded candidate and an outcome a
trusted grading gives it), the protocol errors that forbid the reward, and
its definitions of the episode and prediction metrics. The reward is the
study's rule (its ``taskset.py``) in every profile: an episode that ended
with FINAL and no protocol error, a visible test that passed and a final
solution that passes its tests, each decided by glyph's trusted records and
grader as above; a budget-exhausted end is no FINAL and scores 0.

``verify`` never raises on what the rollout left; a fault of the trusted side
(the grader, the service log) raises, and the rollout is errored, not scored.
"""

from __future__ import annotations

from glyph import profiles
from glyph.agent.trace import VerifiedCandidate
from glyph.envs.mbpp.finalize.end import ModelReplies, check_end, replies_account, service_account
from glyph.envs.mbpp.finalize.metrics import compute_metrics, reason
from glyph.envs.mbpp.finalize.regrade import Regrader, TaskTests, grade_hidden
from glyph.envs.mbpp.finalize.tamper import (
    MalformedTrace,
    check_final_source,
    check_log,
    logged_entries,
    parse_trace,
    verify_candidates,
    verify_tests,
)
from glyph.record import MbppRecord, Metrics
from glyph.sandbox import Limits


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
    them (``check_end``). ``profile``: the profile the harness ran
    (``glyph.record.HarnessRecord.protocol``, trusted): its trace, its
    placeholder, the grading semantics and metrics it adds (``glyph.profiles``).
    Never raises on what the rollout left (a malformed trace is tampering);
    a fault of the trusted side (the grader, the service log) raises."""
    p = profiles.get(profile)
    out = MbppRecord(reward=0.0, reward_suite=tests.reward, program=program or {},
                     metrics=Metrics(plus_passed=None if tests.plus is None else 0.0))
    if not isinstance(trace, dict):
        out.reason = "the program left no trace" if trace is None else "the trace is not a JSON object"
        out.metrics.no_trace = 1.0
        if trace is not None:
            out.tamper.append("malformed trace")
            out.metrics.tampered = 1.0
        return out
    placeholder = p.agent.placeholder
    rg = Regrader(tests, limits, semantics=p.semantics, reuse_final=p.reuse_final_grade)
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
        t = parse_trace(trace, p.agent.trace_type)
    except MalformedTrace as exc:
        t = p.agent.trace_type()  # nothing it claims is read
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
        tamper += p.check_trace(t, rg)
        out.prediction_targets = p.verified_targets(t, rg)
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
    out.metrics = compute_metrics(p, t, candidates, visible, tamper, suites, tests, rg.disagreements, final=final,
                                  reused=out.final_grade == "reused")
    out.end = t.end
    out.visible_outcomes = visible
    out.visible_gradings = rg.gradings  # visible-test gradings finalize ran (none where the log had each)
    out.reward = out.metrics.passed
    out.reason = reason(t, final_source, visible, tamper, suites, tests, final=final,
                        model_errors=p.model_errors(t))
    return out
