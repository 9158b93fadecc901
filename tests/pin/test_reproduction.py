"""REPRODUCTION.md's CPU steps, run as written: every fenced block tagged
``bash cpu-step`` is run in order with bash (``set -euo pipefail``) in one
fresh folder, the way a user runs them from the PRIME-RL folder, in the
pinned stack (tests/test_pin.py): PRIME-RL 559b447 patched on
``PYTHONPATH``, the pin's verifiers, glyph installed after it. That is the
document's tarball route; the install commands themselves are not run (the
stack installs the same packages, tests/pinstack.py). Every block must
succeed, the study profile's (its renderer ``glyph.render_study.StudyRenderer``
imported as each config loads) as the glyph profile's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prime_rl.configs.rl", reason="PRIME-RL (patched) must be on PYTHONPATH")

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```bash cpu-step\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[str]:
    return BLOCK.findall((REPO / "REPRODUCTION.md").read_text())


def test_the_document_marks_its_cpu_steps():
    found = blocks()
    assert len(found) >= 4
    # Every block opening with ```bash cpu-step is one of them: no tag variant is skipped.
    assert (REPO / "REPRODUCTION.md").read_text().count("```bash cpu-step") == len(found)
    text = "\n".join(found)
    for needed in ("glyph.recipe --check", "prime_rl.entrypoints.rl", "prime_rl.entrypoints.sft",
                   "configs/study/$f.toml", "configs/study/sft_arm_$arm.toml",
                   "glyph data prepare --profile study", "--client.renderer-model-name"):
        assert needed in text, needed


# About 15 processes (dry runs, the smoke eval, both data preparations): about 115 s of CPU, 4 min
# on a loaded 2-core machine, more than pytest's default 300 s allows for a slow runner.
@pytest.mark.timeout(900)
def test_the_cpu_steps_run_against_the_vendored_pin(tmp_path, mbpp_path):
    if shutil.which("curl") is None:
        pytest.skip("the smoke step waits for the server with curl")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, GLYPH=str(REPO), PATH=bin_dir + os.pathsep + os.environ["PATH"],
               GLYPH_MBPP_PATH=str(Path(mbpp_path).resolve()), HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled",
               PRL_RUN_ID="reproduction-test")
    env.pop("PRL_RUN_NAME", None)
    work = tmp_path / "prime-rl"
    work.mkdir()
    for i, body in enumerate(blocks()):
        start = time.monotonic()
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env, check=False,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"cpu-step block {i}:\n{body}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        print(f"cpu-step block {i}: {time.monotonic() - start:.0f} s")
    assert (work / "outputs/check/glyph-arm-b-seed42/configs/orchestrator.json").is_file()
    study = json.loads((work / "outputs/check/study-arm-b-seed42/configs/orchestrator.json").read_text())
    assert study["renderer"]["import_path"] == "glyph.render_study.StudyRenderer"
    assert (work / "outputs/check/study-sft-arm-a/configs/sft.json").is_file()
    assert (work / "artifacts/study/sft/arm_b/train.jsonl").is_file()
