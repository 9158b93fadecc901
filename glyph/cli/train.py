"""``glyph train ...``: the one training command of glyph's recipe.

``glyph train rl @ configs/arm_b.toml`` and ``glyph train sft @ FILE`` run
PRIME-RL's own entry points (its pyproject's ``rl`` and ``sft`` scripts:
``prime_rl.entrypoints.rl:main``, ``prime_rl.entrypoints.sft:main``) with the
Python that runs glyph, every argument passed on unchanged. So the command
works wherever PRIME-RL imports in glyph's environment: a PRIME-RL checkout's
venv with glyph installed into it, or the offline tarball route with PRIME-RL
on ``PYTHONPATH`` (REPRODUCTION.md); and it runs from glyph's root, where the
configs' relative paths (``artifacts/``, ``outputs/``) resolve. glyph adds no
training logic: a PRIME-RL user's ``rl @ FILE`` is the same run.

``glyph train export`` turns a trained step's weight broadcast into a
checkpoint that speaks the profile's chat format (``glyph.export``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from glyph.cli.common import App, fail

app = App(no_args_is_help=True,
          help="Train with PRIME-RL's own entry points (rl, sft), and export a trained step.")

PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Every argument but ``-h`` / ``--help`` (this command's help) goes to PRIME-RL's entry point."""
ENTRY_POINTS = {"rl": "prime_rl.entrypoints.rl", "sft": "prime_rl.entrypoints.sft"}


def missing_prime_rl() -> str | None:
    """Why PRIME-RL's entry points cannot run here, or None."""
    try:
        found = importlib.util.find_spec("prime_rl.entrypoints") is not None
    except ModuleNotFoundError:
        found = False
    if found:
        return None
    return (f"PRIME-RL is not importable by {sys.executable}: run `glyph train` in the environment "
            "REPRODUCTION.md builds (a PRIME-RL checkout's venv with glyph installed, or PRIME-RL's src "
            "and packages/prime-rl-configs/src on PYTHONPATH)")


def run_entry_point(kind: str, args: list[str]) -> None:
    """Replace this process with ``python -m prime_rl.entrypoints.<kind> ARGS``."""
    why = missing_prime_rl()
    if why is not None:
        fail(why)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", ENTRY_POINTS[kind], *args])


@app.command("rl", context_settings=PASS_THROUGH)
def rl(ctx: typer.Context) -> None:
    """PRIME-RL's `rl` (trainer, orchestrator, inference): glyph train rl @ configs/arm_b.toml [OPTIONS].
    Every argument goes to it; its own options: python -m prime_rl.entrypoints.rl --help."""
    run_entry_point("rl", ctx.args)


@app.command("sft", context_settings=PASS_THROUGH)
def sft(ctx: typer.Context) -> None:
    """PRIME-RL's `sft`: glyph train sft @ configs/sft_arm_b.toml [OPTIONS]. Every argument goes to it;
    its own options: python -m prime_rl.entrypoints.sft --help."""
    run_entry_point("sft", ctx.args)


@app.command("export")
def export(
    step: Annotated[Path, typer.Argument(metavar="STEP", help="a run's outputs/<run>/broadcasts/step_N")],
    out: Annotated[Path, typer.Argument(metavar="OUT", help="the checkpoint folder to make (new)")],
    profile: Annotated[str, typer.Option("--profile", metavar="<study|glyph>",
                                         help="whose chat template the checkpoint carries")] = "study",
    base: Annotated[str, typer.Option("--base", help="the base model: hub name, or a local folder "
                                                     "offline")] = "Qwen/Qwen3-4B-Base",
    move: Annotated[bool, typer.Option("--move", help="move the weights instead of copying them")] = False,
) -> None:
    """Make STEP a checkpoint a server loads: its weights, the base model's config and tokenizer,
    the profile's chat template and <|im_end|> as EOS (as the study's checkpoints carried them)."""
    from glyph import export as exporting
    from glyph.render import PROFILES

    if profile not in PROFILES:
        fail(f"--profile is {profile!r}, not one of {', '.join(PROFILES)}")
    try:
        made = exporting.export(step, out, profile, base, move=move)
    except exporting.ExportError as exc:
        fail(str(exc))
    print(f"checkpoint: {made} (chat template: {profile}; EOS {exporting.EOS})")
