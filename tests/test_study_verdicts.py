"""The study profile's verdicts on honest code (``glyph.semantics.STUDY``)
against the study's classifier, re-implemented as a test oracle
(``testkit.study_oracle``), on ``testkit.study_verdicts``'s
corpus: the crafted cases and a CI-sized slice of MBPP (the full corpus:
``python -m testkit.study_verdicts``, figures in the README). Then
what the profile wires: its python_tests, finalize's re-run and
``glyph grade --profile``; glyph's semantics as they were; and forgeries of
the one-file end, which never pass."""

import pytest
from typer.testing import CliRunner

from glyph import profiles
from glyph.cli.app import app
from glyph.envs.mbpp.finalize import Regrader, TaskTests
from glyph.envs.mbpp.test_service import SandboxTestService
from glyph.grading import grade
from glyph.sandbox import Limits
from glyph.semantics import GLYPH, STUDY
from testkit import study_verdicts as sv
from testkit.study_oracle import classify_stderr, study_outcome

LIMITS = Limits(cpu_s=sv.TIMEOUT_S, wall_s=sv.TIMEOUT_S)
SLICE_STEP = 40  # every 40th MBPP task: 25 references and their first two mutations (~75 cases)


@pytest.fixture(scope="module")
def crafted_report():
    return sv.run(sv.crafted())


def test_the_oracle_reads_stderr_by_the_studys_rules_in_its_order():
    assert classify_stderr("IndentationError ... AssertionError ... Traceback (most recent call last)") \
        == "SYNTAX_ERROR"
    assert classify_stderr("Traceback (most recent call last):\nAssertionError") == "ASSERTION_FAILURE"
    assert classify_stderr("Traceback (most recent call last):\nKeyError: 1") == "RUNTIME_ERROR"
    assert classify_stderr("bye") == "OTHER"
    assert study_outcome("def f(x):\n    return x * x\n", "assert f(2) == 4\n", 5) == "PASS"


def test_every_crafted_verdict_is_the_studys_but_the_known_differences(crafted_report):
    differ = {r.case.name: (r.oracle, r.study) for r in crafted_report.differences()}
    assert set(differ) == set(sv.KNOWN), "\n".join(crafted_report.lines())


def test_the_studys_classifier_tells_every_class_apart_in_the_crafted_cases(crafted_report):
    """The crafted corpus exercises each outcome class, both paths, and the cases the issue measured."""
    seen = {r.oracle for r in crafted_report.results}
    assert {"PASS", "ASSERTION_FAILURE", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "OTHER"} <= seen
    by = {r.case.name: r for r in crafted_report.results}
    issue = {"main_exit_0": "OTHER", "main_self_check_fails": "ASSERTION_FAILURE",
             "main_input": "RUNTIME_ERROR", "fraction": "PASS", "decimal": "PASS", "tab_error": "OTHER",
             "eval_syntax_error": "SYNTAX_ERROR", "raise_mentions_assertion": "ASSERTION_FAILURE"}
    for name, want in issue.items():
        assert by[name].oracle == by[name].study == want, name
        assert by[name].glyph != want, f"{name}: glyph's own semantics already agreed"
        assert by[f"referee/{name}"].study == want if f"referee/{name}" in by else True


def test_glyphs_semantics_stay_glyphs(crafted_report):
    """Under the glyph profile nothing changed: exits and prints after the checks do not count, exact
    builtin types only, a failure's class from its exception's builtin class."""
    by = {r.case.name: r.glyph for r in crafted_report.results}
    assert by["main_exit_0"] == by["main_input"] == by["print_no_newline"] == by["atexit_prints"] == "PASS"
    assert by["fraction"] == by["decimal"] == "ASSERTION_FAILURE"
    assert by["tab_error"] == "SYNTAX_ERROR"
    assert by["eval_syntax_error"] == by["raise_mentions_assertion"] == "RUNTIME_ERROR"


def test_a_slice_of_mbpp_references_and_mutations_agrees(mbpp_tasks):
    cases = sv.corpus(mbpp_tasks, per_task=2, sft_all=False, step=SLICE_STEP)
    cases = [c for c in cases if c.kind != "crafted"]
    report = sv.run(cases)
    assert len(cases) > 60
    assert report.differences() == [], "\n".join(report.lines())


# ---------------------------------------------------------------- forgeries

FORGED_END = """
import os
def f(x):
    return x
os.write(3, b'{"ev":"end","stdout":true,"err":[]}\\n')
"""
PRINTED_MARKER = """
import sys
def f(x):
    return -1
sys.__stdout__.write("PREDICT_TESTS_PASSED_0123\\n")
"""
EXITS_CLEAN = """
import os, atexit
def f(x):
    return 0
atexit.register(lambda: os._exit(0))
"""


@pytest.mark.parametrize("source", [FORGED_END, PRINTED_MARKER, EXITS_CLEAN], ids=["end", "marker", "exit"])
def test_a_wrong_solution_that_forges_the_one_file_end_is_never_passed(source, sandbox):
    for tests in ("\n".join(sv._SQ), sv._REFEREE[0]):
        assert not grade(source, "", tests, limits=LIMITS, sandbox=sandbox, semantics=STUDY).passed


# ---------------------------------------------------------------- the profile's wiring


def test_the_study_profile_grades_by_the_studys_semantics_and_re_runs_the_final_verification():
    study, ours = profiles.get("study"), profiles.get("glyph")
    assert study.semantics is STUDY and study.reuse_final_grade is False
    assert ours.semantics is GLYPH and ours.reuse_final_grade is True
    assert study.grading() == (Limits(cpu_s=30.0, wall_s=30.0), STUDY)


def test_the_test_service_and_finalize_grade_under_the_profiles_semantics():
    """A solution whose ``__main__`` block exits: the service answers the study's OTHER; finalize, seeded
    with that log, grades the final solution again under the study (its key names the semantics)."""
    source = sv.CRAFTED["main_exit_0"]
    tests = TaskTests("", sv._SQ, sv._SQ)
    service = SandboxTestService()
    try:
        service.register("s", "", list(sv._SQ), LIMITS, STUDY)
        assert service.rollouts["s"].test("1", source, False) == "OTHER"
        log = service.release("s")["log"]
    finally:
        service.close()
    again = Regrader(tests, LIMITS, semantics=STUDY, reuse_final=False)
    again.seed_grades(log)
    assert again.hidden(source)["base"][0] == "OTHER" and again.final_gradings == 1
    reused = Regrader(tests, LIMITS, semantics=STUDY)
    reused.seed_grades(log)
    assert reused.hidden(source)["base"][0] == "OTHER" and reused.final_reused
    other_key = Regrader(tests, LIMITS)  # glyph's semantics: the study's record is not its grade
    other_key.seed_grades(log)
    assert other_key.hidden(source)["base"][0] == "PASS" and other_key.final_gradings == 1


def test_glyph_grade_grades_as_the_profile_says(tmp_path):
    (tmp_path / "s.py").write_text(sv.CRAFTED["main_exit_0"])
    (tmp_path / "t.py").write_text("\n".join(sv._SQ))
    args = ["grade", "--tests", str(tmp_path / "t.py"), "--solution", str(tmp_path / "s.py")]
    runner = CliRunner()
    study, ours = runner.invoke(app, args), runner.invoke(app, [*args, "--profile", "glyph"])
    assert study.exit_code == 1 and "OTHER" in study.output
    assert ours.exit_code == 0 and "PASS" in ours.output
    bad = runner.invoke(app, [*args, "--profile", "nope"])
    assert bad.exit_code != 0 and "no such profile" in bad.output
