"""Splits, task rows, the manifest, validate, SFT traces and their replay."""

import dataclasses
import json
import shutil

import pytest

from glyph import grading
from glyph.agent.profiles import glyph as protocol
from glyph.data import gold, mbpp, prepare, sft
from glyph.errors import DataError
from glyph.outcomes import Outcome
from glyph.sandbox import Limits


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mbpp_path):
    out = tmp_path_factory.mktemp("artifacts")
    manifest = prepare.prepare(out, mbpp_path, seed=42, progress=False)
    return out, manifest


def test_splits_are_the_studys(mbpp_tasks):
    s = mbpp.make_splits([t.task_id for t in mbpp_tasks.values()], seed=42)
    assert {k: len(v) for k, v in s.items()} == {"sft": 212, "rl": 212, "validation": 40, "test": 500}
    assert s["test"] == list(range(11, 511))
    assert set(s["validation"]) < set(range(511, 601))
    assert set(s["sft"]).isdisjoint(s["rl"]) and set(s["sft"] + s["rl"]) == set(range(601, 975)) | (
        set(range(511, 601)) - set(s["validation"]))
    assert s == mbpp.make_splits(list(range(1, 975)), seed=42)
    assert s["sft"] != mbpp.make_splits(list(range(1, 975)), seed=7)["sft"]


def test_missing_ids_are_named():
    with pytest.raises(DataError, match="lacks 1 task ids"):
        mbpp.make_splits([i for i in range(1, 975) if i != 300])


def test_task_rows(mbpp_tasks):
    row = mbpp.task_row(mbpp_tasks["mbpp_11"], "test")
    assert row["id"] == "mbpp_11" and row["workspace"] == {"solution.py": "# TODO: write the solution here\n"}
    user = row["prompt"]["a"][1]["content"]
    assert "Your code must pass these tests:" in user and 'assert remove_Occ("hello","l") == "heo"' in user
    assert row["prompt"]["a"][1] == row["prompt"]["b"][1]
    assert "<PREDICTION>" in row["prompt"]["b"][0]["content"] and "<PREDICTION>" not in row["prompt"]["a"][0]["content"]
    # The prompt is protocol.messages at the default budget, and the row says so and keeps the parts.
    assert row["prompt_budget"] == protocol.DEFAULT_BUDGET
    for arm in "ab":
        assert row["prompt"][arm] == protocol.messages(arm, row["text"], row["visible_tests"], row["prompt_budget"])


def test_prepare_and_validate(prepared, mbpp_path):
    out, manifest = prepared
    assert manifest["counts"] == prepare.EXPECTED_COUNTS
    assert set(manifest["artifacts"]) == {"tasks/sft.jsonl", "tasks/rl.jsonl", "tasks/validation.jsonl",
                                          "tasks/test.jsonl", "sft/arm_a/train.jsonl", "sft/arm_b/train.jsonl"}
    assert manifest["source"]["files"]["mbpp.jsonl"]["sha256"] == mbpp.sha256_file(mbpp_path)
    summary = prepare.validate(out, mbpp_path, progress=False)
    assert summary["tasks"] == 964 and summary["traces"] == 424
    from importlib.metadata import version
    assert manifest["sft"]["renderer"] == {"package": "renderers", "version": version("renderers"),
                                           "name": "qwen3", "enable_thinking": False}
    assert manifest["sft"]["max_tokens"] == sft.MAX_TOKENS == 1280
    assert summary["longest"] == manifest["sft"]["longest"] and set(summary["longest"]) == {"a", "b"}
    for arm in "ab":
        rows = [json.loads(l) for l in open(out / "sft" / f"arm_{arm}" / "train.jsonl")]
        top = max(rows, key=lambda r: r["tokens"])
        assert manifest["sft"]["longest"][arm] == {"task_id": top["task_id"], "tokens": top["tokens"]}
    assert manifest["sft"]["longest_tokens"] == summary["longest_tokens"] == max(
        v["tokens"] for v in summary["longest"].values())


def test_prepare_is_deterministic(prepared, mbpp_path, tmp_path):
    out, manifest = prepared
    again = prepare.prepare(tmp_path, mbpp_path, seed=42, progress=False)
    assert again["artifacts"] == manifest["artifacts"]


