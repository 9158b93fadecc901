"""REPRODUCTION.md's CPU steps, run as written: every fenced block tagged
``bash cpu-step`` is run in order with bash (``set -euo pipefail``) in one
fresh folder laid out as glyph's root (its ``configs/``), the way a user runs
them from glyph's root, in the pinned stack (tests/test_pin.py), which is the
environment the document's own ``bash install`` block builds
(tests/pinstack.py runs it): PRIME-RL 559b447 patched on ``PYTHONPATH``, the
pin's verifiers, glyph installed after it. Every block must succeed, the
study profile's (its renderer ``glyph.render_study.StudyRenderer`` imported
as each config loads) as the glyph profile's, through ``glyph train``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
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
    for needed in ("glyph.recipe --check", "glyph train rl @", "glyph train sft @",
                   "configs/study/$f.toml", "configs/study/sft_arm_$arm.toml", "configs/arm_b.toml",
                   "glyph data prepare --profile study", "--client.renderer-model-name",
                   "configs/study/eval_validation_arm_b.toml"):
        assert needed in text, needed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# About 20 processes (dry runs, two smoke evals, both data preparations): about 150 s of CPU, 5-6 min
# on a loaded 2-core machine, more than pytest's default 300 s allows for a slow runner.
@pytest.mark.timeout(900)
def test_the_cpu_steps_run_against_the_vendored_pin(tmp_path, mbpp_path):
    if shutil.which("curl") is None:
        pytest.skip("the smoke step waits for the server with curl")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, GLYPH=str(REPO), PATH=bin_dir + os.pathsep + os.environ["PATH"],
               GLYPH_MBPP_PATH=str(Path(mbpp_path).resolve()), HF_HUB_OFFLINE="1", PRIME_RUNS_MODE="disabled",
               PRL_RUN_ID="reproduction-test", PORT=str(_free_port()))  # not the document's 8391: runs overlap
    env.pop("PRL_RUN_NAME", None)
    work = tmp_path / "glyph"
    work.mkdir()
    (work / "configs").symlink_to(REPO / "configs")  # glyph's root, as the document runs from it
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
    assert (work / "outputs/top/study-arm-b-seed42/configs/orchestrator.json").is_file()
    top = json.loads((work / "outputs/top/study-arm-b-seed42/configs/orchestrator.json").read_text())
    assert top == study | {"output_dir": top["output_dir"]}  # configs/arm_b.toml is the study's arm B
    assert (work / "artifacts/study/sft/arm_b/train.jsonl").is_file()
