"""Start-up: the CPU a ``glyph grade`` costs before and after its lazy start, and
glyph's share of ``vf-eval glyph-mbpp --help`` and of a bad ``vf-eval`` option.

``grade``
    ``glyph grade --solution S --tests T`` (a two-assert pass) by the glyph package
    at ``--before`` (a git ref, exported with ``git archive``; default: the parent of
    the first commit that defined ``glyph.cli.common._PlainValue``, so that the
    script still compares after a merge) and by this checkout, ``--runs`` times each,
    interleaved (this machine is noisy), after one warm-up run a side that
    writes the bytecode of every module it imports (under a temporary
    ``PYTHONPYCACHEPREFIX``, so that both sides run with bytecode cached). Also ``python -c pass`` (the interpreter's own start)
    and ``grade()`` called from ``python -c`` (the grading without the CLI).
``vf-eval``
    (``--vf-eval``) ``vf-eval glyph-mbpp --help`` against ``vf-eval harbor --help``
    (a taskset verifiers ships: the same CLI without glyph), and the same two with
    a bad option, ``--vf-runs`` times each, interleaved, after a warm-up run each.

CPU is user + system time of the command and every child it waited for
(``RUSAGE_CHILDREN``); each row prints the median and the range, and wall
time's median. Last, the ratios: ``grade_cpu_ratio=<before / after>`` and
``vf_eval_glyph_share=<glyph-mbpp / harbor>`` for --help and for the bad option.

    uv run python benchmarks/startup.py [--before REF] [--runs N] [--vf-eval] [--vf-runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bombs import REPO, default_before, export, git

COMMON = "glyph/cli/common.py"
SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
GLYPH = "import sys; from glyph.cli.app import app; sys.argv[0] = 'glyph'; app()"
GRADE = ("import sys; from glyph.grading import grade; "
         "r = grade(open(sys.argv[1], 'rb').read(), '', open(sys.argv[2]).read()); sys.exit(not r.passed)")


def once(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(CPU s, wall s) of one run of ``cmd`` in ``cwd`` (not the checkout: ``python -c`` puts the
    current directory first on ``sys.path``), which must exit 0 (1 for a bad option)."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1) or proc.returncode and "--bogus" not in cmd:
        sys.exit(f"{' '.join(cmd[:4])} ... exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, wall


def measure(cases: dict[str, tuple[list[str], dict]], runs: int, warm: bool, cwd: Path) -> dict[str, list[tuple]]:
    """Each case ``runs`` times, interleaved; one discarded run each first when ``warm``."""
    if warm:
        for cmd, env in cases.values():
            once(cmd, env, cwd)
    got: dict[str, list[tuple]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, (cmd, env) in cases.items():
            got[name].append(once(cmd, env, cwd))
    return got


def row(name: str, samples: list[tuple]) -> float:
    cpu = [c * 1000 for c, _ in samples]
    wall = statistics.median(w for _, w in samples) * 1000
    med = statistics.median(cpu)
    print(f"{name:34} cpu {med:8.0f} ms  (min {min(cpu):.0f}, max {max(cpu):.0f})  wall {wall:8.0f} ms  n={len(cpu)}")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="git ref of the BEFORE glyph (default: the parent of the first commit "
                                     "that defined _PlainValue)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--vf-eval", action="store_true", help="also time vf-eval glyph-mbpp against vf-eval harbor")
    ap.add_argument("--vf-runs", type=int, default=3)
    args = ap.parse_args()
    before = args.before or default_before("_PlainValue", COMMON)
    work = Path(tempfile.mkdtemp(prefix="glyph-startup-"))
    # Bytecode cached for every module of both sides (the warm-up run writes it), under a prefix of
    # the work folder: the checkout is left as it is, whatever PYTHONDONTWRITEBYTECODE says.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PRIME_RUNS_MODE="disabled", HF_HUB_OFFLINE="1", PYTHONPYCACHEPREFIX=str(work / "pycache"))
    try:
        (work / "before").mkdir()
        export(before, work / "before")
        (work / "sol.py").write_text(SOLUTION)
        (work / "tests.py").write_text(TESTS)
        files = ["--solution", str(work / "sol.py"), "--tests", str(work / "tests.py")]
        at = lambda root: dict(env, PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]))
        print(f"glyph grade, BEFORE = {git('rev-parse', '--short', before).strip()}, AFTER = this checkout; "
              f"median of {args.runs}")
        got = measure({"python -c pass": ([sys.executable, "-c", "pass"], env),
                       "grade() from python -c": ([sys.executable, "-c", GRADE, *files[1::2]], at(REPO)),
                       "glyph grade BEFORE": ([sys.executable, "-c", GLYPH, "grade", *files], at(work / "before")),
                       "glyph grade AFTER": ([sys.executable, "-c", GLYPH, "grade", *files], at(REPO))},
                      args.runs, warm=True, cwd=work)
        med = {name: row(name, samples) for name, samples in got.items()}
        for side, root in (("BEFORE", work / "before"), ("AFTER", REPO)):  # each side ran its own glyph
            where = subprocess.run([sys.executable, "-c", "import glyph; print(glyph.__file__)"], env=at(root),
                                   cwd=work, capture_output=True, text=True, check=True).stdout.strip()
            assert Path(where).is_relative_to(root), (side, where)
        ratios = [f"grade_cpu_ratio={med['glyph grade BEFORE'] / med['glyph grade AFTER']:.2f}"]
        if args.vf_eval:
            vf = shutil.which("vf-eval", path=str(Path(sys.executable).parent)) or "vf-eval"
            print(f"\nvf-eval (this checkout's glyph-mbpp), median of {args.vf_runs}")
            got = measure({f"vf-eval {t} {o}": ([vf, t, o], env)
                           for o in ("--help", "--bogus") for t in ("glyph-mbpp", "harbor")},
                          args.vf_runs, warm=True, cwd=work)
            med = {name: row(name, samples) for name, samples in got.items()}
            for o in ("--help", "--bogus"):
                ratios.append(f"vf_eval_glyph_share{o.replace('--', '_')}="
                              f"{med[f'vf-eval glyph-mbpp {o}'] / med[f'vf-eval harbor {o}']:.2f}")
        print("\n" + " ".join(ratios))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
