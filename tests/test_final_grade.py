"""One grading per candidate (``glyph.envs.mbpp.finalize``, "One grading per
candidate"): finalize takes the final solution's grade from the test
service's record where the service graded that exact source under the same
setup, tests and limits (``glyph.grading.grading_key``), and grades it
otherwise. The service log here is the real service's, graded by glyph's
sandbox; finalize's grader is wrapped to count the gradings it runs."""

import copy

import pytest
from test_verify import FAIL, GOOD, LIMITS, PASS, WRONG, episode, records

import glyph.envs.mbpp.finalize.regrade as fin
from glyph.envs.mbpp.finalize import Regrader, TaskTests, verify
from glyph.envs.mbpp.test_service import SandboxTestService
from glyph.grading import grading_key
from glyph.sandbox import Limits

VISIBLE = ("assert f(1) == 2", "assert f(5) == 6")
SAME = TaskTests("", VISIBLE, VISIBLE)  # MBPP: the hidden tests are the visible ones
MORE = TaskTests("", VISIBLE, VISIBLE + ("assert f(9) == 10",))  # e.g. with the challenge tests
WITH_PLUS = TaskTests("", VISIBLE, VISIBLE, ("assert f(3) == 4",))


@pytest.fixture
def gradings(monkeypatch) -> list[str]:
    """The test text of each grading finalize runs (its gradings are ``finalize.regrade``'s)."""
    ran, real = [], fin.grade

    def counted(source, setup, tests, **kw):
        ran.append(tests)
        return real(source, setup, tests, **kw)

    monkeypatch.setattr(fin, "grade", counted)
    return ran


def served(raw_log: list[dict], tests: TaskTests = SAME, limits: Limits = LIMITS) -> tuple[list[dict], int]:
    """The log the real test service keeps for the requests of ``raw_log``
    (``episode``'s log: request, source by sha256), graded against ``tests``'
    visible tests under ``limits``; and how many gradings it ran."""
    sources = {fin.sha256(s): s for s in (GOOD, WRONG)}
    service = SandboxTestService()
    try:
        service.register("secret", tests.setup, list(tests.visible), limits)
        rollout = service.rollouts["secret"]
        for e in raw_log:
            rollout.test(e["request"], sources[e["sha256"]], e["shadow"])
        released = service.release("secret")
    finally:
        service.close()
    return released["log"], released["gradings"]


def run(raw, log, final, tests=SAME, limits=LIMITS):
    return verify(copy.deepcopy(raw), final, tests, limits, log, {"exit": 0}, **records(raw))


def test_the_service_records_each_grade_in_full_with_its_key():
    _, want = episode((WRONG, FAIL), (GOOD, PASS))
    log, n = served(want)
    assert n == 2 and [(e["sha256"], e["outcome"]) for e in log] == [(e["sha256"], e["outcome"]) for e in want]
    key = grading_key("", "\n".join(VISIBLE), LIMITS)
    assert {e["key"] for e in log} == {key}
    assert log[0]["detail"].startswith("f(1): got 1, expected 2") and log[1]["detail"] == ""
    assert grading_key("", "\n".join(VISIBLE), Limits(cpu_s=5, wall_s=11)) != key
    assert grading_key("x = 1", "\n".join(VISIBLE), LIMITS) != key


def test_an_honest_final_solution_the_service_graded_is_not_graded_again(gradings):
    raw, want = episode((WRONG, FAIL), (GOOD, PASS))
    log, _ = served(want)
    info = run(raw, log, GOOD)
    assert info.reward == 1.0 and info.reason == "passed" and info.tamper == []
    assert (info.final_grade, info.final_gradings, info.metrics.final_grade_reused) == ("reused", 0, 1.0)
    assert gradings == [] and info.visible_gradings == 0
    # A log that recorded no key (an older one) is graded again, to the same record.
    keyless = [{k: v for k, v in e.items() if k not in ("key", "detail")} for e in log]
    again = run(raw, keyless, GOOD)
    assert (again.final_grade, again.final_gradings, again.metrics.final_grade_reused) == ("graded", 1, 0.0)
    assert gradings == ["\n".join(VISIBLE)]
    assert (again.reward, again.final_outcome, again.final_detail) == (1.0, info.final_outcome, info.final_detail)


