import pytest

from glyph.grading import (ANSWER_BYTES, LARGEST_EXPECTED, MAX_PARSE_BYTES, MAX_SOLUTION_BYTES, InvalidTests,
    compile_tests, grade, solution_bindings, suite_for, names_tests_read)
from glyph.outcomes import Outcome
from glyph.redteam import DEMO_SOLUTION, DEMO_TESTS, REFEREE_TESTS
from glyph.sandbox import Limits

FAST = Limits(cpu_s=2, wall_s=4)


@pytest.mark.parametrize("source,outcome", [
    (DEMO_SOLUTION, Outcome.PASS),
    ("def remove_first_last(s, ch):\n    return s.replace(ch, '', 1)\n", Outcome.ASSERTION_FAILURE),
    ("def remove_first_last(s, ch):\n    return s[100]\n", Outcome.RUNTIME_ERROR),
    ("def remove_first_last(s, ch)\n    return s\n", Outcome.SYNTAX_ERROR),
    ("def remove_first_last(s, ch):\n\treturn s\n        pass\n", Outcome.SYNTAX_ERROR),
    ("def remove_first_last(s, ch):\n    while True: pass\n", Outcome.TIMEOUT),
    ("import os\nos._exit(3)\n", Outcome.OTHER),
    ("def remove_first_last(s, ch):\n    assert False, 'inner'\n", Outcome.ASSERTION_FAILURE),
    ("raise ImportError('at import')\n", Outcome.RUNTIME_ERROR),
    ("", Outcome.RUNTIME_ERROR),
    (b"def remove_first_last(s, ch):\n    return '\xff'\n", Outcome.SYNTAX_ERROR),
    (b"x = 1\x00\n", Outcome.SYNTAX_ERROR),
], ids=["pass", "wrong", "index-error", "syntax", "indentation", "timeout", "exit", "inner-assert",
        "import-error", "empty", "not-utf8", "nul-byte"])
def test_outcome_classes(source, outcome):
    g = grade(source, "", DEMO_TESTS, limits=FAST)
    assert g.outcome is outcome, g.detail
    assert g.passed is (outcome is Outcome.PASS)


def test_first_failure_decides_and_every_check_is_asked():
    """Every check is asked whatever the answers before it (the run never learns a verdict); the
    first failing one decides, as one file would have stopped there."""
    src = "def remove_first_last(s, ch):\n    return 'heo' if s == 'hello' else s[99] if s == 'abcda' else 1\n"
    g = grade(src, "", DEMO_TESTS, limits=FAST)
    assert [c.outcome for c in g.checks] == [Outcome.PASS, Outcome.RUNTIME_ERROR, Outcome.ASSERTION_FAILURE]
    assert g.outcome is Outcome.RUNTIME_ERROR and "IndexError" in g.detail == g.checks[1].detail


def test_a_run_that_ends_under_a_check_leaves_the_later_ones_unasked():
    src = "import os\ndef remove_first_last(s, ch):\n    return 'x' if s == 'hello' else os._exit(0)\n"
    g = grade(src, "", DEMO_TESTS, limits=FAST)
    assert [c.outcome for c in g.checks] == [Outcome.ASSERTION_FAILURE, Outcome.OTHER, None]
    assert g.outcome is Outcome.ASSERTION_FAILURE and "exited" in g.checks[1].detail


def test_check_detail_gives_got_and_expected():
    g = grade("def remove_first_last(s, ch):\n    return s\n", "", DEMO_TESTS, limits=FAST)
    assert g.checks[0].detail == "remove_first_last('hello', 'l'): got 'hello', expected 'heo'"
    assert g.checks[0].line == 1 and g.checks[0].source.startswith("assert remove_first_last(")


def test_json_shape():
    d = grade(DEMO_SOLUTION, "", DEMO_TESTS).to_json()
    assert d["passed"] is True and d["outcome"] == "PASS" and isinstance(d["seconds"], float)
    assert [c["passed"] for c in d["checks"]] == [True, True, True]


