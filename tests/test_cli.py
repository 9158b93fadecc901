import json

import pytest
from typer.testing import CliRunner

from glyph.cli import app
from glyph.redteam import DEMO_SOLUTION, DEMO_TESTS

runner = CliRunner()


@pytest.fixture()
def files(tmp_path):
    (tmp_path / "good.py").write_text(DEMO_SOLUTION)
    (tmp_path / "bad.py").write_text("def remove_first_last(s, ch):\n    return s\n")
    (tmp_path / "tests.py").write_text(DEMO_TESTS)
    (tmp_path / "latin1.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "empty.py").write_text("")
    return tmp_path


def test_grade_tests_json(files):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "good.py"), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["passed"] is True and d["outcome"] == "PASS" and len(d["checks"]) == 3 and d["seconds"] > 0


def test_grade_failure_exit_code_and_text(files):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "bad.py")])
    assert r.exit_code == 1
    assert "ASSERTION_FAILURE" in r.stdout and "got 'hello', expected 'heo'" in r.stdout


@pytest.mark.parametrize("name,outcome", [("latin1.py", "SYNTAX_ERROR"), ("empty.py", "RUNTIME_ERROR")])
def test_bad_solution_files_are_outcomes(files, name, outcome):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / name), "--json"])
    assert json.loads(r.stdout)["outcome"] == outcome


def test_missing_solution_is_a_one_line_error(files):
    r = runner.invoke(app, ["grade", "--tests", str(files / "tests.py"), "--solution", str(files / "nope.py")])
    assert r.exit_code == 2 and "nope.py: no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_grade_mbpp_task(files, mbpp_path):
    sol = files / "sol.py"
    sol.write_text("def remove_Occ(s, ch):\n    s = s.replace(ch, '', 1)\n    i = s.rfind(ch)\n"
                   "    return s if i < 0 else s[:i] + s[i + 1:]\n")
    r = runner.invoke(app, ["grade", "--task", "mbpp_11", "--solution", str(sol), "--json", "--mbpp-path", mbpp_path])
    assert r.exit_code == 0 and json.loads(r.stdout)["passed"]


def test_unknown_task_is_a_one_line_error(files, mbpp_path):
    r = runner.invoke(app, ["grade", "--task", "mbpp_0", "--solution", str(files / "good.py"), "--mbpp-path", mbpp_path])
    assert r.exit_code == 2 and "glyph data list" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_sandbox_info_json():
    r = runner.invoke(app, ["sandbox", "info", "--json"])
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert set(d["protections"]) >= {"pid_namespace", "network", "filesystem", "uid_separation", "rlimits"}


def test_demo_runs_vf_eval_for_both_arms(mbpp_path, tmp_path):
    r = runner.invoke(app, ["demo", "--tasks", "4", "--mbpp-path", mbpp_path, "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "against expectation" not in r.stdout and "mbpp_14" in r.stdout


def test_attack_demo_grades_as_expected():
    from rich.console import Console

    from glyph.demo import run_attack_demo
    console = Console(record=True, width=200)
    assert run_attack_demo(console) == 0
    assert "always_equal" in console.export_text()


def test_check_gold_all_pass(mbpp_path):
    r = runner.invoke(app, ["data", "check-gold", "--json", "--mbpp-path", mbpp_path])
    d = json.loads(r.stdout)
    assert d["tests"]["counts"] == {"PASS": 974} and d["challenge"]["counts"] == {"PASS": 11}, d
    assert r.exit_code == 0
