"""The plus tests' files: one a task, ``mbpp_<id>.py`` in a folder, a
comment header then ordinary assert lines.

What it guarantees: a file is written whole or not at all (atomically,
by rename); its header records the generator version (``GENERATOR``), the
candidate seed and ``task_hash`` (the task's reference, setup and tests);
``current`` gives a file's lines only while that header matches the task,
this ``GENERATOR`` and (if given) the seed, and ``load_tests`` raises
``DataError`` naming the command to run when there are none. Light: it
imports neither the sandbox nor the generator.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from glyph.data.mbpp import MbppTask
from glyph.errors import DataError

GENERATOR = 2  # bump whenever the same task and seed would give other tests
ENV_VAR = "GLYPH_PLUS_PATH"
DEFAULT_DIR = Path("artifacts") / "plus"


@dataclass
class TaskResult:
    """One task's generated plus tests (its file's lines) and what the header records of them."""

    task_id: int
    tests: list[str]
    stats: dict


def task_hash(task: MbppTask) -> str:
    """What a task's plus tests depend on: its reference, setup and tests."""
    blob = json.dumps([task.code, task.test_setup_code, list(task.test_list)])
    return hashlib.sha256(blob.encode()).hexdigest()


def file_name(task_id: int) -> str:
    return f"mbpp_{task_id}.py"


def header(task: MbppTask, seed: int, stats: dict) -> dict:
    return {"task": task.id, "generator": GENERATOR, "seed": seed, "task_sha256": task_hash(task), **stats}


def write_file(folder: Path, task: MbppTask, seed: int, result: TaskResult) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(task.task_id)
    meta = header(task, seed, {k: v for k, v in result.stats.items() if k != "seconds"})
    text = (f"# glyph plus tests for {task.id}: differential tests from its reference solution "
            f"(`glyph data plus`)\n# {json.dumps(meta, ensure_ascii=False)}\n"
            + "".join(line + "\n" for line in result.tests))
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_file(path: Path) -> tuple[dict, list[str]]:
    """(header, assert lines) of a plus file; ``DataError`` if malformed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable ({exc})") from None
    lines = text.splitlines()
    try:
        meta = json.loads(lines[1][2:])
    except (IndexError, ValueError):
        raise DataError(f"{path}: no glyph plus header") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: no glyph plus header")
    return meta, [ln for ln in lines[2:] if ln.strip()]


def current(folder: Path, task: MbppTask, seed: int | None = None) -> list[str] | None:
    """The plus tests in ``folder`` for ``task``, or None when there is no
    file for it, or it was generated for another reference, generator or seed."""
    path = folder / file_name(task.task_id)
    if not path.is_file():
        return None
    meta, lines = read_file(path)
    if meta.get("task_sha256") != task_hash(task) or meta.get("generator") != GENERATOR:
        return None
    if seed is not None and meta.get("seed") != seed:
        return None
    return lines


def resolve_dir(path: str | os.PathLike | None = None) -> Path:
    """The plus tests' folder: ``path``, else ``$GLYPH_PLUS_PATH``, else ``artifacts/plus``."""
    return Path(path or os.environ.get(ENV_VAR) or DEFAULT_DIR)


def load_tests(folder: str | os.PathLike | None, task: MbppTask) -> list[str]:
    """A task's plus tests for grading; ``DataError`` naming what to run when absent or stale."""
    d = resolve_dir(folder)
    lines = current(d, task)
    if lines is None:
        raise DataError(f"{d / file_name(task.task_id)}: no current plus tests for {task.id}; "
                        f"run `glyph data plus --out {d.parent}`")
    return lines