def test_setup_code_runs_after_the_solution_in_its_namespace():
    setup = "root = Node(3)\nroot.left = Node(1)\n"
    tests = "assert depth(root) == 2\nassert depth(None) == 0\n"
    sol = ("class Node:\n    def __init__(self, v): self.v, self.left, self.right = v, None, None\n"
           "def depth(n):\n    return 0 if n is None else 1 + max(depth(n.left), depth(n.right))\n")
    assert grade(sol, setup, tests).passed
    assert grade(sol.replace("1 + max", "2 + max"), setup, tests).outcome is Outcome.ASSERTION_FAILURE


def test_expected_expression_is_evaluated_without_the_solution():
    tests = "assert size((1, 2)) == sys.getsizeof((1, 2))\n"
    suite = compile_tests("", tests)
    assert suite.path == "fast" and suite.checks[0].expected_expr == "sys.getsizeof((1, 2))"
    assert grade("import sys\ndef size(t): return sys.getsizeof(t)\n", "", tests).passed
    # A solution that patches sys.getsizeof cannot move the expected value.
    cheat = "import sys\nsys.getsizeof = lambda o: 7\ndef size(t): return 7\n"
    assert grade(cheat, "", tests).outcome is Outcome.ASSERTION_FAILURE


def test_a_builtin_the_solution_redefines_is_the_solutions_where_it_is_all_the_tests_name():
    tests = "assert max(3, 1) == 1\n"  # MBPP 126's shape: the function under test has a builtin's name
    assert grade("def max(a, b):\n    return min(a, b)\n", "", tests).passed
    assert suite_for("", tests, "def max(a, b): pass").path == "fast"


SYS_STAND_IN = """
import types
sys = types.ModuleType("sys")
sys.getsizeof = lambda o: 0
def tuple_size(t):
    return 0
"""


def test_mbpp_596_a_sys_stand_in_does_not_compute_the_expected_side(mbpp_tasks):
    task = mbpp_tasks["mbpp_596"]
    assert grade(task.code, task.test_setup_code, task.tests(), limits=FAST).passed
    suite = suite_for(task.test_setup_code, task.tests(), SYS_STAND_IN)
    assert suite.path == "fast" and all(c.expected_expr for c in suite.checks)  # sys is the real one
    g = grade(SYS_STAND_IN, task.test_setup_code, task.tests(), limits=FAST)
    assert g.outcome is Outcome.ASSERTION_FAILURE, g.detail
    assert "got 0, expected" in g.detail
    # Also where the tests take the referee path (the stand-in there would be proxied to the solution).
    loop = "for t in [(1, 2), ('a',)]:\n    assert tuple_size(t) == sys.getsizeof(t)\n"
    assert grade(task.code, "", loop, limits=FAST).passed
    assert grade(SYS_STAND_IN, "", loop, limits=FAST).outcome is Outcome.ASSERTION_FAILURE


# A conventions-style row: hidden tests that compare the solution with a builtin or stdlib
# expression, a broken reference, and a solution that rebinds that name to agree with itself.
REBOUND = {
    "round": ("assert solve(3.7) == round(3.7)\nassert solve(2.5) == round(2.5)\n",  # half to even: 2
              "def solve(x):\n    return round(x)\n",
              "def solve(x):\n    return int(x + 0.5)\nround = lambda x: int(x + 0.5)\n"),
    "abs": ("assert solve(-3) == abs(-3)\nassert solve(4) == abs(4)\n",
            "def solve(x):\n    return abs(x)\n",
            "def solve(x):\n    return x\nabs = lambda x: x\n"),
    "sorted": ("assert solve([3, 1, 2]) == sorted([3, 1, 2])\nassert solve([2, 1]) == sorted([2, 1])\n",
               "def solve(xs):\n    return sorted(xs)\n",
               "def solve(xs):\n    return list(xs)\nsorted = list\n"),
    "math": ("assert solve(16) == math.sqrt(16)\nassert solve(2) == math.sqrt(2)\n",
             "import math\ndef solve(x):\n    return math.sqrt(x)\n",
             "class math:\n    sqrt = staticmethod(lambda x: x / 4)\n"
             "def solve(x):\n    return x / 4\n"),
}


