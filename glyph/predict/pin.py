"""The PRIME-RL pin and glyph's patches to it: what ``glyph prime-rl check``
reports and ``--apply`` does. Imports nothing from PRIME-RL.

The pins themselves are ``glyph.pins``'s (``configs/versions.toml``).

The patches live in ``patches/`` (packaged as ``glyph/_data/patches``) and are
applied with ``git apply``, which works on a git checkout and on a plain
source tree alike. A tree with no git metadata is recognised as the pin by
the SHA-256 of the files the patches change (before or after patching).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from glyph import pins
from glyph.errors import SetupError

PRIME_RL_COMMIT, PRIME_RL_TAG = pins.PRIME_RL_COMMIT, pins.PRIME_RL_TAG
VERIFIERS_COMMIT, VERIFIERS_VERSION = pins.VERIFIERS_COMMIT, pins.VERIFIERS_VERSION
PATCHES = ("prime-rl-algorithm-registry.patch", "prime-rl-ce-only-branches.patch")
# SHA-256 at the pin of every file the patches change: a tree without .git is at the pin iff these match
# (before the patches) or the patches reverse-apply.
PIN_FILES = {
    "packages/prime-rl-configs/src/prime_rl/configs/algorithm.py": (
        "2419eea0245c3074b76798eb3fd9229c09becf651e24ee5687e12a394ce492e2"
    ),
    "src/prime_rl/orchestrator/algo/__init__.py": (
        "fd36d11f33418543e9685785848d7bb16a2560ae6289370bf31a0b61b4a37e10"
    ),
    "src/prime_rl/orchestrator/trajectories.py": (
        "75818b0b5ed163ecb2500d700a24995329882df8edc22053e657f03b16adb375"
    ),
}


class PatchError(SetupError):
    pass


def patches_dir() -> Path:
    """``patches/`` in a checkout; the copy packaged in the wheel otherwise."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "patches", here / "_data" / "patches"):
        if all((candidate / name).is_file() for name in PATCHES):
            return candidate
    raise FileNotFoundError(
        f"glyph's PRIME-RL patches ({', '.join(PATCHES)}) are in neither patches/ nor glyph/_data/"
    )


def _git_apply(root: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess:
    # A source tree without .git must not be taken for a subdirectory of an enclosing repository.
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(root.parent))
    return subprocess.run(
        ["git", "apply", *flags, str(patch)], cwd=root, capture_output=True, text=True, env=env
    )


@dataclass(frozen=True)
class PatchState:
    name: str
    state: str  # "applied", "applies", "conflicts"
    detail: str = ""


@dataclass(frozen=True)
class Report:
    root: Path
    commit: str | None  # None: not a git checkout
    files_at_pin: (
        bool | None
    )  # for a tree without git: the patched files match the pin's (or the pin's + patches)
    patches: tuple[PatchState, ...]

    @property
    def at_pin(self) -> bool:
        return self.commit == PRIME_RL_COMMIT if self.commit is not None else bool(self.files_at_pin)

    @property
    def ok(self) -> bool:
        return self.at_pin and all(p.state != "conflicts" for p in self.patches)

    @property
    def applied(self) -> bool:
        return all(p.state == "applied" for p in self.patches)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def check(root: str | Path) -> Report:
    root = Path(root).resolve()
    if not (root / "src" / "prime_rl").is_dir():
        raise PatchError(f"{root} is not a PRIME-RL checkout (no src/prime_rl)")
    commit = None
    if (root / ".git").exists():
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
        commit = proc.stdout.strip() if proc.returncode == 0 else None
    states = []
    for name in PATCHES:
        patch = patches_dir() / name
        if _git_apply(root, patch, "--reverse", "--check").returncode == 0:
            states.append(PatchState(name, "applied"))
            continue
        proc = _git_apply(root, patch, "--check")
        states.append(
            PatchState(name, "applies")
            if proc.returncode == 0
            else PatchState(name, "conflicts", proc.stderr.strip().splitlines()[0] if proc.stderr else "")
        )
    files_at_pin = None
    if commit is None:
        pristine = all(_sha(root / rel) == sha for rel, sha in PIN_FILES.items())
        files_at_pin = pristine or all(s.state == "applied" for s in states)
    return Report(root, commit, files_at_pin, tuple(states))


def apply_patches(root: str | Path) -> Report:
    """Apply every patch not yet applied; raise ``PatchError`` if one does not apply."""
    report = check(root)
    for state in report.patches:
        if state.state == "conflicts":
            raise PatchError(f"{state.name} does not apply to {report.root}: {state.detail}")
    for state in report.patches:
        if state.state == "applies":
            proc = _git_apply(report.root, patches_dir() / state.name)
            if proc.returncode != 0:
                raise PatchError(f"{state.name} failed on {report.root}: {proc.stderr.strip()}")
    return check(root)