def test_traces_shape(prepared, mbpp_tasks):
    out, manifest = prepared
    arms = {arm: [json.loads(l) for l in open(out / "sft" / f"arm_{arm}" / "train.jsonl")] for arm in "ab"}
    assert len(arms["a"]) == len(arms["b"]) == 212
    kinds_a = [t["kind"] for t in arms["a"]]
    n_rec = kinds_a.count("recovery")
    assert 60 <= n_rec <= 75  # about a third
    assert {t["kind"] for t in arms["b"]} == {"direct", "recovery_keep", "recovery_revise"}
    for a, b in zip(arms["a"], arms["b"]):
        assert a["task_id"] == b["task_id"] and a["candidate_outcome"] == b["candidate_outcome"]
        assert a["messages"][-1]["content"].startswith("FINAL:") and b["messages"][-1]["content"].startswith("FINAL:")
        assert a["tokens"] <= 1280 and b["tokens"] <= 1280
        if a["kind"] == "recovery":
            assert a["candidate_outcome"] != "PASS"
            assert a["messages"][4] == b["messages"][4]  # the same candidate patch in both arms
    revise = [t for t in arms["b"] if t["kind"] == "recovery_revise"]
    assert all(t["shadow"] and t["shadow"][0]["outcome"] == t["candidate_outcome"] for t in revise)
    assert {t["candidate_outcome"] for t in arms["a"]} >= {"PASS", "ASSERTION_FAILURE"}


def test_trace_lengths_are_the_renderers_sft_samples(prepared):
    """Each recorded length is the trace's SFT sample under the renderer:
    ChatML plus the 4 tokens of the empty think block on every assistant turn."""
    from glyph.render import load_tokenizer, sft_sample

    tok = load_tokenizer()
    out, _ = prepared
    for arm in "ab":
        for row in (json.loads(l) for l in open(out / "sft" / f"arm_{arm}" / "train.jsonl")):
            msgs = row["messages"]
            ids, mask = sft_sample(msgs, tok, profile="glyph")
            chatml = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
            turns = sum(m["role"] == "assistant" for m in msgs)
            assert row["tokens"] == len(ids) == len(tok(chatml, add_special_tokens=False)["input_ids"]) + 4 * turns
            assert ids.count(tok.convert_tokens_to_ids("<think>")) == turns and any(mask) and not mask[-1]


def rewrite_trace(src, dst, arm, edit):
    """Copy the artifacts, edit one arm's rows and re-hash the manifest (a
    consistent forgery: only the re-checks behind the hashes can catch it)."""
    shutil.copytree(src, dst)
    p = dst / "sft" / f"arm_{arm}" / "train.jsonl"
    rows = [json.loads(l) for l in open(p)]
    edit(rows)
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["artifacts"][f"sft/arm_{arm}/train.jsonl"] = {"sha256": mbpp.sha256_file(p), "size": p.stat().st_size}
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return rows


def test_validate_names_a_trace_over_the_limit(prepared, mbpp_path, tmp_path):
    from glyph.render import load_tokenizer

    tok = load_tokenizer()

    def lengthen(rows):
        victim = rows[3]
        victim["messages"][2]["content"] = "Let me think about it. " * 150 + victim["messages"][2]["content"]
        victim["tokens"] = sft.count_tokens(victim["messages"], tok)  # recorded honestly: only the limit is broken

    rows = rewrite_trace(prepared[0], tmp_path / "copy", "a", lengthen)
    assert rows[3]["tokens"] > sft.MAX_TOKENS
    with pytest.raises(prepare.ValidationFailed) as exc:
        prepare.validate(tmp_path / "copy", mbpp_path, progress=False)
    want = (f"sft/arm_a/train.jsonl:4: task {rows[3]['task_id']} arm a: "
            f"{rows[3]['tokens']} tokens > 1280 (the SFT seq_len)")
    assert any(p.endswith(want) for p in exc.value.problems), exc.value.problems
    assert not any("replay gives" in p or "recorded" in p for p in exc.value.problems), exc.value.problems


def test_validate_remeasures_every_trace(prepared, mbpp_path, tmp_path):
    def miscount(rows):
        rows[7]["tokens"] -= 16  # what ChatML without the think block would have counted for 4 turns

    rows = rewrite_trace(prepared[0], tmp_path / "copy", "b", miscount)
    with pytest.raises(prepare.ValidationFailed) as exc:
        prepare.validate(tmp_path / "copy", mbpp_path, progress=False)
    want = (f"sft/arm_b/train.jsonl:8: task {rows[7]['task_id']} arm b: recorded {rows[7]['tokens']} tokens, "
            f"the renderer gives {rows[7]['tokens'] + 16}")
    assert len(exc.value.problems) == 1 and exc.value.problems[0].endswith(want), exc.value.problems