@pytest.mark.parametrize("name", sorted(REBOUND))
@pytest.mark.parametrize("shape", ["fast", "referee"])
def test_a_rebound_builtin_or_module_does_not_compute_the_expected_side(name, shape):
    tests, fixed, broken = REBOUND[name]
    tests = "from solution import solve\n" + (  # as the conventions rows start
        tests if shape == "fast" else "def test_rebound():\n" + "".join("    " + t for t in tests.splitlines(True)))
    assert suite_for("", tests, broken).path == shape
    assert grade(fixed, "", tests, limits=FAST).passed, name
    g = grade(broken, "", tests, limits=FAST)
    assert g.outcome is Outcome.ASSERTION_FAILURE, (name, shape, g.outcome, g.detail)


@pytest.mark.parametrize("tests", [
    "assert f(2) == 4 and f(3) == 6\n",
    "assert f(2) != 5\n",
    "x = 2\nassert f(x) == 4\n",
    "assert 4 == f(2)\n",
    "from solution import f\nassert f(2) == 4\n",
    "import solution\nassert solution.f(2) == 4\n",
    "for a in range(5):\n    assert f(a) == 2 * a\n",
    "def test_f():\n    assert f(5) == 10\n",
    "try:\n    f(None)\n    ok = False\nexcept TypeError:\n    ok = True\nassert ok\n",
])
def test_other_shapes_are_graded_correctly(tests):
    good = "def f(x):\n    return 2 * x\n"
    bad = "def f(x):\n    return 2 * x + (x in (2, 5))\n"
    assert grade(good, "", tests).passed, tests
    if "!=" not in tests and "TypeError" not in tests and "range" not in tests:
        assert grade(bad, "", tests).outcome is Outcome.ASSERTION_FAILURE, tests


def test_referee_path_handles_objects_methods_and_exceptions():
    tests = """
from solution import Stack
s = Stack()
s.push(1)
s.push(2)
assert s.pop() == 2
assert s.size() == 1
try:
    Stack().pop()
    raise AssertionError("expected IndexError")
except IndexError:
    pass
"""
    sol = ("class Stack:\n    def __init__(self): self.items = []\n    def push(self, x): self.items.append(x)\n"
           "    def pop(self): return self.items.pop()\n    def size(self): return len(self.items)\n")
    g = grade(sol, "", tests)
    assert g.passed and g.path == "referee", g.detail
    g = grade(sol.replace("return self.items.pop()", "return self.items[0]"), "", tests)
    assert g.outcome is Outcome.ASSERTION_FAILURE and "got 1, expected == 2" in g.detail


def test_referee_failures_name_the_failing_check():
    g = grade("def remove_first_last(s, ch):\n    return s\n", "", REFEREE_TESTS)
    assert g.outcome is Outcome.ASSERTION_FAILURE and next(c for c in g.checks if not c.passed).line == 4
    assert [c.passed for c in g.checks] == [False, True]  # test_no_occurrence ran all the same
    g = grade("def remove_first_last(s, ch):\n    raise KeyError(s)\n", "", REFEREE_TESTS)
    assert g.outcome is Outcome.RUNTIME_ERROR and "raised by the solution" in g.detail
    g = grade("x = 1\n", "", REFEREE_TESTS)
    assert g.outcome is Outcome.RUNTIME_ERROR and "ImportError" in g.detail


def test_referee_timeouts_are_timeouts():
    src = "def remove_first_last(s, ch):\n    while True: pass\n"
    assert grade(src, "", REFEREE_TESTS, limits=FAST).outcome is Outcome.TIMEOUT


def test_unusable_tests_raise_test_error():
    with pytest.raises(InvalidTests, match="do not parse"):
        compile_tests("", "assert f(1) ==\n")
    with pytest.raises(InvalidTests, match="no checks"):
        compile_tests("", "import math\n")


def test_oversized_solution_is_an_outcome_not_a_crash():
    g = grade(b"x = 1\n" + b"#" * (MAX_SOLUTION_BYTES + 1), "", DEMO_TESTS)
    assert g.outcome is Outcome.OTHER and "limit" in g.detail


def test_hundred_megabyte_solution():
    g = grade(b"#" * (100 << 20), "", DEMO_TESTS)
    assert g.outcome is Outcome.OTHER and not g.passed


