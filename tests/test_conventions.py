"""glyph's conventions data file, MODE_LESSONS, `glyph conventions validate`, extract_code."""

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from glyph.cli.app import app
from glyph.data import conventions

runner = CliRunner()


def test_shipped_file_shape_and_lessons():
    tasks = conventions.load_tasks()
    modes = {t.mode for t in tasks}
    assert len(tasks) >= 40 and len(modes) >= 12
    per = Counter((t.mode, t.split) for t in tasks)
    short = [m for m in modes if per[m, "train"] < 1 or per[m, "holdout"] < 2]
    assert not short, f"modes without >= 1 train and >= 2 holdout tasks: {short}"
    assert modes >= {"empty_none", "unique_sorted", "inclusive_range", "one_indexed", "case_insensitive",
                     "iso_date", "parse_none", "round_2dp", "index_none", "range_guard"}
    assert modes <= set(conventions.MODE_LESSONS), f"no lesson for {modes - set(conventions.MODE_LESSONS)}"
    for mode in modes:
        lesson = conventions.MODE_LESSONS[mode]
        assert lesson.strip() and "\n" not in lesson
    for t in tasks:
        assert t.hidden_test.startswith("from solution import solve\n"), t.id
        assert "solve(" in t.spec and t.reference_broken != t.reference_fixed, t.id


def test_shipped_file_validates():
    """Grades every reference (broken must fail, fixed must pass) through glyph's grader."""
    r = runner.invoke(app, ["conventions", "validate", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    n = report["tasks"]
    assert n == len(conventions.load_tasks())
    assert report["problems"] == [] and report["bad_rows"] == 0
    assert report["broken_failing"] == n and report["fixed_passing"] == n
    assert all(row["ok"] and row["broken"] != "PASS" and row["fixed"] == "PASS" for row in report["rows"])
    assert all(m["covered"] for m in report["per_mode"].values())


def _row(base: dict, **changes) -> str:
    row = {**base, **changes}
    for key in [k for k, v in changes.items() if v is None]:
        del row[key]
    return json.dumps(row)


@pytest.fixture(scope="module")
def good_rows() -> list[dict]:
    lines = conventions.DATA_FILE.read_text(encoding="utf-8").splitlines()
    return [json.loads(x) for x in lines[:2]]


def test_cli_names_file_and_line_of_every_bad_row(tmp_path, good_rows):
    g = good_rows[0]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join([
        _row(g),                                                         # 1 good
        _row(g, id="no_spec", spec=None),                                # 2 missing field
        _row(g, id="odd_split", split="test"),                           # 3 unknown split
        "{not json",                                                     # 4
        "",                                                              # 5 blank: skipped
        _row(g, id="lenient", reference_broken=g["reference_fixed"]),    # 6 broken passes
        _row(g, id="wrong_fix", reference_fixed=g["reference_broken"]),  # 7 fixed fails
        _row(g, id="bad_test", hidden_test="from solution import solve\nassert solve(\n"),  # 8
    ]) + "\n")
    r = runner.invoke(app, ["conventions", "validate", "--tasks", str(path)])
    assert r.exit_code == 1, r.output
    bad = [x for x in r.stdout.splitlines() if x.startswith(f"{path}:")]
    assert [x[len(str(path)) + 1:].split(":")[0] for x in bad] == ["2", "3", "4", "6", "7", "8"]
    want = ["missing field spec", "unknown split 'test'", "not JSON", "lenient: reference_broken passes",
            "wrong_fix: reference_fixed fails", "bad_test: hidden_test is unusable"]
    for line, text in zip(bad, want):
        assert text in line, line
    assert "6 bad rows" in r.stdout

    r = runner.invoke(app, ["conventions", "validate", "--tasks", str(path), "--json"])
    report = json.loads(r.stdout)
    assert r.exit_code == 1 and report["bad_rows"] == 6 and report["tasks"] == 4
    assert [row["line"] for row in report["rows"]] == [1, 6, 7, 8]


def test_cli_good_file_passes(tmp_path, good_rows):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in good_rows))
    r = runner.invoke(app, ["conventions", "validate", "--tasks", str(path)])
    assert r.exit_code == 0, r.output
    assert "0 bad rows" in r.stdout and f"{path}:" not in r.stdout


def test_cli_unreadable_file_is_a_one_line_error(tmp_path):
    r = runner.invoke(app, ["conventions", "validate", "--tasks", str(tmp_path / "nope.jsonl")])
    assert r.exit_code == 2 and "nope.jsonl: cannot read" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_read_tasks_located_keeps_line_numbers(tmp_path, good_rows):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n" + json.dumps(good_rows[0]) + "\nnot json\n" + json.dumps(good_rows[1]) + "\n")
    located, errors = conventions.read_tasks_located(path)
    assert [n for n, _ in located] == [2, 4]
    assert len(errors) == 1 and errors[0].startswith(f"{path}:3: not JSON")
    assert conventions.read_tasks(path) == ([t for _, t in located], errors)


@pytest.mark.parametrize("reply,code", [
    ("```python\ndef solve():\n    return 1\n```", "def solve():\n    return 1\n"),
    ("Here:\n```py\nx = 1\n```\nand better:\n```python\nx = 2\n```\ndone", "x = 2\n"),
    ("```\nx = 3\n```", "x = 3\n"),
    ("```Python3\r\nx = 4\r\n```", "x = 4\r\n"),
    ("```python\nx = 5\n", "x = 5\n"),  # cut off before the closing fence
    ("def solve():\n    return 6\n", "def solve():\n    return 6\n"),  # no fence: the whole reply
    ("```bash\nls\n```\n", "```bash\nls\n```\n"),  # not Python: left alone (grading reports it)
    ("", ""),
    (None, ""),
])
def test_extract_code(reply, code):
    assert conventions.extract_code(reply) == code


def test_range_guard_enforces_both_ends_and_no_wraparound():
    """The range-guard mode (the original flywheel's negative-index convention): an index is
    valid only when 0 <= i < len. Its hidden tests fail a solution that guards one end only,
    so the mode is not index_none's (too large -> None) under another name."""
    import re

    tasks = [t for t in conventions.load_tasks() if t.mode == "range_guard"]
    assert {t.split for t in tasks} == {"train", "holdout"} and len(conventions.split(tasks, "holdout")) >= 2
    lesson = conventions.MODE_LESSONS["range_guard"]
    assert lesson != conventions.MODE_LESSONS["index_none"] and "negative" in lesson
    for t in tasks:
        assert re.search(r"solve\([^)]*, -\d+\) is None", t.hidden_test), t.id  # a negative index -> None
        assert "0 <= " in t.reference_fixed, t.id
        assert conventions.grade(t, t.reference_fixed).passed, t.id
        upper_only = t.reference_fixed.replace("0 <= ", "")  # Python's wraparound for a negative index
        lower_only = re.sub(r" < len\([^)]*\)", "", t.reference_fixed)  # IndexError past the end
        assert upper_only != t.reference_fixed and lower_only != t.reference_fixed, t.id
        for mutant in (upper_only, lower_only, t.reference_broken):
            g = conventions.grade(t, mutant)
            assert not g.passed, (t.id, mutant)