def test_validate_checks_the_renderer_the_manifest_records(prepared, mbpp_path, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(prepared[0], out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["sft"]["renderer"]["enable_thinking"] = True
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(prepare.ValidationFailed) as exc:
        prepare.validate(out, mbpp_path, progress=False)
    assert len(exc.value.problems) == 1 and "measured with renderer" in exc.value.problems[0], exc.value.problems


def tamper(src, dst, rel, edit):
    shutil.copytree(src, dst)
    p = dst / rel
    p.write_bytes(edit(p.read_bytes()))
    return dst


@pytest.mark.parametrize("rel,edit,message", [
    ("tasks/test.jsonl", lambda b: b.replace(b"remove_Occ", b"remove_0cc", 1), r"tasks/test\.jsonl: SHA-256"),
    ("tasks/rl.jsonl", lambda b: b[: len(b) // 2], r"tasks/rl\.jsonl: size"),
    ("sft/arm_a/train.jsonl", lambda b: b + b"\n", r"sft/arm_a/train\.jsonl: size"),
])
def test_validate_names_the_tampered_file(prepared, mbpp_path, tmp_path, rel, edit, message):
    out = tamper(prepared[0], tmp_path / "copy", rel, edit)
    with pytest.raises(prepare.ValidationFailed) as exc:
        prepare.validate(out, mbpp_path, progress=False)
    assert any(__import__("re").search(message, p) for p in exc.value.problems), exc.value.problems


def test_validate_catches_a_trace_that_lies_even_with_a_matching_manifest(prepared, mbpp_path, tmp_path):
    """Rewrite a recorded outcome and re-hash the manifest: the replay still catches it."""
    out = tmp_path / "copy"
    shutil.copytree(prepared[0], out)
    p = out / "sft" / "arm_a" / "train.jsonl"
    rows = [json.loads(l) for l in open(p)]
    victim = next(r for r in rows if r["kind"] == "recovery")
    for m in victim["messages"]:
        if m["role"] == "user" and " python_test " in m["content"] and "PASS" not in m["content"]:
            m["content"] = m["content"].replace(victim["candidate_outcome"], "PASS")
            break
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["artifacts"]["sft/arm_a/train.jsonl"] = {"sha256": mbpp.sha256_file(p), "size": p.stat().st_size}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(prepare.ValidationFailed) as exc:
        prepare.validate(out, mbpp_path, progress=False)
    assert any(f"task {victim['task_id']} arm a" in p and "replay gives" in p for p in exc.value.problems)


def test_validate_without_prepare_says_so(tmp_path, mbpp_path):
    with pytest.raises(prepare.ValidationFailed, match="1 problem") as exc:
        prepare.validate(tmp_path, mbpp_path)
    assert "glyph data prepare" in exc.value.problems[0]


def test_mutants_fail_with_the_recorded_outcome(mbpp_tasks):
    import random
    t = mbpp_tasks["mbpp_601"]
    m = sft.find_mutant(t, random.Random(1))
    assert m is not None and m.outcome is not Outcome.PASS and m.source != t.code
    assert m.source.count(m.mutated_line) == 1


def test_official_parquet_is_hash_checked(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"task_id": 11, "text": "t", "code": "def f(): pass", "test_list": ["assert f() is None"],
             "test_setup_code": "", "challenge_test_list": []}]
    p = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    assert mbpp.load_parquet(p, mbpp.sha256_file(p))[0].task_id == 11
    with pytest.raises(DataError, match="does not match the pinned"):
        mbpp.load_parquet(p, "0" * 64)
    files = {split: p for split in mbpp.OFFICIAL_FILES}
    with pytest.raises(DataError, match="does not match the pinned"):  # the real pins, a fake file
        mbpp.load_source(None, official_files=files)


def test_a_finding_of_the_parallel_pass_is_kept_only_if_it_holds_alone(monkeypatch, mbpp_tasks, tmp_path):
    """AGAIN_ALONE (glyph/data/prepare.py): a trace replay or a gold grading that goes wrong once
    (a run at its time limit on a loaded machine) is checked again, alone; one wrong both times is
    reported, and the message of ValidationFailed names it."""
    from collections import Counter

    from glyph.grading import Grade

    calls: Counter = Counter()
    flaky, wrong = 11, 12

    def replay(row, task, limits):
        assert limits == (sft.LIMITS if calls[row["task_id"]] == 0 else gold.second_look(sft.LIMITS))
        calls[row["task_id"]] += 1
        first = calls[row["task_id"]] == 1
        return ["replay gives TIMEOUT"] if row["task_id"] == wrong or (row["task_id"] == flaky and first) else []

    monkeypatch.setattr(sft, "replay", replay)
    monkeypatch.setattr(sft, "count_tokens", lambda messages, tokenizer: 7)
    rows = [{"task_id": i, "arm": "a", "messages": [], "tokens": 7} for i in (flaky, wrong, 13)]
    by_id = {t.task_id: t for t in mbpp_tasks.values()}
    problems, lengths = prepare._check_traces(tmp_path / "train.jsonl", rows, by_id, None, False, 2)
    assert problems == [f"{tmp_path / 'train.jsonl'}:2: replay gives TIMEOUT"] and lengths == [7, 7, 7]
    assert calls == {flaky: 2, wrong: 2, 13: 1}

    graded: Counter = Counter()
    real = grading.grade

    def grade(code, setup, tests, **kw):
        task = next(t for t in by_id.values() if t.code == code)
        graded[task.task_id] += 1
        if task.task_id == wrong or (task.task_id == flaky and graded[task.task_id] == 1):
            return real("def f(:\n", setup, tests, **kw)  # a syntax error: not passed
        return real(code, setup, tests, **kw)

    monkeypatch.setattr(grading, "grade", grade)
    found = prepare._check_gold([by_id[i] for i in (flaky, wrong, 13)], False, 2)
    assert len(found) == 1 and found[0].startswith(f"mbpp_{wrong}: the reference solution gets "), found
    assert graded == {flaky: 2, wrong: 2, 13: 1} and isinstance(real(by_id[13].code, "", "assert True"), Grade)
    message = str(prepare.ValidationFailed(found + [f"problem {i}" for i in range(6)]))
    assert message.startswith("7 problem(s):\n" + found[0]) and message.endswith("... and 2 more")


SECOND_LOOK_FIRST = Limits(cpu_s=1, wall_s=1.5)  # the first look's limits in the second-look tests


@pytest.fixture
def slow_loops_and_gold(mbpp_tasks):
    """Gold 11 that sleeps 2 s first (only the wall clock stops it), gold 12 that loops first (the CPU
    limit stops it), gold 13 as it is."""
    by_id = {t.task_id: t for t in mbpp_tasks.values()}
    slow = dataclasses.replace(by_id[11], code="import time\ntime.sleep(2.0)\n" + by_id[11].code)
    loops = dataclasses.replace(by_id[12], code="while True:\n    pass\n" + by_id[12].code)
    return slow, loops, by_id[13]


def test_the_second_look_has_a_longer_wall_clock_and_the_same_cpu_limit(slow_loops_and_gold):
    """AGAIN_ALONE grades for real: a gold solution stopped by the wall clock alone (here it sleeps
    past it; on a loaded machine it waits for a CPU) passes its second look, and one that loops
    meets the same CPU limit both times."""
    slow, _, _ = slow_loops_and_gold
    limits = SECOND_LOOK_FIRST
    assert gold.second_look(limits) == Limits(cpu_s=1, wall_s=1.5 * gold.ALONE_WALL_STRETCH)
    first = grading.grade(slow.code, slow.test_setup_code, "\n".join(slow.test_list), limits=limits)
    assert not first.passed and "wall-clock" in first.detail, first  # the first look stops it
    found = prepare._check_gold(list(slow_loops_and_gold), False, 2, limits=limits)
    assert len(found) == 1 and found[0].startswith("mbpp_12: the reference solution gets TIMEOUT"), found


def test_check_gold_counts_the_second_look(monkeypatch, slow_loops_and_gold):
    """glyph data check-gold gives a grading that fails in the parallel pass a second look, alone, with
    the longer wall clock: one stopped only by the wall clock passes, one that loops is a failure."""
    monkeypatch.setattr(mbpp, "load", lambda path=None: {t.id: t for t in slow_loops_and_gold})
    monkeypatch.setattr(gold, "GOLD_LIMITS", SECOND_LOOK_FIRST)
    report = gold.check_gold(jobs=2, progress=False)
    # the slow one twice (its tests and its challenge tests), the loop once
    assert report["second_looks"] == 3 and report["tests"]["counts"] == {"PASS": 2, "TIMEOUT": 1}, report
    assert report["challenge"]["counts"] == {"PASS": 1}, report
    assert [f["task"] for f in report["tests"]["failures"]] == ["mbpp_12"], report