def test_concurrent_gradings_from_threads():
    from concurrent.futures import ThreadPoolExecutor
    wrong = "def remove_first_last(s, ch):\n    return s\n"
    jobs = [DEMO_SOLUTION if i % 2 else wrong for i in range(32)]
    with ThreadPoolExecutor(8) as pool:
        grades = list(pool.map(lambda src: grade(src, "", DEMO_TESTS), jobs))
    assert [g.passed for g in grades] == [bool(i % 2) for i in range(32)]


def test_a_server_killed_under_a_grading_is_regraded_or_raised_never_a_verdict():
    """The sandbox server dies (SIGKILL) while a grading runs: the grading is
    repeated on the restarted server and gives the solution's real outcome; a
    server that dies under every attempt raises SandboxFault (benchmarks/load.py
    saw an honest rollout scored 0 with OTHER before)."""
    import os
    import signal
    import threading
    import time

    from glyph.grading import SandboxFault
    from glyph.sandbox import Sandbox

    slow = ("import time\ndef remove_first_last(s, ch):\n    time.sleep(1.5)\n"
            "    return s.replace(ch, '', 1)[::-1].replace(ch, '', 1)[::-1]\n")
    sb = Sandbox(pool=1)
    try:
        assert grade(slow, "", DEMO_TESTS, sandbox=sb).passed  # warm: the server is up
        pid, kills = sb.server_pid(), []

        def kill_once():
            time.sleep(0.5)
            os.kill(pid, signal.SIGKILL)
            kills.append(pid)

        killer = threading.Thread(target=kill_once)
        killer.start()
        g = grade(slow, "", DEMO_TESTS, sandbox=sb)
        killer.join()
        assert kills and sb.restarts == 1
        assert g.passed, g.detail

        real_open = sb.open  # now every attempt finds its server killed under it

        def doomed_open(*args, **kwargs):
            run = real_open(*args, **kwargs)
            os.kill(sb.server_pid(), signal.SIGKILL)
            return run

        sb.open = doomed_open
        with pytest.raises(SandboxFault):
            grade(slow, "", DEMO_TESTS, sandbox=sb)
    finally:
        sb.close()



def test_parse_repeats_only_the_shared_depth_counter_mismatch(monkeypatch):
    """CPython 3.11 before 3.11.8 shares the AST conversion's depth counter
    between threads (python/cpython#106905): a parse outside glyph's lock
    (3.11's traceback module parses source to place carets) can make ours
    fail with that SystemError. ``grading.parse`` repeats such a parse (the
    counter is reset at each conversion), up to ``_PARSE_TRIES`` times; any
    other error is raised at once. The race itself is left to chance, so
    ``ast.parse`` is scripted here."""
    import ast

    from glyph import grading

    mismatch = SystemError("AST constructor recursion depth mismatch (before=3, after=5)")
    calls = []

    def scripted(failures, error=mismatch):
        def parse(source, filename="<unknown>", mode="exec"):
            calls.append(source)
            if len(calls) <= failures:
                raise error
            return ast.Module(body=[], type_ignores=[])
        return parse

    monkeypatch.setattr(grading.time, "sleep", lambda s: None)
    monkeypatch.setattr(grading.ast, "parse", scripted(3))
    assert isinstance(grading.parse("x = 1"), ast.Module) and len(calls) == 4
    calls.clear()
    monkeypatch.setattr(grading.ast, "parse", scripted(grading._PARSE_TRIES))
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        grading.parse("x = 1")
    assert len(calls) == grading._PARSE_TRIES
    calls.clear()
    monkeypatch.setattr(grading.ast, "parse", scripted(1, SystemError("something else")))
    with pytest.raises(SystemError, match="something else"):
        grading.parse("x = 1")
    assert len(calls) == 1
    assert not grading._PARSE_LOCK.locked()


@pytest.mark.parametrize("tests", [
    "assert all(map(solve, [1, 2, 3]))\n",
    "assert not any(map(solve, [1, 2, 3]))\n",
    "assert sum(map(solve, [1, 2, 3])) == 0\n",
    "assert list(zip(map(solve, [1, 2]), 'ab')) == []\n",
    "assert all(x for x in map(solve, [1, 2, 3]))\n",
    "assert list(iter(lambda: solve(1), None)) == []\n",
])
@pytest.mark.parametrize("exc", ["StopIteration", "StopAsyncIteration", "Stop"])
def test_an_exception_the_tests_iteration_would_swallow_fails_the_check(tests, exc):
    """StopIteration raised by the solution inside the tests' own iteration
    (``all(map(solve, cases))``) would end it silently: it fails the check."""
    broken = f"class Stop(StopIteration): pass\ndef solve(x):\n    raise {exc}('no')\n"
    tests = "from solution import solve\n" + tests
    assert suite_for("", tests, broken).path == "referee"
    g = grade(broken, "", tests, limits=FAST)
    assert g.outcome is Outcome.RUNTIME_ERROR, (tests, g.outcome, g.detail)
    assert "no" in g.detail and "raised by the solution" in g.detail


