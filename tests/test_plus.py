"""Plus tests (``glyph.data.plus``): generated for a handful of tasks, they
pass every reference, catch what the visible tests miss, spare correct
rewrites, keep only what the reference answers deterministically, resume,
and reach the manifest, the rows, finalize, the taskset and ``glyph grade``.
The full 974-task run is ``benchmarks/plus.py``."""

import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glyph.data import plus, prepare
from glyph.data.mbpp import MbppTask
from glyph.data.plus.generate import generate
from glyph.data.plus.mutate import Mutator, candidates, profile, says_sorted
from glyph.data.plus.seeds import seeds_of
from glyph.data.plus.selection import MAX_KEPT
from glyph.errors import DataError
from glyph.grading import compile_tests, grade, solution_bindings
from glyph.outcomes import Outcome
from testkit import plus_suites

SOME = ["mbpp_11", "mbpp_19", "mbpp_4", "mbpp_226", "mbpp_120", "mbpp_343", "mbpp_938", "mbpp_601", "mbpp_596"]


def children() -> set[int]:
    """Live sandbox servers this process started (its children running the sandbox's server: not a
    process another thread of the session starts, tests/test_pin.py's runs in the pinned stack)."""
    found = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        found |= {int(p) for p in (task / "children").read_text().split()}
    return {p for p in found if _is_sandbox_server(p)}


def _is_sandbox_server(pid: int) -> bool:
    try:
        return b"runtime/server.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone already
        return False


@pytest.fixture(scope="module")
def generated(tmp_path_factory, mbpp_tasks):
    folder = tmp_path_factory.mktemp("plus")
    before = children()
    summary = generate([mbpp_tasks[i] for i in SOME], folder, seed=42, jobs=2, progress=False)
    assert children() <= before, "the generator's sandbox servers outlived it"
    return folder, summary


def lines_of(folder, task):
    got = plus.current(folder, task, 42)
    assert got is not None
    return got


def both(task, lines, source):
    base = grade(source, task.test_setup_code, task.tests())
    full = grade(source, task.test_setup_code, "\n".join(list(task.test_list) + lines))
    return base, full


def test_every_reference_passes_its_plus_tests(generated, mbpp_tasks):
    folder, summary = generated
    assert summary["tasks"] == len(SOME) and summary["generated"] == len(SOME)
    assert summary["with_tests"] == len(SOME) and summary["tests"] > 20 * len(SOME)
    for tid in SOME:
        task = mbpp_tasks[tid]
        lines = lines_of(folder, task)
        assert 0 < len(lines) <= MAX_KEPT and len(set(lines)) == len(lines), tid
        assert not set(lines) & set(task.test_list), "a visible assert is not a plus test"
        suite = compile_tests(task.test_setup_code, "\n".join(list(task.test_list) + lines),
                              solution_bindings(task.code))
        assert suite.path == "fast" and len(suite.checks) == len(task.test_list) + len(lines)
        assert all(c.expected_expr is None for c in suite.checks[len(task.test_list):])  # literals, read here
        g = grade(task.code, task.test_setup_code, "\n".join(list(task.test_list) + lines))
        assert g.passed, (tid, g.detail)
    assert "Pair(" in "".join(lines_of(folder, mbpp_tasks["mbpp_601"])), "a non-literal argument is kept as written"


