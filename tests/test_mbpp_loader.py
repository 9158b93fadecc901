import json
import os
import re
from pathlib import Path

import pytest

from glyph.data import mbpp
from glyph.errors import DataError

ROW = {"task_id": 11, "text": "t", "code": "def f(): pass", "test_setup_code": "",
       "test_list": ["assert f() is None"], "challenge_test_list": []}


def write(tmp_path, rows, name="m.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def write_parquet(tmp_path, rows, name="m.parquet"):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), p)
    return p


def test_loads_rows_by_id(tmp_path):
    tasks = mbpp.load(write(tmp_path, [ROW, dict(ROW, task_id=12)]))
    assert list(tasks) == ["mbpp_11", "mbpp_12"]
    assert tasks["mbpp_11"].tests() == "assert f() is None"


def test_bad_json_names_file_and_line(tmp_path):
    with pytest.raises(DataError, match=r"m\.jsonl:2: not a JSON object"):
        mbpp.load(write(tmp_path, [ROW, "{not json"]))
    with pytest.raises(DataError, match=r"m\.jsonl:2: not a JSON object"):
        mbpp.load(write(tmp_path, [ROW, "[1, 2]"]))


# (rows, index of the bad row, message after "where: "). Every column has one
# type across the rows, so pyarrow can write the same rows as parquet.
BAD = {
    "task_id str": ([dict(ROW, task_id="12")], 0, r"field 'task_id' should be int, got str"),
    "task_id bool": ([dict(ROW, task_id=True)], 0, r"field 'task_id' should be int, got bool"),
    "code missing": ([{k: v for k, v in ROW.items() if k != "code"}], 0, r"field 'code' is missing"),
    "text null": ([dict(ROW, text=None)], 0, r"field 'text' should be str, got NoneType"),
    "test_list ints": ([dict(ROW, test_list=[1])], 0, r"field 'test_list' should be a list of strings"),
    "test_list str": ([dict(ROW, test_list="assert 1")], 0, r"field 'test_list' should be list, got str"),
    "challenge null": ([dict(ROW, challenge_test_list=None)], 0,
                       r"field 'challenge_test_list' should be list, got NoneType"),
    "test_list empty": ([ROW, dict(ROW, task_id=13, test_list=[])], 1, r"field 'test_list' is empty"),
    "task_id repeated": ([ROW, dict(ROW, code="def f(): return")], 1, r"task_id 11 repeats \S*m\.{ext}"),
}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("case", list(BAD))
def test_both_loaders_reject_a_bad_row_naming_where_and_the_field(tmp_path, fmt, case):
    rows, bad, message = BAD[case]
    if fmt == "jsonl":
        p, where, load = write(tmp_path, rows), f"m\\.jsonl:{bad + 1}", mbpp.load_jsonl
    else:
        p, where, load = write_parquet(tmp_path, rows), f"m\\.parquet: row {bad}", mbpp.load_parquet
    with pytest.raises(DataError, match=rf"{where}: {message.format(ext=fmt)}") as exc:
        load(p)
    assert str(p) in str(exc.value)


def test_repeat_names_the_first_place(tmp_path):
    rows = [ROW, dict(ROW, task_id=12), dict(ROW, code="x")]
    with pytest.raises(DataError, match=re.escape(f"repeats {tmp_path / 'm.jsonl'}:1")):
        mbpp.load_jsonl(write(tmp_path, rows))
    with pytest.raises(DataError, match=re.escape(f"repeats {tmp_path / 'm.parquet'}: row 0")):
        mbpp.load_parquet(write_parquet(tmp_path, rows))


def test_a_file_without_rows_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pytest.raises(DataError, match=r"m\.jsonl: no rows"):
        mbpp.load_jsonl(write(tmp_path, [""]))
    p = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist([ROW]).slice(0, 0), p)
    # datasets 5.2 cannot read a parquet file of no rows (ArrowInvalid: BatchSize must be
    # greater than 0): refused either way, naming the file
    with pytest.raises(DataError, match=r"m\.parquet: (no rows|not a readable parquet file)"):
        mbpp.load_parquet(p)


def test_a_file_that_is_not_parquet_is_a_data_error(tmp_path):
    p = tmp_path / "m.parquet"
    p.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"m\.parquet: not a readable parquet file \(Arrow"):
        mbpp.load_parquet(p)


def test_parquet_round_trips_to_the_tasks_of_the_same_jsonl(tmp_path):
    rows = [ROW, dict(ROW, task_id=12, text="ü\n\"quoted\"", test_setup_code="import math",
                      test_list=["assert f() is None", "assert True"],
                      challenge_test_list=["assert 1 == 1"])]
    from_jsonl = mbpp.load_jsonl(write(tmp_path, rows))
    from_parquet = mbpp.load_parquet(write_parquet(tmp_path, rows))
    assert from_parquet == from_jsonl
    assert from_parquet[1].challenge_test_list == ("assert 1 == 1",)


def test_parquet_read_leaves_no_cache_behind(tmp_path, monkeypatch):
    """datasets writes an Arrow cache before serving a file; the loader puts
    it in a temporary directory, removed, and reads a local file offline."""
    import datasets

    (tmp_path / "data").mkdir()
    p = write_parquet(tmp_path / "data", [ROW])
    home = tmp_path / "hf"  # where datasets would cache by default
    for name in ("HF_DATASETS_CACHE", "DOWNLOADED_DATASETS_PATH", "EXTRACTED_DATASETS_PATH"):
        monkeypatch.setattr(datasets.config, name, home / name)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    assert [t.task_id for t in mbpp.load_parquet(p)] == [11]
    assert sorted(os.listdir(p.parent)) == ["m.parquet"]
    assert list(tmp.iterdir()) == []
    assert not home.exists()


