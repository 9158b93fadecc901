"""The differential test of the study profile's verdicts: glyph's grader under
``glyph.semantics.STUDY`` beside ``study_oracle`` (the study's classifier, as
a test oracle) on a corpus of honest solutions, with the agreement figures
and every difference.

The corpus (``corpus``), each case a solution and the task's tests as the
study profile's rows carry them (``glyph.profiles.study``: setup and asserts
normalised; the oracle gets them as the study's one ``test_code``):

* ``reference``: MBPP's reference solutions (974 in the full corpus);
* ``mutation``: the study's own mutations of them (``glyph.data.study.mutations``,
  which made the candidates of its SFT traces): every one of the SFT split's
  tasks (so each SFT trace's candidates are in), the first ``per_task`` of the
  others;
* ``crafted``: ``CRAFTED``, solutions written here for what the corpus above
  rarely holds: ``if __name__ == "__main__":`` blocks, exact and inexact
  numbers, each outcome class and each way the study's text rules read one.

``KNOWN`` names the crafted cases where the two may differ, and why: a
difference elsewhere is a finding. ``python -m testkit.study_verdicts``
runs the full corpus and prints the figures (README, "The study's verdicts").
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from glyph.data import mbpp, study
from glyph.grading import grade
from glyph.sandbox import Limits, Sandbox
from glyph.semantics import GLYPH, STUDY
from testkit.study_oracle import study_outcome

TIMEOUT_S = 5.0
"""The wall clock of either side (the study's was 30 s, its SFT traces' 5 s: no case here is near it)."""


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    source: str
    setup: str
    tests: tuple[str, ...]

    @property
    def test_code(self) -> str:
        """The study's ``test_code`` (``glyph.data.study.StudyTask.test_code``)."""
        return "\n".join(p for p in (self.setup, *self.tests) if p) + "\n"


