"""verifiers' own gold check proves glyph-mbpp's reference solutions pass in
the runtime (``glyph.envs.mbpp.validate``), and catches one that does not.

Runs verifiers' validate CLI (``vf-validate`` in 0.4.0, ``validate`` at the
pin; both are ``verifiers.v1.cli.validate:main(argv)``) on the subprocess
runtime, on the first three test-split tasks of a copy of the MBPP data in
which one reference is broken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import verifiers.v1 as vf

from glyph.envs.mbpp.taskset import GlyphTask

VALIDATE_MAIN = "import sys; from verifiers.v1.cli.validate import main; main(sys.argv[1:])"
BROKEN_ID = 12  # the second task of the test split (11, 12, 13 come first)

def test_gold_check_passes_references_and_flags_a_broken_one(mbpp_path, tmp_path):
    rows = [json.loads(line) for line in Path(mbpp_path).read_text().splitlines() if line.strip()]
    for row in rows:
        if row["task_id"] == BROKEN_ID:
            # Every function the reference defines now returns None: its asserts fail.
            row["code"] += "\n" + "\n".join(f"{name} = lambda *a, **k: None"
                                            for name in _defined_functions(row["code"]))
    data = tmp_path / "mbpp.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert GlyphTask.validate is not vf.Task.validate  # glyph-mbpp's gold check, not verifiers' default True
    env = dict(os.environ, HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled")
    out = tmp_path / "out"
    argv = ["glyph-mbpp", "-n", "3", "--only-gold", "True", "--runtime.type", "subprocess", "--rich", "False",
            "--taskset.data-path", str(data), "-o", str(out)]
    proc = subprocess.run(
        [sys.executable, "-c", VALIDATE_MAIN, *argv],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for p in out.rglob("results.jsonl") for line in p.read_text().splitlines()]
    got = {r["name"]: r["reason"] for r in results}
    assert got == {"mbpp_11": "valid", f"mbpp_{BROKEN_ID}": "invalid", "mbpp_13": "valid"}, got
    # The log says why, naming the task and the grader's outcome.
    assert f"mbpp_{BROKEN_ID}: the reference solution gets ASSERTION_FAILURE" in proc.stderr + proc.stdout


def _defined_functions(code: str) -> list[str]:
    import ast
    return [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]


def test_gold_check_of_glyph_conventions_flags_a_test_that_does_not_enforce_its_convention(tmp_path):
    """glyph-conventions' gold check (``glyph.envs.conventions.validate``), as ``glyph conventions
    validate`` checks a file: of three rows, the first as shipped is valid; one whose broken reference
    is its fixed one (the hidden test then cannot tell them apart) and one whose fixed reference is
    its broken one are invalid, each named in the log with why."""
    from glyph.data import conventions
    from glyph.envs.conventions.taskset import ConventionsTask

    rows = [json.loads(line) for line in conventions.DATA_FILE.read_text().splitlines() if line.strip()][:3]
    rows[1]["reference_broken"] = rows[1]["reference_fixed"]
    rows[2]["reference_fixed"] = rows[2]["reference_broken"]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert ConventionsTask.validate is not vf.Task.validate
    env = dict(os.environ, HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled")
    out = tmp_path / "out"
    argv = ["glyph-conventions", "--only-gold", "True", "--runtime.type", "subprocess", "--rich", "False",
            "--taskset.data-path", str(data), "--taskset.split", "all", "-o", str(out)]
    proc = subprocess.run([sys.executable, "-c", VALIDATE_MAIN, *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for p in out.rglob("results.jsonl") for line in p.read_text().splitlines()]
    got = {r["name"]: r["reason"] for r in results}
    assert got == {rows[0]["id"]: "valid", rows[1]["id"]: "invalid", rows[2]["id"]: "invalid"}, got
    log = proc.stderr + proc.stdout
    assert f"{rows[1]['id']}: reference_broken passes the hidden test" in log
    assert f"{rows[2]['id']}: reference_fixed fails the hidden test" in log