def test_mutations_cover_the_types_and_edges(mbpp_tasks):
    """Candidates only (no sandbox): each kind of value is mutated, with the
    edge values the issue names, and what the seeds hold fixed stays fixed."""
    def args_of(tid):
        seeds, _, _ = seeds_of(mbpp_tasks[tid])
        out = []
        for c in candidates(seeds, f"42:{tid}", sorted_inputs=says_sorted(mbpp_tasks[tid].text)):
            call = __import__("ast").parse(c.probe, mode="eval").body
            out.append([__import__("ast").literal_eval(a) for a in call.args])
        return out

    strs = args_of("mbpp_11")  # remove_Occ(s, ch)
    assert [] != [a for a in strs if a[0] == ""] and any(len(a[0]) == 1 for a in strs)
    assert any(any(not c.isascii() for c in a[0]) for a in strs), "unicode letters"
    assert all(len(a[1]) == 1 for a in strs), "a one-character argument stays one character"
    lists = args_of("mbpp_19")  # test_duplicate(list of ints)
    assert [] in [a[0] for a in lists] and any(len(a[0]) == 1 for a in lists)
    assert any(any(x < 0 for x in a[0]) for a in lists), "negatives inside containers"
    assert any(len(set(a[0])) < len(a[0]) and a[0] != sorted(a[0]) for a in lists), "duplicates, unsorted"
    tied = args_of("mbpp_938")  # find_closet(A, B, C, p, q, r): p == len(A) in every seed
    assert all(a[3] == len(a[0]) and a[4] == len(a[1]) and a[5] == len(a[2]) for a in tied)
    assert all(a[0] == sorted(a[0]) for a in tied), "the text says sorted: inputs stay sorted"
    pairs = args_of("mbpp_120")  # list of 2-tuples: records keep their arity
    assert all(all(type(x) is tuple and len(x) == 2 for x in a[0]) for a in pairs)
    assert any(any(x < 0 for t in a[0] for x in t) for a in pairs)
    positive = args_of("mbpp_17")  # square_perimeter(10): a positive scalar stays positive
    assert all(a[0] >= 1 for a in positive) and len({a[0] for a in positive}) > 10
    seeds, _, _ = seeds_of(mbpp_tasks["mbpp_486"])  # binomial_probability(n, k, 1.0 / 3)
    probes = [c.probe for c in candidates(seeds, "42:486")]
    assert all("1.0 / 3" in p or "2.0 / 4" in p or "3.0 / 5" in p for p in probes)
    assert all(int(p.split("(")[1].split(",")[0]) >= int(p.split(",")[1]) for p in probes), "k <= n held"
    dicts = candidates(seeds_of(mbpp_tasks["mbpp_88"])[0], "x")  # freq_count(list) -> Counter
    assert dicts
    mixed = Mutator(random.Random(1))
    values = [{"a": [1, (2, "x")], "b": {3, 4}}, (1.5, -2), {1, 2, 3}, 3 + 4j, True]
    for v in values:
        p = profile([v])
        outs = {repr(mixed.value(v, p)) for _ in range(60)}
        assert len(outs) > 3 or type(v) is bool, (v, outs)
    assert candidates(seeds, "42:486") == candidates(seeds, "42:486"), "seeded: the same candidates"


def has_set(v) -> bool:
    if type(v) is set:
        return True
    if type(v) is dict:
        return any(has_set(x) for x in v.values())
    return type(v) in (list, tuple) and any(has_set(x) for x in v)


def test_literal_is_repr_but_for_a_sets_order():
    """``plain.literal`` reads back as the value, and is ``repr`` wherever no set is inside."""
    import ast

    from glyph.data.plus.plain import literal, same
    mut = Mutator(random.Random(3))
    fixed = [(1,), (), {"k": [(), (2,)]}, ("x", b"y", None, True, 1 + 2j), -0.0]
    mutated = [[1, -2.5, "a"], {"a": [1, (2, "x")], "b": {3, 4}}, (1.5, -2), {"b", "a", "zz"}, 3 + 4j]
    for v in fixed + mutated:
        for w in [v] + [mut.value(v, profile([v])) for _ in range(30 if v in mutated else 0)]:
            text = literal(w)
            back = ast.literal_eval(text)
            assert same(back, w) if type(w) is not set else back == w, (w, text)
            if not has_set(w):
                assert text == repr(w), (w, text)
    assert literal({"b", "a", "c"}) == "{'a', 'b', 'c'}" and literal({10, 2, -1}) == "{-1, 2, 10}"
    assert literal([{(1, "a"), (1, 2)}]) == "[{(1, 'a'), (1, 2)}]"


