"""`glyph prime-rl check PATH [--apply]` on PRIME-RL's source at the pin (../shared/vendor)."""

from __future__ import annotations

import subprocess
import sys
import tarfile

import pinstack
import pytest

VENDOR = pinstack.vendor_dir()
pytestmark = pytest.mark.skipif(
    VENDOR is None, reason="PRIME-RL's source at the pin is not in ../shared/vendor"
)


def glyph(*args):
    return subprocess.run(
        [sys.executable, "-m", "glyph.cli.app", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def tree(tmp_path):
    with tarfile.open(VENDOR / pinstack.PRIME_RL_TARBALL) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path


def test_check_then_apply_on_the_pins_source(tree):
    target = tree / "src/prime_rl/orchestrator/trajectories.py"
    before = target.read_text()
    proc = glyph("prime-rl", "check", str(tree))
    assert proc.returncode == 1 and proc.stdout.count("applies") == 2 and "match the pin" in proc.stdout
    assert target.read_text() == before  # check changes nothing
    proc = glyph("prime-rl", "check", str(tree), "--apply")
    assert proc.returncode == 0 and proc.stdout.count("applied") == 2 and "ready" in proc.stdout, proc.stdout
    assert "_carries_loss_weights" in target.read_text()
    proc = glyph("prime-rl", "check", str(tree), "--apply")  # idempotent
    assert proc.returncode == 0 and proc.stdout.count("applied") == 2


def test_a_tree_that_moved_on_is_refused(tree):
    target = tree / "src/prime_rl/orchestrator/trajectories.py"
    target.write_text(target.read_text().replace("def iter_trainable_branches", "def iter_branches"))
    proc = glyph("prime-rl", "check", str(tree), "--apply")
    assert proc.returncode == 2 and "does not apply" in proc.stderr
    proc = glyph("prime-rl", "check", str(tree))
    assert proc.returncode == 1 and "conflicts" in proc.stdout and "differ from the pin" in proc.stdout


def test_a_git_checkout_at_another_commit_is_flagged(tree):
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=tree, check=True, env=env)
    proc = glyph("prime-rl", "check", str(tree))
    assert proc.returncode == 1 and "the pin is 559b447" in proc.stdout.replace("\n", "")
    assert "tested against PRIME-RL" in proc.stderr


def test_not_a_prime_rl_checkout(tmp_path):
    proc = glyph("prime-rl", "check", str(tmp_path))
    assert proc.returncode == 2 and "not a PRIME-RL checkout" in proc.stderr