def test_a_reused_failure_keeps_the_graded_outcome_and_detail(gradings):
    raw, want = episode((WRONG, FAIL))
    log, _ = served(want)
    info = run(raw, log, WRONG)
    assert info.final_grade == "reused" and gradings == []
    regraded = run(raw, [{**e, "key": "another"} for e in log], WRONG)
    assert regraded.final_grade == "graded" and len(gradings) == 1
    assert info.final_outcome == regraded.final_outcome == FAIL
    assert info.final_detail == regraded.final_detail and info.final_detail.startswith("f(1): got 1")
    assert info.reward == regraded.reward == 0.0 and info.reason == regraded.reason == "no visible test passed"


def test_a_solution_changed_after_the_last_test_is_graded_and_tampered(gradings):
    raw, want = episode((WRONG, FAIL), (GOOD, PASS))
    log, _ = served(want)
    changed = "def f(x): return x + 1  # after the test\n"
    info = run(raw, log, changed)
    assert info.tamper == ["solution.py changed after the last recorded patch"] and info.reward == 0.0
    assert (info.final_grade, info.final_gradings, info.metrics.final_grade_reused) == ("graded", 1, 0.0)
    assert gradings == ["\n".join(VISIBLE)] and info.final_outcome == PASS
    # A test the service never graded: tampered; finalize grades its source once, for both uses.
    info = run(raw, [e for e in log if e["sha256"] != fin.sha256(GOOD)], GOOD)
    assert info.tamper == ["the trace's tests differ from what the test service graded"]
    assert (info.visible_gradings, info.final_grade, len(gradings)) == (1, "reused", 2)


def test_without_a_service_each_candidate_is_graded_once(gradings):
    """A container (no service log): finalize grades each candidate on the visible
    tests, and the final solution's grade is that grading's."""
    raw, _ = episode((WRONG, FAIL), (GOOD, PASS))
    info = run(raw, None, GOOD)
    assert info.reward == 1.0 and (info.visible_gradings, info.final_grade, info.final_gradings) == (2, "reused", 0)
    assert len(gradings) == 2
    info = run(raw, None, GOOD, MORE)
    assert info.reward == 1.0 and (info.visible_gradings, info.final_grade, info.final_gradings) == (2, "graded", 1)


@pytest.mark.parametrize("tests", [MORE, WITH_PLUS], ids=["more-hidden-tests", "plus-tests"])
def test_a_hidden_suite_other_than_what_the_service_graded_is_graded(gradings, tests):
    raw, want = episode((WRONG, FAIL), (GOOD, PASS))
    log, _ = served(want, tests)
    info = run(raw, log, GOOD, tests)
    assert info.final_grade == "graded" and info.metrics.final_grade_reused == 0.0
    suite = "\n".join(tests.hidden) + ("" if tests.plus is None else "\n" + "\n".join(tests.plus))
    assert gradings == [suite] and info.final_gradings == 1 and info.final_outcome == PASS and info.reward == 1.0


def test_other_limits_are_graded(gradings):
    raw, want = episode((WRONG, FAIL), (GOOD, PASS))
    log, _ = served(want, SAME, Limits(cpu_s=5, wall_s=11))
    info = run(raw, log, GOOD)
    assert info.final_grade == "graded" and len(gradings) == 1 and info.reward == 1.0


def test_two_recorded_grades_of_one_source_are_graded_again(gradings):
    rg = Regrader(SAME, LIMITS)
    key = rg.base_key()
    entry = {"sha256": fin.sha256(GOOD), "key": key, "shadow": False}
    rg.seed_grades([{**entry, "outcome": PASS, "detail": ""}])
    assert rg.hidden(GOOD) == {"base": (PASS, ""), "plus": None} and gradings == [] and rg.final_reused
    rg = Regrader(SAME, LIMITS)
    rg.seed_grades([{**entry, "outcome": PASS, "detail": ""}, {**entry, "outcome": "TIMEOUT", "detail": "t"}])
    assert rg.hidden(GOOD)["base"] == (PASS, "") and len(gradings) == 1 and not rg.final_reused
    with pytest.raises(KeyError):  # the log is trusted: a keyed entry without its detail is glyph's fault
        Regrader(SAME, LIMITS).seed_grades([{**entry, "outcome": PASS}])


def test_a_missing_solution_has_no_final_grade(gradings):
    raw, want = episode((GOOD, PASS))
    log, _ = served(want)
    info = run(raw, log, None)
    assert info.final_grade is None and info.final_gradings == 0 and gradings == []
    assert info.metrics.final_grade_reused == 0.0