# ---------------------------------------------------------------- the trusted side's bounds


def _expected_sizes(task, lines):
    """(wire bytes of the answer line, wire values, characters) of each literal expected value of ``lines``."""
    from glyph.sandbox.runtime import wire
    sizes = []
    for line in lines:
        for check in compile_tests(task.test_setup_code, line).checks:
            if check.expected_expr is None:
                tree = wire.encode(check.expected)
                decoder = wire._Decoder(False)
                decoder.value(tree, 0)
                sizes.append((len(wire.dumps({"ev": "ret", "id": 0, "value": tree})),
                              wire.MAX_NODES - decoder.nodes, wire.MAX_DATA - decoder.data))
    return sizes


def test_the_answer_cap_is_sized_from_the_measured_fact(mbpp_tasks):
    """LARGEST_EXPECTED, measured again: over MBPP's tests, and their plus tests where $GLYPH_PLUS_PATH
    holds every task's file (else MBPP's alone, which hold the largest of all three)."""
    import os
    from pathlib import Path

    from glyph.data.plus.store import file_name, read_file
    folder = os.environ.get("GLYPH_PLUS_PATH")
    plus = folder is not None and all((Path(folder) / file_name(t.task_id)).exists() for t in mbpp_tasks.values())
    sizes = []
    for task in mbpp_tasks.values():
        lines = list(task.test_list) + (read_file(Path(folder) / file_name(task.task_id))[1] if plus else [])
        try:
            sizes += _expected_sizes(task, lines)
        except InvalidTests:
            continue
    measured = {name: max(s[i] for s in sizes) for i, name in enumerate(("bytes", "nodes", "characters"))}
    assert measured == LARGEST_EXPECTED
    assert 8 * LARGEST_EXPECTED["bytes"] <= ANSWER_BYTES < 16 * LARGEST_EXPECTED["bytes"]


def test_a_suite_whose_expected_value_would_not_fit_the_cap_is_unusable():
    with pytest.raises(InvalidTests, match="over the answer cap"):
        compile_tests("", f"assert f() == {'x' * ANSWER_BYTES!r}\n")
    with pytest.raises(InvalidTests, match="over the answer cap"):
        grade("def f(): return 1\n", "", f"assert f() == 'x' * {ANSWER_BYTES}\n", limits=FAST)


@pytest.mark.parametrize("answer", ["'x' * (1 << 20)", "[[]] * 100_000", "list(range(10 ** 5))"])
def test_an_answer_over_the_cap_fails_its_check_unread_and_the_next_is_asked(answer):
    src = f"def remove_first_last(s, ch):\n    return {answer} if s == 'hello' else 'bcd'\n"
    g = grade(src, "", DEMO_TESTS, limits=FAST)
    assert [c.outcome for c in g.checks] == [Outcome.OTHER, Outcome.PASS, Outcome.ASSERTION_FAILURE]
    assert "over the answer cap" in g.detail


def test_the_solution_is_parsed_here_only_for_the_names_the_tests_read_and_only_so_far():
    names = names_tests_read("assert sum(2, 3) == 5\n")
    assert names == {"sum"}
    assert solution_bindings("def sum(a, b): return a + b\n", names) == {"sum"}
    assert solution_bindings("def total(a, b): return a + b\nlen = 3\n", names) == frozenset()  # no parse
    big = "def sum(a, b): return a + b\n" + "0\n" * MAX_PARSE_BYTES
    assert solution_bindings(big, names) == {"sum"}  # not parsed: a name it mentions counts as rebound
    assert solution_bindings("# sum\n" + "0\n" * MAX_PARSE_BYTES, names) == {"sum"}
    assert solution_bindings("0\n" * MAX_PARSE_BYTES, names) == frozenset()