def _official(tmp_path, monkeypatch, by_split):
    """Parquet files standing in for the official ones, with OFFICIAL_FILES
    pinned to their digests."""
    files, pins = {}, {}
    for split, rows in by_split.items():
        files[split] = write_parquet(tmp_path, rows, f"{split}.parquet")
        pins[split] = (f"full/{split}-00000-of-00001.parquet", mbpp.sha256_file(files[split]))
    monkeypatch.setattr(mbpp, "OFFICIAL_FILES", pins)
    return files


def test_official_load_checks_every_pin_before_reading(tmp_path, monkeypatch):
    files = _official(tmp_path, monkeypatch, {"test": [ROW], "validation": [dict(ROW, task_id=511)],
                                              "train": [dict(ROW, task_id=601)]})
    source = mbpp.load_source(None, official_files=files)
    assert source.kind == "official" and [t.task_id for t in source.tasks] == [11, 511, 601]
    assert source.files["full/train-00000-of-00001.parquet"]["sha256"] == mbpp.sha256_file(files["train"])
    files["train"].write_bytes(b"not the pinned bytes")
    with pytest.raises(DataError, match=r"train\.parquet: SHA-256 \w+ does not match the pinned"):
        mbpp.load_source(None, official_files=files)
    with pytest.raises(DataError, match="does not match the pinned"):
        mbpp.load_parquet(files["test"], "0" * 64)


def test_official_load_refuses_an_id_in_two_files(tmp_path, monkeypatch):
    files = _official(tmp_path, monkeypatch, {"test": [ROW], "validation": [dict(ROW, task_id=511)],
                                              "train": [dict(ROW, task_id=601), dict(ROW, task_id=511)]})
    where = re.escape(f"{files['train']}: row 1: task_id 511 repeats {files['validation']}: row 0")
    with pytest.raises(DataError, match=where):
        mbpp.load_source(None, official_files=files)


def test_official_load_of_the_shared_rows_gives_the_jsonl_tasks(tmp_path, monkeypatch, mbpp_path):
    """The shared JSONL, split as the official files are and written as
    parquet: the official path gives the same tasks, and the study's splits."""
    rows = [json.loads(line) for line in Path(mbpp_path).read_text().splitlines() if line.strip()]
    ranges = {"test": mbpp.TEST_IDS, "validation": mbpp.VALIDATION_IDS, "train": mbpp.TRAIN_IDS}
    files = _official(tmp_path, monkeypatch,
                      {s: [r for r in rows if r["task_id"] in ids] for s, ids in ranges.items()})
    source = mbpp.load_source(None, official_files=files)
    jsonl = {t.task_id: t for t in mbpp.load_jsonl(mbpp_path)}
    assert len(source.tasks) == 964  # 974 less the 10 few-shot prompt tasks (1-10)
    assert all(t == jsonl[t.task_id] for t in source.tasks)
    mbpp.make_splits([t.task_id for t in source.tasks])


def _official_parquet_files() -> dict[str, Path] | None:
    """The real official files, if this machine has them: next to
    ``$GLYPH_MBPP_PATH`` (as ``full/<split>-...parquet``) or in the hub cache."""
    near = os.environ.get(mbpp.ENV_VAR)
    if near:
        found = {s: Path(near).parent / name for s, (name, _) in mbpp.OFFICIAL_FILES.items()}
        if all(p.is_file() for p in found.values()):
            return found
    try:
        from huggingface_hub import hf_hub_download
        return {s: Path(hf_hub_download(mbpp.OFFICIAL_REPO, name, repo_type="dataset",
                                        revision=mbpp.OFFICIAL_REVISION, local_files_only=True))
                for s, (name, _) in mbpp.OFFICIAL_FILES.items()}
    except OSError:  # LocalEntryNotFoundError is a FileNotFoundError
        return None


def test_official_files_load_with_their_pinned_sha256(monkeypatch):
    files = _official_parquet_files()
    if files is None:
        pytest.skip("the official MBPP parquet files are not on this machine (neither next to "
                    "GLYPH_MBPP_PATH as full/<split>-00000-of-00001.parquet nor in the hub cache)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = mbpp.load_source(None, official_files=files)
    ids = [t.task_id for t in source.tasks]
    assert len(ids) == len(set(ids)) == 964 and ids[0] == 11 and ids[-1] == 974
    mbpp.make_splits(ids)
    if os.environ.get(mbpp.ENV_VAR):  # the shared copy was checked against these files (its README)
        jsonl = mbpp.load(os.environ[mbpp.ENV_VAR])
        for t in source.tasks:
            same = jsonl[t.id]
            assert (t.text, t.test_list, t.test_setup_code) == (same.text, same.test_list, same.test_setup_code)


def test_missing_data_says_how_to_provide_it(monkeypatch, tmp_path):
    monkeypatch.delenv("GLYPH_MBPP_PATH", raising=False)
    with pytest.raises(DataError, match="set GLYPH_MBPP_PATH"):
        mbpp.load()
    with pytest.raises(DataError, match="no such file"):
        mbpp.load(tmp_path / "absent.jsonl")


def test_unknown_task_says_how_to_list_ids(tmp_path):
    with pytest.raises(DataError, match="glyph data list"):
        mbpp.get_task("mbpp_99999", write(tmp_path, [ROW]))


def test_shared_copy_has_the_official_shape(mbpp_tasks):
    assert len(mbpp_tasks) == 974
    assert sum(len(t.test_list) for t in mbpp_tasks.values()) == 2922
    assert sum(1 for t in mbpp_tasks.values() if t.challenge_test_list) == 11
