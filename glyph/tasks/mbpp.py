"""MBPP task rows from a JSONL in the official schema.

Offline (tests, CI) the file comes in by path: ``GLYPH_MBPP_PATH`` or
``--mbpp-path``. A row that does not match the schema is an error naming the
file, the line and the field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "GLYPH_MBPP_PATH"


class DataError(ValueError):
    """Bad or missing task data; the message names where."""


@dataclass(frozen=True)
class MbppTask:
    task_id: int
    text: str
    code: str
    test_setup_code: str
    test_list: tuple[str, ...]
    challenge_test_list: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"mbpp_{self.task_id}"

    def tests(self, challenge: bool = False) -> str:
        """The hidden tests as one program (the asserts, one a line)."""
        return "\n".join(self.challenge_test_list if challenge else self.test_list)


_FIELDS = {"task_id": int, "text": str, "code": str, "test_setup_code": str,
           "test_list": list, "challenge_test_list": list}


def resolve_path(path: str | os.PathLike | None = None) -> Path:
    """The MBPP JSONL to read: ``path``, else ``$GLYPH_MBPP_PATH``."""
    chosen = path or os.environ.get(ENV_VAR)
    if not chosen:
        raise DataError(f"no MBPP data: set {ENV_VAR} to an MBPP JSONL in the official schema, "
                        "or pass --mbpp-path")
    p = Path(chosen)
    if not p.is_file():
        raise DataError(f"{p}: no such file (from {'--mbpp-path' if path else ENV_VAR})")
    return p


def load_jsonl(path: str | os.PathLike) -> list[MbppTask]:
    p = Path(path)
    tasks, seen = [], {}
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                row = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise DataError(f"{where}: not a JSON object ({exc})") from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: not a JSON object")
            for name, kind in _FIELDS.items():
                if name not in row:
                    raise DataError(f"{where}: field {name!r} is missing")
                value = row[name]
                if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                    raise DataError(f"{where}: field {name!r} should be {kind.__name__}, "
                                    f"got {type(value).__name__}")
                if kind is list and not all(isinstance(t, str) for t in value):
                    raise DataError(f"{where}: field {name!r} should be a list of strings")
            if row["task_id"] in seen:
                raise DataError(f"{where}: task_id {row['task_id']} repeats line {seen[row['task_id']]}")
            seen[row["task_id"]] = lineno
            if not row["test_list"]:
                raise DataError(f"{where}: field 'test_list' is empty")
            tasks.append(MbppTask(row["task_id"], row["text"], row["code"], row["test_setup_code"],
                                  tuple(row["test_list"]), tuple(row["challenge_test_list"])))
    if not tasks:
        raise DataError(f"{p}: no rows")
    return tasks


def load(path: str | os.PathLike | None = None) -> dict[str, MbppTask]:
    """Tasks by id (``mbpp_<task_id>``)."""
    return {t.id: t for t in load_jsonl(resolve_path(path))}


def get_task(task_id: str, path: str | os.PathLike | None = None) -> MbppTask:
    tasks = load(path)
    if task_id not in tasks:
        raise DataError(f"unknown task id {task_id!r}: list the ids with `glyph data list`")
    return tasks[task_id]
