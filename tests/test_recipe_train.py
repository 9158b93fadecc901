"""``glyph train``: the one training command (PRIME-RL's own ``rl`` / ``sft``,
run with glyph's Python) and ``glyph train export`` (a weight broadcast as a
checkpoint that speaks its profile's chat format, as the study's did).

In the main venv PRIME-RL is absent, so ``glyph train rl`` must say so in
one line; tests/pin/test_reproduction.py runs it for real at the pin (the
dry-runs of REPRODUCTION.md). The export is checked with ``transformers``
loading the checkpoint as a server does: its chat template renders what the
profile's renderer renders, and its EOS is ``<|im_end|>`` everywhere a server
reads one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import render_checks
from typer.testing import CliRunner

from glyph import render
from glyph.cli.app import app

MESSAGES = [
    {"role": "system", "content": "You fix Python functions."},
    {"role": "user", "content": "Fix solution.py.\n"},
    {"role": "assistant", "content": "CALL 1 read_file {\"path\": \"solution.py\"}"},
    {"role": "tool", "content": "def f(x):\n    return x\n"},
]


def test_train_says_in_one_line_where_prime_rl_is_missing():
    proc = subprocess.run([sys.executable, "-m", "glyph.cli.app", "train", "rl", "@", "configs/arm_b.toml",
                           "--dry-run"], capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode == 0:
        pytest.skip("PRIME-RL imports here (the pinned stack): tests/pin/test_reproduction.py runs it")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "PRIME-RL is not importable" in lines[0] and "REPRODUCTION.md" in lines[0], lines
    assert "Traceback" not in proc.stderr


def test_train_passes_every_argument_to_prime_rls_entry_point(monkeypatch):
    """``rl`` / ``sft`` exec ``python -m prime_rl.entrypoints.<kind>`` with the arguments as given."""
    from glyph.cli import train

    calls = []
    monkeypatch.setattr(train, "missing_prime_rl", lambda: None)
    monkeypatch.setattr(train.os, "execv", lambda path, argv: calls.append((path, argv)))
    args = ["@", "configs/arm_b.toml", "--dry-run", "--run.name", "x", "--orchestrator.seq-len", "8"]
    for kind in ("rl", "sft"):
        r = CliRunner().invoke(app, ["train", kind, *args])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(app, ["train", kind, "-h"], env={"COLUMNS": "400"})  # glyph's help
        assert r.exit_code == 0 and f"prime_rl.entrypoints.{kind} --help" in r.output, r.output
    assert calls == [(sys.executable, [sys.executable, "-m", f"prime_rl.entrypoints.{kind}", *args])
                     for kind in ("rl", "sft")]


@pytest.fixture()
def broadcast(tmp_path) -> tuple[Path, Path]:
    """A weight broadcast (weights, their index, the STABLE marker) and a base model folder
    (the offline Qwen3 tokenizer with Qwen3-Base's EOS, a config and generation config)."""
    step = tmp_path / "broadcasts" / "step_60"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"weights")
    (step / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    (step / "STABLE").write_text("")
    base = tmp_path / "base"
    shutil.copytree(render.offline_tokenizer_dir("glyph"), base)
    config = json.loads((base / "tokenizer_config.json").read_text())
    (base / "tokenizer_config.json").write_text(json.dumps(config | {"eos_token": "<|endoftext|>"}))
    (base / "config.json").write_text(json.dumps({"model_type": "qwen3", "eos_token_id": 151643}))
    (base / "generation_config.json").write_text(json.dumps({"eos_token_id": 151643, "max_new_tokens": 2048}))
    (base / "model.safetensors.index.json").write_text('{"weight_map": {"base": "base"}}')
    return step, base


@pytest.mark.parametrize("profile", ["study", "glyph"])
def test_export_carries_the_profiles_template_and_eos(profile, broadcast, tmp_path):
    from transformers import AutoTokenizer

    step, base = broadcast
    out = tmp_path / "hf"
    r = CliRunner().invoke(app, ["train", "export", str(step), str(out), "--profile", profile,
                                 "--base", str(base)])
    assert r.exit_code == 0, r.output
    assert (out / "model.safetensors").read_bytes() == b"weights" and not (out / "STABLE").exists()
    # The weights' own index, not the base model's.
    assert json.loads((out / "model.safetensors.index.json").read_text()) == {"weight_map": {}}
    assert step.is_dir()  # copied, not moved, by default
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    for name in ("config.json", "generation_config.json"):
        got = json.loads((out / name).read_text())
        assert (got["eos_token_id"], got["pad_token_id"]) == (151645, 151645), name
    assert json.loads((out / "generation_config.json").read_text())["max_new_tokens"] == 2048  # the rest kept
    reference = render.load_tokenizer(profile=profile)
    # Observations: tool messages in the study's protocol, user messages in glyph's.
    messages = MESSAGES if profile == "study" else [m | {"role": "user"} if m["role"] == "tool" else m
                                                    for m in MESSAGES]
    for gen in (False, True):
        served = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        assert served == render_checks.render_text(messages, reference, add_generation_prompt=gen, profile=profile)
    if profile == "study":  # the study's format: no think block, a turn ends <|im_end|> and a blank line
        assert "<think>" not in served and served.endswith("<|im_end|>\n\n<|im_start|>assistant\n")


def test_export_refuses_what_makes_no_checkpoint(broadcast, tmp_path):
    step, base = broadcast
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, says in (([str(empty), str(tmp_path / "a")], "no safetensors"),
                       ([str(step), str(base)], "exists"),
                       ([str(step), str(tmp_path / "b"), "--profile", "mine"], "--profile")):
        r = CliRunner().invoke(app, ["train", "export", *args, "--base", str(base)])
        assert r.exit_code == 2 and says in r.output, r.output
    r = CliRunner().invoke(app, ["train", "export", str(step), str(tmp_path / "c"), "--base", str(empty)])
    assert r.exit_code == 2 and "tokenizer.json" in r.output, r.output


def test_export_moves_when_asked(broadcast, tmp_path):
    step, base = broadcast
    out = tmp_path / "hf"
    r = CliRunner().invoke(app, ["train", "export", str(step), str(out), "--base", str(base), "--move"])
    assert r.exit_code == 0 and not step.exists() and (out / "model.safetensors").is_file(), r.output