_SQ = ("assert f(2) == 4", "assert f(3) == 9")
_F = "def f(x):\n    return x * x\n"
_MAIN = _F + "if __name__ == '__main__':\n"
CRAFTED: dict[str, str] = {
    "plain": "def f(x):\n    return x * x\n",
    "wrong_answer": "def f(x):\n    return x + x\n",
    "raises_value_error": "def f(x):\n    raise ValueError('no')\n",
    "raise_mentions_assertion": "def f(x):\n    raise ValueError('an AssertionError, it says')\n",
    "raise_line_mentions_syntax": "def f(x):\n    raise KeyError(x)  # not a SyntaxError\n",
    "eval_syntax_error": "def f(x):\n    return eval('x *')\n",
    "tab_error": "def f(x):\n\tif x:\n        return x * x\n\treturn 0\n",
    "indentation_error": "def f(x):\nreturn x * x\n",
    "syntax_error": "def f(x)\n    return x * x\n",
    "name_error_at_load": "def f(x):\n    return x * x\nprint(undefined_name)\n",
    "zero_division_in_call": "def f(x):\n    return x * x // 0\n",
    "recursion": "def f(x):\n    return f(x)\n",
    "memory": "def f(x):\n    return len(bytearray(1 << 40))\n",
    "timeout": "def f(x):\n    while True:\n        pass\n",
    "keyboard_interrupt": "def f(x):\n    raise KeyboardInterrupt\n",
    "exit_in_call": "import sys\ndef f(x):\n    sys.exit(0)\n",
    "exit_message_in_call": "import sys\ndef f(x):\n    sys.exit('AssertionError: bad')\n",
    "os_exit_at_load": "import os\ndef f(x):\n    return x * x\nos._exit(0)\n",
    "generator_result": "def f(x):\n    return (x * x for _ in range(1))\n",
    "main_pass": "def f(x):\n    return x * x\nif __name__ == '__main__':\n    print(f(2))\n",
    "main_exit_0": "import sys\ndef f(x):\n    return x * x\nif __name__ == '__main__':\n    sys.exit(0)\n",
    "main_exit_1": "import sys\ndef f(x):\n    return x * x\nif __name__ == '__main__':\n    sys.exit(1)\n",
    "main_self_check_fails": _MAIN + "    assert f(1) == 2\n",
    "main_self_check_passes": _MAIN + "    assert f(1) == 1\n",
    "main_input": "def f(x):\n    return x * x\nif __name__ == '__main__':\n    n = int(input())\n",
    "main_argv": "import sys\n" + _MAIN + "    print(sys.argv[1])\n",
    "main_unittest": ("import unittest\ndef f(x):\n    return x * x\nclass T(unittest.TestCase):\n"
                      "    def test(self):\n        self.assertEqual(f(2), 4)\nif __name__ == '__main__':\n"
                      "    unittest.main()\n"),
    "main_raises": _MAIN + "    raise RuntimeError('demo')\n",
    "print_no_newline": "def f(x):\n    return x * x\nprint('ready', end='')\n",
    "print_then_pass": "def f(x):\n    print('computing', x)\n    return x * x\n",
    "os_write_no_newline": "import os\n" + _F + "os.write(1, b'raw')\n",
    "os_write_at_exit": "import atexit, os\n" + _F + "atexit.register(lambda: os.write(1, b'late'))\n",
    "big_stdout_no_newline": _F + "print('x' * 100000, end='')\n",
    "big_stdout": _F + "print('x' * 100000)\n",
    "atexit_prints": "import atexit\ndef f(x):\n    return x * x\natexit.register(lambda: print('bye'))\n",
    "atexit_prints_stderr": ("import atexit, sys\ndef f(x):\n    return x * x\n"
                             "atexit.register(lambda: sys.stderr.write('bye\\n'))\n"),
    "stderr_says_syntax_then_pass": "import sys\n" + _F + "sys.stderr.write('SyntaxError?\\n')\n",
    "stderr_says_syntax_then_wrong": ("import sys\ndef f(x):\n    return x\n"
                                      "sys.stderr.write('SyntaxError?\\n')\n"),
    "warning_then_pass": "import warnings\ndef f(x):\n    warnings.warn('careful')\n    return x * x\n",
    "thread_finishes": ("import threading, time\ndef f(x):\n    return x * x\n"
                        "threading.Thread(target=time.sleep, args=(0.3,)).start()\n"),
    "lone_surrogate_print": "def f(x):\n    print('\\udcff')\n    return x * x\n",
    "fraction": "from fractions import Fraction\ndef f(x):\n    return Fraction(x * x, 1)\n",
    "fraction_wrong": "from fractions import Fraction\ndef f(x):\n    return Fraction(x * x, 2)\n",
    "decimal": "from decimal import Decimal\ndef f(x):\n    return Decimal(x * x)\n",
    "decimal_nan": "from decimal import Decimal\ndef f(x):\n    return Decimal('sNaN')\n",
    "float_equal": "def f(x):\n    return float(x * x)\n",
    "float_inexact": "def f(x):\n    return x * x + 1e-9\n",
    "complex": "def f(x):\n    return complex(x * x, 0)\n",
    "bool_for_int": "def f(x):\n    return True if x == 1 else x * x\n",
    "int_subclass": "class N(int):\n    pass\ndef f(x):\n    return N(x * x)\n",
    "own_eq": "class A:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return A()\n",
}
"""Solutions of ``f`` (square its argument) for ``_SQ``, by what they exercise."""

KNOWN: dict[str, str] = {
    "lone_surrogate_print": "its stdout is not UTF-8 (a lone surrogate printed under surrogateescape): the "
                            "study's tool failed decoding it and gave no class; glyph reads the run's end",
    "int_subclass": "glyph crosses only exact builtin types: an int subclass is no plain data, a wrong "
                    "answer (the study compared it with int's ==)",
    "own_eq": "the study ran the solution's own __eq__ (always True: PASS); glyph never lets the solution "
              "decide a comparison",
}
"""The crafted cases whose verdicts differ, and why (the README lists them)."""


_REFEREE = ("for x, y in [(2, 4), (3, 9)]:\n    assert f(x) == y",)
"""The same checks as a loop: graded on the referee path (``glyph.grading``'s docstring)."""
REFEREE_CASES = ("plain", "wrong_answer", "raises_value_error", "raise_mentions_assertion",
                 "eval_syntax_error", "exit_in_call", "main_exit_0", "main_self_check_fails", "main_input",
                 "print_no_newline", "atexit_prints", "stderr_says_syntax_then_wrong", "fraction", "decimal",
                 "decimal_nan", "timeout")


