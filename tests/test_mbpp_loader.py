import json

import pytest

from glyph.tasks import mbpp

ROW = {"task_id": 11, "text": "t", "code": "def f(): pass", "test_setup_code": "",
       "test_list": ["assert f() is None"], "challenge_test_list": []}


def write(tmp_path, rows):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def test_loads_rows_by_id(tmp_path):
    tasks = mbpp.load(write(tmp_path, [ROW, dict(ROW, task_id=12)]))
    assert list(tasks) == ["mbpp_11", "mbpp_12"]
    assert tasks["mbpp_11"].tests() == "assert f() is None"


@pytest.mark.parametrize("bad,message", [
    ("{not json", r"m\.jsonl:2: not a JSON object"),
    (dict(ROW, task_id="12"), r"m\.jsonl:2: field 'task_id' should be int, got str"),
    ({k: v for k, v in ROW.items() if k != "code"}, r"m\.jsonl:2: field 'code' is missing"),
    (dict(ROW, test_list=[1]), r"m\.jsonl:2: field 'test_list' should be a list of strings"),
    (dict(ROW, task_id=11), r"m\.jsonl:2: task_id 11 repeats line 1"),
    (dict(ROW, task_id=13, test_list=[]), r"m\.jsonl:2: field 'test_list' is empty"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, bad, message):
    with pytest.raises(mbpp.DataError, match=message):
        mbpp.load(write(tmp_path, [ROW, bad]))


def test_missing_data_says_how_to_provide_it(monkeypatch, tmp_path):
    monkeypatch.delenv("GLYPH_MBPP_PATH", raising=False)
    with pytest.raises(mbpp.DataError, match="set GLYPH_MBPP_PATH"):
        mbpp.load()
    with pytest.raises(mbpp.DataError, match="no such file"):
        mbpp.load(tmp_path / "absent.jsonl")


def test_unknown_task_says_how_to_list_ids(tmp_path):
    with pytest.raises(mbpp.DataError, match="glyph data list"):
        mbpp.get_task("mbpp_99999", write(tmp_path, [ROW]))


def test_shared_copy_has_the_official_shape(mbpp_tasks):
    assert len(mbpp_tasks) == 974
    assert sum(len(t.test_list) for t in mbpp_tasks.values()) == 2922
    assert sum(1 for t in mbpp_tasks.values() if t.challenge_test_list) == 11
