"""REPRODUCTION.md's CPU steps, run as written: every fenced block tagged
``bash cpu-step`` is run in order with bash (``set -euo pipefail``) in one
fresh folder, the way a user runs them from the PRIME-RL folder, in the
pinned stack (tests/test_pin.py): PRIME-RL 559b447 patched on
``PYTHONPATH``, the pin's verifiers, glyph installed after it. That is the
document's tarball route; the install commands themselves are not run (the
stack installs the same packages, tests/pinstack.py).

A block tagged ``cpu-step study-renderer`` needs ``glyph.render.StudyRenderer``
(the study profile's renderer); while glyph lacks it, that block is still
run, and must fail for that reason (and no other).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("prime_rl.configs.rl", reason="PRIME-RL (patched) must be on PYTHONPATH")

import glyph.render

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```bash cpu-step( study-renderer)?\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[bool, str]]:
    return [(bool(m.group(1)), m.group(2)) for m in BLOCK.finditer((REPO / "REPRODUCTION.md").read_text())]


def test_the_document_marks_its_cpu_steps():
    found = blocks()
    assert len(found) >= 4 and sum(study for study, _ in found) == 1
    text = "\n".join(body for _, body in found)
    for needed in ("glyph.recipe --check", "prime_rl.entrypoints.rl", "prime_rl.entrypoints.sft",
                   "glyph data prepare --profile study", "--client.renderer-model-name"):
        assert needed in text, needed


def test_the_cpu_steps_run_against_the_vendored_pin(tmp_path, mbpp_path):
    if shutil.which("curl") is None:
        pytest.skip("the smoke step waits for the server with curl")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, GLYPH=str(REPO), PATH=bin_dir + os.pathsep + os.environ["PATH"],
               GLYPH_MBPP_PATH=mbpp_path, HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled",
               PRL_RUN_ID="reproduction-test")
    env.pop("PRL_RUN_NAME", None)
    work = tmp_path / "prime-rl"
    work.mkdir()
    has_study_renderer = hasattr(glyph.render, "StudyRenderer")
    for i, (study, body) in enumerate(blocks()):
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env, check=False,
                              capture_output=True, text=True, timeout=900)
        where = f"cpu-step block {i}:\n{body}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        if study and not has_study_renderer:
            assert proc.returncode != 0 and "StudyRenderer" in proc.stdout + proc.stderr, where
            continue
        assert proc.returncode == 0, where
    assert (work / "outputs/check/glyph-arm-b-seed42/configs/orchestrator.json").is_file()
    assert (work / "artifacts/study/sft/arm_b/train.jsonl").is_file()
    if not has_study_renderer:
        print("glyph.render.StudyRenderer does not exist yet: the study-profile block failed for that reason")