def crafted() -> list[Case]:
    """Each of ``CRAFTED`` on the fast path, and ``REFEREE_CASES`` on the referee path too."""
    return ([Case(name, "crafted", src, "", _SQ) for name, src in CRAFTED.items()]
            + [Case(f"referee/{name}", "crafted", CRAFTED[name], "", _REFEREE) for name in REFEREE_CASES])


def corpus(tasks: dict[str, mbpp.MbppTask], per_task: int | None = 2, sft_all: bool = True,
           step: int = 1) -> list[Case]:
    """The crafted cases, then every ``step``-th task's reference and mutations (module docstring;
    ``per_task`` None: every mutation of every task)."""
    rows = {t.task_id: study.from_mbpp(t) for t in tasks.values()}
    sft = set()
    if sft_all:
        sft = {t.task_id for t in study.make_splits(list(rows.values()))["sft"]}
    cases = crafted()
    for i, row in enumerate(rows.values()):
        if i % step:
            continue
        cases.append(Case(f"mbpp_{row.task_id}", "reference", row.code, row.setup, row.tests))
        for k, m in enumerate(study.mutations(row.code)):
            if per_task is not None and k >= per_task and row.task_id not in sft:
                break
            name = f"mbpp_{row.task_id}/m{k}"
            cases.append(Case(name, "mutation", m.apply(row.code), row.setup, row.tests))
    return cases


@dataclass
class Result:
    case: Case
    oracle: str
    study: str
    glyph: str


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    def differences(self) -> list[Result]:
        return [r for r in self.results if r.oracle != r.study]

    def lines(self) -> list[str]:
        """The figures: agreement per kind, the oracle's classes, each difference, and how often
        glyph's own semantics would have differed."""
        out = [f"{len(self.results)} cases in {self.seconds:.0f} s (wall clock {TIMEOUT_S:g} s a grading)"]
        for kind in ("crafted", "reference", "mutation"):
            rs = [r for r in self.results if r.case.kind == kind]
            if rs:
                agree = sum(r.oracle == r.study for r in rs)
                moved = sum(r.oracle != r.glyph for r in rs)
                out.append(f"  {kind:9}: study profile agrees with the study's classifier on "
                           f"{agree}/{len(rs)} ({100 * agree / len(rs):.2f}%); glyph's semantics would "
                           f"differ on {moved}")
        out.append("  the study's classes: " + ", ".join(f"{k} {v}" for k, v in
                                                       Counter(r.oracle for r in self.results).most_common()))
        for r in self.differences():
            why = KNOWN.get(r.case.name, "UNEXPECTED")
            out.append(f"  differs: {r.case.name}: study {r.oracle}, glyph's study profile {r.study} ({why})")
        return out


def run(cases: list[Case], workers: int = 2, timeout: float = TIMEOUT_S, progress=None) -> Report:
    """Grade every case both ways (and under glyph's semantics), ``workers`` cases at a time, on one
    sandbox server."""
    limits = Limits(cpu_s=timeout, wall_s=timeout)
    report = Report()
    t0 = time.perf_counter()
    sandbox = Sandbox()
    try:

        def one(case: Case) -> Result:
            oracle = study_outcome(case.source, case.test_code, timeout)
            tests = "\n".join(case.tests)
            ours = grade(case.source, case.setup, tests, limits=limits, sandbox=sandbox, semantics=STUDY)
            theirs = grade(case.source, case.setup, tests, limits=limits, sandbox=sandbox, semantics=GLYPH)
            if progress is not None:
                progress()
            return Result(case, oracle, ours.outcome.value, theirs.outcome.value)

        with ThreadPoolExecutor(workers) as pool:
            report.results = list(pool.map(one, cases))
    finally:
        sandbox.close()
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-task", type=int, default=2, help="mutations of a non-SFT task (-1: all)")
    ap.add_argument("--step", type=int, default=1, help="every step-th task")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    cases = corpus(mbpp.load(None), None if args.per_task < 0 else args.per_task, True, args.step)
    done = [0]

    def tick() -> None:
        done[0] += 1
        if done[0] % 200 == 0:
            print(f"  {done[0]}/{len(cases)}", file=sys.stderr, flush=True)

    report = run(cases, args.workers, progress=tick)
    print("\n".join(report.lines()))
    return 0 if all(r.case.name in KNOWN for r in report.differences()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
