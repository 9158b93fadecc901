"""glyph's study profile rebuilds the PREDICT study's data exactly: its
splits, SFT traces and task rows, proven against the facts of its published
data (``../shared/study/facts.json``, or ``$GLYPH_STUDY_FACTS``).

The whole ``glyph data prepare --profile study`` runs once per module (about
10 s: the recovery search grades 124 mutations, one of them a 5 s TIMEOUT),
so every row is checked in CI, none sampled."""

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from glyph.agent import study as S
from glyph.cli.app import app
from glyph.data import study, study_check
from glyph.data.sft import Fix
from glyph.errors import DataError

runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def facts_path() -> Path:
    chosen = os.environ.get(study_check.ENV_VAR) or REPO.parent / "shared" / "study" / "facts.json"
    p = Path(chosen)
    if not p.is_file():
        pytest.skip(f"needs the study facts: {p} is absent (set {study_check.ENV_VAR} to the facts file)")
    return p


@pytest.fixture(scope="module")
def facts(facts_path) -> dict:
    return json.loads(facts_path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mbpp_path, facts_path) -> Path:
    out = tmp_path_factory.mktemp("study")
    r = runner.invoke(app, ["data", "prepare", "--out", str(out), "--mbpp-path", mbpp_path])  # the default profile
    assert r.exit_code == 0, r.output
    return out


def test_glyph_data_validate_points_a_study_folder_to_study_check(prepared, mbpp_path):
    r = runner.invoke(app, ["data", "validate", "--out", str(prepared), "--mbpp-path", mbpp_path])
    assert r.exit_code == 2 and "glyph study check" in r.output and "--profile glyph" in r.output


@pytest.fixture(scope="module")
def parts(prepared, facts_path) -> dict:
    return {p.name: p for p in study_check.check(prepared, facts_path)}


def test_splits_equal_the_study(mbpp_tasks, facts):
    splits = study.make_splits([study.from_mbpp(t) for t in mbpp_tasks.values()])
    ids = {k: sorted(t.task_id for t in splits[k]) for k in ("sft", "rl", "validation")}
    assert ids == {"sft": facts["splits"]["sft_task_ids"], "rl": facts["splits"]["rl_train_task_ids"],
                   "validation": facts["splits"]["validation_task_ids"]}
    assert [t.task_id for t in splits["rl"]] == facts["task_rows"]["a_train"]["task_ids"]  # key order
    assert [t.task_id for t in splits["test"]] == list(range(11, 511))


def test_the_prepared_folder_equals_the_study_part_by_part(parts):
    assert study_check.summary_line(list(parts.values())) == \
        "study: splits 464/464, sft_a 212/212, sft_b 212/212, task_rows 1504/1504"
    assert {n: (p.equal, p.total) for n, p in parts.items()} == {
        "splits": (464, 464), "sft_a": (212, 212), "sft_b": (212, 212), "task_rows": (1504, 1504)}


def test_sft_rows_carry_the_study_labels_and_composition(prepared, facts, mbpp_tasks):
    in_key_order = [t.task_id for t in study.make_splits([study.from_mbpp(t) for t in mbpp_tasks.values()])["sft"]]
    for arm in "ab":
        rows = [json.loads(line) for line in (prepared / "sft" / f"arm_{arm}" / "train.jsonl").open()]
        assert [r["task_id"] for r in rows] == in_key_order
        got = {str(r["task_id"]): (r["trace_type"], r["recovery_mode"], r["candidate_outcome"]) for r in rows}
        want = {i: (f["trace_type"], f["recovery_mode"], f["candidate_outcome"])
                for i, f in facts["sft"][arm]["per_task"].items()}
        assert got == want
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert manifest["profile"] == "study"
    assert manifest["sft"]["composition"] == facts["sft"]["a"]["composition"]
    assert manifest["sft"]["recovery_outcomes"] == facts["split_other"]["recovery_outcomes"]


def test_the_files_are_the_study_files_byte_for_byte(prepared, facts_path):
    part = study_check.artifacts(prepared, facts_path)
    assert (part.equal, part.total) == (9, 9), part.line()