def test_reading_plus_tests_loads_no_generator_and_no_sandbox():
    """``glyph.data.plus``, what the taskset and ``glyph grade --plus`` read plus
    tests with, imports neither the generator's modules nor the sandbox client
    or the grader (they load with ``glyph.data.plus.generate``)."""
    import subprocess
    import sys

    code = "import json, sys, glyph.data.plus; print(json.dumps(sorted(m for m in sys.modules if 'glyph' in m)))"
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout))
    heavy = {f"glyph.data.plus.{m}" for m in ("generate", "probe", "mutate", "seeds", "selection", "plain")}
    assert "glyph.data.plus.store" in loaded
    assert loaded & (heavy | {"glyph.sandbox", "glyph.sandbox.client", "glyph.grading"}) == set(), loaded
    assert {"resolve_dir", "load_tests", "current", "read_file"} <= set(plus.__all__)


def test_plus_catches_what_base_misses(generated, mbpp_tasks):
    folder, _ = generated
    caught = 0
    cases = [(t, kind, src) for t, kind, src in plus_suites.WRONG if t in SOME]
    assert len(cases) >= 6
    for tid, kind, src in cases:
        base, full = both(mbpp_tasks[tid], lines_of(folder, mbpp_tasks[tid]), src)
        assert base.passed, (tid, kind, "should slip past the visible tests")
        assert not full.passed, (tid, kind, "the plus tests should catch it")
        assert full.outcome is Outcome.ASSERTION_FAILURE
        caught += 1
    for tid, src in plus_suites.CORRECT:
        if tid in SOME:
            base, full = both(mbpp_tasks[tid], lines_of(folder, mbpp_tasks[tid]), src)
            assert base.passed and full.passed, (tid, full.detail)


def test_hard_coding_the_visible_answers_passes_base_and_fails_plus(generated, mbpp_tasks):
    folder, _ = generated
    for tid in SOME:
        for fallback in ("none", "first"):
            src = plus_suites.hardcoded(mbpp_tasks[tid], fallback)
            if src is None:
                assert tid in ("mbpp_601", "mbpp_596"), tid  # Pair objects; an expected value computed by sys
                continue
            base, full = both(mbpp_tasks[tid], lines_of(folder, mbpp_tasks[tid]), src)
            assert base.passed and not full.passed, (tid, fallback)


def test_resumes_and_regenerates_only_what_is_missing_or_stale(generated, mbpp_tasks, tmp_path):
    folder, _ = generated
    copy = tmp_path / "plus"
    shutil.copytree(folder, copy)
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in copy.iterdir()}
    again = generate([mbpp_tasks[i] for i in SOME], copy, seed=42, progress=False)
    assert again["generated"] == 0 and again["reused"] == len(SOME)
    (copy / "mbpp_11.py").unlink()  # interrupted before this one was written
    stale = copy / "mbpp_19.py"
    stale.write_text(stale.read_text().replace('"task_sha256": "', '"task_sha256": "0', 1))
    assert plus.current(copy, mbpp_tasks["mbpp_19"]) is None
    again = generate([mbpp_tasks[i] for i in SOME], copy, seed=42, progress=False)
    assert again["generated"] == 2
    now = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in copy.iterdir()}
    assert now == digest, "the same candidates and the same keeps: the same files"
    assert not [p for p in copy.iterdir() if ".tmp" in p.name]
    with pytest.raises(DataError, match="glyph data plus"):
        plus.load_tests(tmp_path / "nowhere", mbpp_tasks["mbpp_11"])