def test_a_million_line_solution_costs_the_grader_neither_memory_nor_seconds():
    """A 2 MiB source of a million ``0`` lines took 1.6 GB and 4 s in the grader's own parse; the
    sandbox refuses it all the same (its compile runs out of memory, or the source is graded)."""
    import resource
    import time
    src = "def remove_first_last(s, ch):\n    return s\n" + "0\n" * 1_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    g = grade(src, "", DEMO_TESTS, limits=Limits(cpu_s=10, wall_s=20))
    assert not g.passed
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024
    assert time.perf_counter() - t0 < 30


# ---------------------------------------------------------------- verdict blindness: the referee path

CALLS = """
seen = []
def f(x):
    seen.append(x)
    return x if RIGHT else -1
def calls():
    return list(seen)
"""
BLIND_TESTS = """\
from solution import f, calls
for x in range(3):
    assert f(x) == x
assert all(f(x) == x for x in range(3, 6))
assert f(6) == 6 and f(7) == 7
assert (f(8) == 8) or (f(9) == 9)
assert f(10) == 10, f(99)
def test_last():
    assert f(11) == 11 if f(12) == 12 else f(13) == 13
assert calls() == list(range(11)) + [12, 11, 13]
"""


@pytest.mark.parametrize("right", [True, False])
def test_the_referee_asks_the_solution_the_same_whatever_its_answers(right):
    """Every call the test program makes reaches the solution in the same order whether its answers
    are right or wrong: a failed assert does not end its loop, ``all`` reads its whole iterable,
    ``and``/``or``/``if else`` evaluate every operand, an assert's message is never evaluated (it would
    call the solution only on a failure), and the units after a failed one run. The last check sees
    the calls the solution saw (test functions run after the top-level statements; ``x if c else y``
    evaluates ``c``, ``x``, ``y`` in that order)."""
    g = grade(f"RIGHT = {right}\n" + CALLS, "", BLIND_TESTS.replace("assert calls()", "def test_calls():\n"
                                                                    "    assert calls()"), limits=FAST)
    assert g.path == "referee"
    passed = [c.passed for c in g.checks]
    assert passed[-1] is True, g.checks[-1].detail  # test_calls: 0..10, then 12, 11, 13; f(99) never
    assert passed[:-1] == [right] * (len(passed) - 1), [(c.source, c.detail) for c in g.checks]


@pytest.mark.parametrize("tests,outcome", [
    ("assert f(1) == 1 or 1 / 0\n", Outcome.PASS),  # the short circuit would never divide: dropped
    ("assert f(1) == 2 or 1 / 0\n", Outcome.RUNTIME_ERROR),  # it would: raised, as Python would
    ("assert f(1) == 2 and 1 / 0\n", Outcome.ASSERTION_FAILURE),
    ("assert (1 / 0 if f(1) == 2 else True)\n", Outcome.PASS),
    ("assert all(f(x) == x for x in [1, 2, None])\n", Outcome.RUNTIME_ERROR),  # f(None) raises before a False
    ("assert any(f(x) == x for x in [1, None])\n", Outcome.PASS),  # ... after the True: dropped
])
def test_eager_operands_keep_pythons_verdict(tests, outcome):
    g = grade("def f(x):\n    return x + 0\n", "", "from solution import f\n" + tests, limits=FAST)
    assert (g.path, g.outcome) == ("referee", outcome), g.detail


def test_an_assert_message_is_shown_where_it_calls_nothing_and_never_evaluated_where_it_could():
    sol = "seen = []\ndef f(x):\n    seen.append(x)\n    return -1\ndef calls():\n    return list(seen)\n"
    tests = ("from solution import f, calls\ngot = f(1)\nassert got == 1, f'wanted 1, got {got}'\n"
             "assert f(2) == 2, f(99)\nassert got == -1, undefined_name\ndef test_calls():\n"
             "    assert calls() == [1, 2]\n")
    g = grade(sol, "", tests, limits=FAST)
    assert g.detail == "AssertionError: wanted 1, got -1", g.detail
    assert [c.passed for c in g.checks] == [False, False, True, True], [(c.source, c.detail) for c in g.checks]