def test_check_cli_last_line_and_exit_status(prepared, facts_path):
    r = runner.invoke(app, ["study", "check", str(prepared), "--facts", str(facts_path)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == \
        "study: splits 464/464, sft_a 212/212, sft_b 212/212, task_rows 1504/1504"


def test_check_names_the_first_difference_and_exits_1(prepared, facts_path, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    path = copy / "sft" / "arm_b" / "train.jsonl"
    rows = [json.loads(line) for line in path.open()]
    rows[3]["messages"][2]["content"] += " "  # the first assistant turn of the fourth task
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task_file = copy / "arm_a_validation.jsonl"
    task_rows = [json.loads(line) for line in task_file.open()]
    task_rows[0]["test_code"] = task_rows[0]["test_code"].replace("\n", "\r\n")
    task_file.write_text("".join(json.dumps(r) + "\n" for r in task_rows))
    r = runner.invoke(app, ["study", "check", str(copy), "--facts", str(facts_path)])
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert f"sft_b: 211/212 equal; first difference: sft/arm_b/train.jsonl task {rows[3]['task_id']}: " \
           "messages differ: the assistant turns (messages 2, 4, 6, 8)" in out
    assert f"task_rows: 1503/1504 equal; first difference: arm_a_validation.jsonl row 1 " \
           f"(task {task_rows[0]['task_id']}): test_code differs" in out
    assert out.strip().splitlines()[-1] == "study: splits 464/464, sft_a 212/212, sft_b 211/212, task_rows 1503/1504"


def test_check_without_facts_or_folder_is_one_line_error(prepared, facts_path, monkeypatch, tmp_path):
    monkeypatch.delenv(study_check.ENV_VAR, raising=False)
    r = runner.invoke(app, ["study", "check", str(prepared)])
    assert r.exit_code == 2 and "GLYPH_STUDY_FACTS" in r.output
    monkeypatch.setenv(study_check.ENV_VAR, str(facts_path))
    r = runner.invoke(app, ["study", "check", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and "no such folder" in r.output


def test_study_is_the_default_profile_and_switches_are_the_study_profiles(tmp_path, monkeypatch):
    """--profile defaults to study; --plus belongs to the glyph profile, --split-key and
    --recovery to the study profile, each refused on the other in one line, before any work."""
    import glyph.data.prepare as glyph_prepare

    calls = []

    def stop(name):
        def prepare(*args, **kwargs):
            calls.append((name, kwargs))
            raise DataError(f"{name} prepare called")
        return prepare

    monkeypatch.setattr(glyph_prepare, "prepare", stop("glyph"))
    monkeypatch.setattr(study, "prepare", stop("study"))
    r = runner.invoke(app, ["data", "prepare", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "study prepare called" in r.output
    assert calls[-1][1] == {"split_key": "study", "recovery": "study"}
    r = runner.invoke(app, ["data", "prepare", "--split-key", "glyph", "--recovery", "glyph", "--out", str(tmp_path)])
    assert calls[-1][1] == {"split_key": "glyph", "recovery": "glyph"}
    r = runner.invoke(app, ["data", "prepare", "--profile", "glyph", "--no-plus", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "glyph prepare called" in r.output
    n = len(calls)
    r = runner.invoke(app, ["data", "prepare", "--no-plus", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "the study profile writes no plus tests" in r.output
    r = runner.invoke(app, ["data", "prepare", "--profile", "glyph", "--split-key", "glyph", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "switches of the study profile" in r.output
    assert len(calls) == n  # refused before any prepare


def test_switched_splits_and_recoveries(mbpp_path, tmp_path):
    """--split-key glyph: glyph's draw of the study's rows; --recovery glyph: the same composition
    from glyph's swaps, with no TIMEOUT or OTHER candidate."""
    from glyph.data import mbpp

    source = mbpp.load_source(mbpp_path)
    tasks = [study.from_mbpp(t) for t in source.tasks]
    drawn = study.make_splits(tasks, 42, "glyph")
    assert {k: [t.task_id for t in v] for k, v in drawn.items()} == mbpp.make_splits(
        {t.task_id: t for t in source.tasks}, 42)
    with pytest.raises(ValueError, match="split_key"):
        study.make_splits(tasks, 42, "random")
    grader = study.Grader()
    sft = study.make_splits(tasks, 42)["sft"]
    ours = [r for t in sft[:40] if (r := study.one_step(t, grader, "glyph", 42)) is not None]
    theirs = [r for t in sft[:40] if (r := study.one_step(t, grader, "study", 42)) is not None]
    assert ours and theirs and {r.first_outcome for r in ours} <= {"ASSERTION_FAILURE", "RUNTIME_ERROR",
                                                                   "SYNTAX_ERROR"}
    assert [r.first_code for r in ours] != [r.first_code for r in theirs]
    assert ours == [r for t in sft[:40] if (r := study.one_step(t, grader, "glyph", 42)) is not None]  # seeded


# ---------------------------------------------------------------- the algorithm, small


def test_mutations_in_source_order_with_the_study_rules():
    code = "def f(a, b):\n    x = a + b\n    x = a + b\n    return x <= 3 and True\n"
    got = [(m.line, m.changed) for m in study.mutations(code)]
    # the def line and the repeated line are never mutated
    assert got == [(3, "    return x < 3 and True\n"), (3, "    return x <= 4 and True\n"),
                   (3, "    return x <= 3 or True\n"), (3, "    return x <= 3 and False\n")]


class _Table(study.Grader):
    """Outcomes from a table, by the mutated line; everything else passes."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def outcome(self, task, code):
        return next((o for line, o in self.table.items() if line in code), "PASS")


def _task(code):
    return study.StudyTask(1, "t", code, "", ("assert f(1) == 1",))


def test_one_step_takes_the_first_failing_mutation_any_outcome():
    task = _task("def f(n):\n    while n > 0:\n        n = n - 1\n    return n + 1\n")
    r = study.one_step(task, _Table({"n = n + 1": "TIMEOUT", "return n - 1": "ASSERTION_FAILURE"}))
    assert r.fixes == (Fix("        n = n + 1\n", "        n = n - 1\n", "TIMEOUT"),)


def test_two_step_chains_two_failing_mutations_back_to_the_reference():
    code = "def f(n):\n    m = n * 2\n    return m + 1\n"
    task = _task(code)
    r = study.two_step(task, _Table({"m = n + 2": "RUNTIME_ERROR", "return m - 1": "ASSERTION_FAILURE"}))
    assert [f.outcome for f in r.fixes] == ["RUNTIME_ERROR", "ASSERTION_FAILURE"]
    assert r.first_code == "def f(n):\n    m = n + 2\n    return m + 1\n"
    middle, back = r.fixes
    assert (middle.find, middle.replace) == ("    m = n + 2\n    return m + 1\n", "    m = n * 2\n    return m - 1\n")
    assert r.first_code.replace(middle.find, middle.replace).replace(back.find, back.replace) == code


def test_traces_speak_the_study_protocol():
    task = _task("def f(n):\n    return n\n")
    msgs = study.messages(task, "b", study.Recovery("def f(n):\n    return n + 1\n",
                                                    (Fix("    return n + 1\n", "    return n\n", "ASSERTION_FAILURE"),)), "shadow")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                         "assistant", "tool", "assistant", "tool", "assistant"]
    assert msgs[0]["content"] == S.SYSTEM_PROMPT_B
    assert msgs[2]["content"] == 'CALL read_file {"id":"c1","file_path":"data/blueprints/mbpp_1/solution.py"}'
    assert msgs[3]["content"] == "RESULT c1:\nstatus: success\nstdout:\n# Write your function here."
    assert msgs[6]["content"].splitlines()[:2] == ["<PREDICTION>ASSERTION_FAILURE</PREDICTION>",
                                                   "<DECISION>REVISE</DECISION>"]
    assert msgs[8]["content"].endswith('CALL python_test {"id":"c4","project_path":"data/blueprints/mbpp_1"}')
    assert msgs[-1]["content"] == S.FINAL_TURN