@contextlib.contextmanager
def cpu_burners(n: int):
    """``n`` busy-looping interpreters: the machine under load; killed and reaped however the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def test_prepare_gives_the_same_bytes_under_load(mbpp_path, tmp_path):
    """Which plus tests are kept is a function of the task, the seed, the count and the reference's
    answers and op counts, never of a clock: prepared, then its plus tests generated again from
    scratch (``glyph data plus``) with two CPU burners running, every file is the same byte for byte
    (the manifest's hashes and the files)."""
    quiet = prepare.prepare(tmp_path / "quiet", mbpp_path, seed=42, progress=False, plus_tasks=SOME)
    shutil.copytree(tmp_path / "quiet", tmp_path / "loaded")
    shutil.rmtree(tmp_path / "loaded" / "plus")
    with cpu_burners(2) as procs:
        summary = prepare.add_plus(tmp_path / "loaded", mbpp_path, tasks=SOME, progress=False)
        assert all(p.poll() is None for p in procs), "the burners ran throughout"
    loaded = json.loads((tmp_path / "loaded" / "manifest.json").read_text())
    assert quiet["plus"]["generated"] == summary["generated"] == len(SOME)
    assert quiet["plus"]["tests"] > 20 * len(SOME)
    plus_files = [rel for rel in quiet["artifacts"] if rel.startswith("plus/")]
    assert len(plus_files) == len(SOME)
    assert quiet["artifacts"] == loaded["artifacts"]
    for rel in quiet["artifacts"]:
        assert (tmp_path / "quiet" / rel).read_bytes() == (tmp_path / "loaded" / rel).read_bytes(), rel


def test_the_same_bytes_whatever_the_generating_process_hash_seed(mbpp_path, tmp_path):
    """A set answer (``mbpp_945``: a set of strings) is written in one canonical order, not the
    generating process's hash order: generated in two processes with other hash seeds, the same bytes."""
    code = ("import sys; from pathlib import Path; from glyph.data import mbpp; "
            "from glyph.data.plus.generate import generate; "
            "generate([mbpp.load(sys.argv[1])['mbpp_945']], Path(sys.argv[2]), seed=42, jobs=1, progress=False)")
    for h in ("1", "2"):
        subprocess.run([sys.executable, "-c", code, mbpp_path, str(tmp_path / h)], check=True, timeout=300,
                       env=dict(os.environ, PYTHONHASHSEED=h))
    first, second = ((tmp_path / h / "mbpp_945.py").read_bytes() for h in ("1", "2"))
    assert first == second
    lines = plus.read_file(tmp_path / "1" / "mbpp_945.py")[1]
    assert sum("== {'" in ln for ln in lines) > 10, lines  # sets of strings, written


def test_the_seed_chooses_the_tests_and_the_same_seed_the_same(generated, mbpp_tasks, tmp_path):
    folder, _ = generated
    picked = [mbpp_tasks[i] for i in ("mbpp_11", "mbpp_19")]
    generate(picked, tmp_path / "same", seed=42, progress=False)
    generate(picked, tmp_path / "other", seed=7, progress=False)
    for t in picked:
        name = plus.file_name(t.task_id)
        assert (tmp_path / "same" / name).read_bytes() == (folder / name).read_bytes(), t.id
        other = plus.current(tmp_path / "other", t, 7)
        assert other and set(other) != set(lines_of(folder, t)), t.id


def fake(task_id, code, tests, text="Write a function."):
    return MbppTask(task_id, text, code, "", tuple(tests), ())


def test_keeps_only_deterministic_plain_quick_answers(tmp_path, monkeypatch):
    """References that misbehave on some inputs: only the clean answers become tests. A Python loop
    is stopped by the op count; one C call that never returns (no trace events) by the wall clock,
    shortened here; C-level work past the CPU backstop (shortened too) by the tracer; all one outcome."""
    from glyph.data.plus import probe
    monkeypatch.setattr(probe, "WALL_S", 3.0)
    monkeypatch.setattr(probe, "CPU_S", 0.3)
    nondet = fake(90001, "def pick(words):\n    return list(set(words))[0]\n",
                  ["assert pick(['a']) == 'a'", "assert pick(['b']) == 'b'", "assert pick(['c']) == 'c'"])
    stateful = fake(90002, "seen = []\ndef count(x):\n    seen.append(x)\n    return len(seen) + x - len(seen)\n"
                           "def f(x):\n    seen.append(x)\n    return x * 2 + (len(seen) > 100)\n",
                    ["assert f(1) == 2", "assert f(2) == 4", "assert f(3) == 6"])
    picky = fake(90003,
                 "class Box:\n    pass\n"
                 "def g(n):\n    if n == 4:\n        raise ValueError('four')\n"
                 "    if n == 1:\n        while True:\n            pass\n"
                 "    if n == 2:\n        return float('nan')\n    if n == 3:\n        return Box()\n"
                 "    if n == 5:\n        return frozenset({1})\n"
                 "    if n == 8:\n        return sum(range(10 ** 15))\n"
                 "    if n == 10:\n        return sum(range(10 ** 8)) - sum(range(10 ** 8)) + n + 1\n"
                 "    return n + 1\n",
                 ["assert g(6) == 7", "assert g(7) == 8", "assert g(9) == 10"])
    rand = fake(90004, "import random\ndef r(n):\n    return n + random.randint(0, 3)\n",
                ["assert r(5) == 5"])  # a visible test it passes by luck: not ours to judge here
    before = children()
    summary = generate([nondet, stateful, picky, rand], tmp_path, seed=1, progress=False)
    assert children() <= before
    for name in ("mbpp_90001.py", "mbpp_90004.py"):  # hash order; randomness: the whole task is dropped
        meta, lines = plus.read_file(tmp_path / name)
        assert lines == [] and "differ between runs" in meta["note"], meta
    meta, lines = plus.read_file(tmp_path / "mbpp_90003.py")
    import re
    args = {int(re.match(r"assert g\((-?\d+)\) ==", ln).group(1)) for ln in lines}
    # hung, nan, an object, raised, a frozenset; one C call that never returns, one over the CPU backstop
    assert len(args) > 10 and not args & {1, 2, 3, 4, 5, 8, 10}, args
    assert meta["dropped"].get("over its limit", 0) >= 3 and meta["dropped"].get("raised", 0) >= 1, meta
    assert meta["dropped"].get("no literal reproduces it", 0) + meta["dropped"].get("not plain data", 0) >= 2
    meta, lines = plus.read_file(tmp_path / "mbpp_90002.py")
    assert lines, meta  # f is stateful only past 100 calls: within a suite it answers the same
    assert summary["tasks"] == 4


def finished_trace(source: str) -> dict:
    """A trace whose one candidate passed its visible test and ended in FINAL."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    return {"candidates": [{"index": 0, "source": source, "sha256": digest}],
            "tests": [{"call": "3", "sha256": digest, "outcome": "PASS"}],
            "calls": [{"id": "1", "tool": "read_file", "status": "ok"}, {"id": "2", "tool": "apply_patch", "status": "ok"},
                      {"id": "3", "tool": "python_test", "status": "PASS"}], "end": "final", "final": True}


def test_finalize_grades_both_suites_and_records_each(generated, mbpp_tasks):
    from glyph.envs.mbpp import finalize
    from glyph.envs.mbpp.finalize import ModelReplies, TaskTests
    from glyph.sandbox import Limits

    def verify(*args):  # the interception's record says each episode ended with FINAL, as its trace does
        return finalize.verify(*args, replies=ModelReplies(("FINAL: done",), "a", 8, 1))

    folder, _ = generated
    task = mbpp_tasks["mbpp_11"]
    lines = tuple(lines_of(folder, task))
    visible = tuple(task.test_list)
    limits = Limits(cpu_s=5, wall_s=10)
    hard = plus_suites.hardcoded(task)
    wrong = "def remove_Occ(s, ch):\n    return s\n"
    cases = {  # (solution, reward suite): (reward, base_passed, plus_passed)
        (task.code, "base"): (1, 1, 1), (task.code, "plus"): (1, 1, 1),
        (hard, "base"): (1, 1, 0), (hard, "plus"): (0, 1, 0),
        (wrong, "base"): (0, 0, 0), (wrong, "plus"): (0, 0, 0),
    }
    for (source, suite), (reward, base_ok, plus_ok) in cases.items():
        tests = TaskTests(task.test_setup_code, visible, visible, lines, suite)
        info = verify(finished_trace(source), source, tests, limits)
        m = info.metrics
        if source == wrong:  # no visible test passed: the trace lies, and nothing is rewarded
            assert m.tampered == 1.0
        got = (info.reward, m.base_passed, m.plus_passed)
        assert got == (reward, base_ok, plus_ok), (suite, info.reason, info.base_outcome, info.plus_outcome)
        assert m.passed == info.reward and info.reward_suite == suite
    info = verify(finished_trace(hard), hard, TaskTests(task.test_setup_code, visible, visible, lines, "plus"), limits)
    assert info.base_outcome == "PASS" and info.plus_outcome == info.final_outcome == "ASSERTION_FAILURE"
    assert "with the plus tests" in info.reason
    info = verify(finished_trace(hard), hard, TaskTests(task.test_setup_code, visible, visible), limits)
    assert info.reward == 1.0 and info.metrics.plus_passed is None and info.plus_outcome is None
    with pytest.raises(ValueError, match="has none"):
        TaskTests(task.test_setup_code, visible, visible, None, "plus")
    # One grading gives both: a solution that hangs on a plus input passed base before it hung.
    hangs = task.code + "\n_ref = remove_Occ\ndef remove_Occ(s, ch):\n    while s == '':\n        pass\n" \
                        "    return _ref(s, ch)\n"
    assert any("remove_Occ(''" in ln for ln in lines)
    info = verify(finished_trace(hangs), hangs, TaskTests(task.test_setup_code, visible, visible, lines, "base"),
                  Limits(cpu_s=1, wall_s=2))
    assert (info.reward, info.base_outcome, info.plus_outcome) == (1.0, "PASS", "TIMEOUT"), info.reason
    # Plus tests that do not compile never cost a base reward; as the reward, they fail finalize (scored 0 there).
    broken = ("assert remove_Occ('a', 'a') ==",)
    info = verify(finished_trace(task.code), task.code, TaskTests(task.test_setup_code, visible, visible, broken),
                  limits)
    assert info.reward == 1.0 and info.metrics.plus_passed == 0.0 and info.plus_outcome == "OTHER"
    from glyph.grading import InvalidTests
    with pytest.raises(InvalidTests):
        verify(finished_trace(task.code), task.code,
               TaskTests(task.test_setup_code, visible, visible, broken, "plus"), limits)


def test_taskset_option_hidden(generated, mbpp_path):
    from glyph.envs.mbpp.taskset import GlyphTaskset, GlyphTasksetConfig

    folder, _ = generated
    cfg = GlyphTasksetConfig(split="test", data_path=mbpp_path, plus_path=str(folder), profile="glyph")
    tasks = {t.data.id: t.data for t in GlyphTaskset(cfg).load()}
    assert tasks["mbpp_11"].hidden == "base" and tasks["mbpp_11"].plus_tests == lines_of(folder, _task(tasks, 11))
    assert tasks["mbpp_12"].plus_tests is None  # not generated here: finalize records no plus metric for it
    with pytest.raises(DataError, match="mbpp_12"):  # plus rewards need every task's plus tests
        list(GlyphTaskset(cfg.model_copy(update={"hidden": "plus"})).load())
    with pytest.raises(DataError, match="no plus tests"):
        list(GlyphTaskset(cfg.model_copy(update={"hidden": "plus", "plus_path": str(folder / "none")})).load())


def _task(tasks, task_id):
    d = tasks[f"mbpp_{task_id}"]
    return MbppTask(task_id, d.task_text, d.reference, d.hidden_setup, tuple(d.visible_tests), ())


def test_grade_plus_command(generated, mbpp_path, tmp_path, mbpp_tasks):
    from typer.testing import CliRunner

    from glyph.cli.app import app

    folder, _ = generated
    sol = tmp_path / "sol.py"
    sol.write_text(plus_suites.hardcoded(mbpp_tasks["mbpp_11"]))
    runner = CliRunner()
    base = runner.invoke(app, ["grade", "--task", "mbpp_11", "--solution", str(sol), "--mbpp-path", mbpp_path])
    assert base.exit_code == 0, base.output
    r = runner.invoke(app, ["grade", "--task", "mbpp_11", "--solution", str(sol), "--mbpp-path", mbpp_path,
                            "--plus", "--plus-path", str(folder), "--json"])
    assert r.exit_code == 1, r.output
    d = json.loads(r.stdout)
    assert d["outcome"] == "ASSERTION_FAILURE" and len(d["checks"]) == 3 + len(lines_of(folder, mbpp_tasks["mbpp_11"]))
    r = runner.invoke(app, ["grade", "--task", "mbpp_12", "--solution", str(sol), "--mbpp-path", mbpp_path,
                            "--plus", "--plus-path", str(folder)])
    assert r.exit_code == 2 and "glyph data plus" in r.output


def test_prepare_puts_plus_tests_in_rows_and_manifest_and_validate_rechecks(generated, mbpp_path, tmp_path):
    out = tmp_path / "artifacts"
    shutil.copytree(generated[0], out / "plus")  # resumed: prepare reuses these files
    first = ["mbpp_11", "mbpp_4"]  # mbpp_4 is outside every split (the official prompt ids)
    manifest = prepare.prepare(out, mbpp_path, seed=42, progress=False, plus_tasks=first)
    assert manifest["plus"]["generated"] == 0 and manifest["plus"]["kept"].keys() == set(first)
    summary = prepare.add_plus(out, mbpp_path, tasks=["mbpp_19"], progress=False)
    assert summary["generated"] == 0 and set(summary["kept"]) == {"mbpp_11", "mbpp_4", "mbpp_19"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert {f"plus/{t}.py" for t in summary["kept"]} <= set(manifest["artifacts"])
    rows = {r["id"]: r for split in ("test", "rl", "sft") for r in map(json.loads, open(out / "tasks" / f"{split}.jsonl"))}
    assert rows["mbpp_11"]["plus_tests"] == plus.read_file(out / "plus" / "mbpp_11.py")[1]
    assert rows["mbpp_12"]["plus_tests"] is None
    result = prepare.validate(out, mbpp_path, progress=False)
    assert result["plus"] == {"tasks": 3, "tests": sum(summary["kept"].values())}
    # A forged expected value: the manifest's hash and the rows name the file; and were both forged
    # too, the gold grading (the reference fails the forged test) still would.
    p = out / "plus" / "mbpp_19.py"
    text = p.read_text().splitlines(keepends=True)
    forged = next(i for i, ln in enumerate(text) if ln.endswith("== True\n"))
    text[forged] = text[forged].replace("== True", "== False")
    p.write_text("".join(text))
    lines = plus.read_file(p)[1]
    problems = prepare._check_gold([mbpp_task(mbpp_path, 19)], False, 1, {19: lines})
    assert len(problems) == 1 and "mbpp_19" in problems[0] and "plus tests" in problems[0], problems
    with pytest.raises(prepare.ValidationFailed) as exc:
        prepare.validate(out, mbpp_path, progress=False)
    assert any("plus/mbpp_19.py: SHA-256" in p for p in exc.value.problems), exc.value.problems
    assert any("plus_tests differ from plus/mbpp_19.py" in p for p in exc.value.problems), exc.value.problems


def mbpp_task(path, task_id):
    from glyph.data import mbpp
    return mbpp.load(path)[f"mbpp_{task_id}"]


def test_vf_eval_rewards_with_plus_and_records_both(generated, mbpp_path, mbpp_tasks, tmp_path):
    """``--env.taskset.hidden plus`` end to end: the oracle is rewarded on the plus suite, and
    every rollout records base_passed and plus_passed."""
    import subprocess

    from glyph.demo import vf_eval_command
    from glyph.policies.server import PolicyServer

    folder = tmp_path / "plus"
    shutil.copytree(generated[0], folder)
    generate([mbpp_tasks["mbpp_12"]], folder, progress=False)  # the test split starts 11, 12
    with PolicyServer(mbpp_tasks) as server:
        cmd = vf_eval_command(server.base_url, "oracle", "b", 2, tmp_path / "out", mbpp_path,
                              ["--env.taskset.hidden", "plus", "--env.taskset.plus-path", str(folder)],
                              profile="glyph")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PRIME_RUNS_MODE="disabled"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces = [t for f in (tmp_path / "out").rglob("traces.jsonl") for line in open(f)
              for t in json.loads(line)["traces"]]
    assert len(traces) == 2
    for t in traces:
        g = t["info"]["glyph"]
        assert g["reward_suite"] == "plus" and g["reward"] == 1.0 and g["plus_outcome"] == "PASS", g["reason"]
        assert t["metrics"]["plus_passed"] == t["metrics"]["base_passed"] == t["metrics"]["passed"] == 1.0
