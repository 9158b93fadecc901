"""A flywheel run's directory: its configuration and every rollout and lesson, append-only.

``DIR/config.json``   the run's configuration (``options.RunConfig``). A run
                      on an existing DIR must have the same identity
                      (everything that changes results; not the tasks path
                      nor the call options: ``options.CALL``), else it is
                      refused with the differences named.
``DIR/rollouts.jsonl`` one line per finished rollout (scored or excluded),
                      keyed by (phase, round, task, k, lessons fingerprint).
``DIR/lessons.jsonl``  one line per lesson the writer wrote, keyed by (round,
                      cluster), so a resumed run reuses a model writer's text.

What it guarantees: a record is written as one line and flushed before the
next rollout is accounted for, so a crash loses at most the rollouts in
flight. A torn last line (a crash mid-write) is dropped on open and the
file repaired before anything is appended; a bad line anywhere else is an
error naming the file and line, never silently skipped. Every string is
stored ``glyph.text.encodable`` (replies, code, details and reasons are
text a model or its code controls), and the record kept in memory is the
stored one, so a resumed run reads what an uninterrupted one used; a
string read back is made encodable too (a file written elsewhere may hold
a JSON-escaped lone surrogate).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable

from glyph.errors import ConfigError, RunError
from glyph.flywheel.options import RunConfig
from glyph.text import encodable_data

Key = tuple[str, int, str, int, str]


class ConfigMismatch(ConfigError):
    pass


class StoreError(RunError):
    pass


def fingerprint(lessons: Iterable[str]) -> str:
    """A short stable name for a list of lessons in context (order matters)."""
    return hashlib.sha256(json.dumps(list(lessons)).encode()).hexdigest()[:16]


def key_of(r: dict) -> Key:
    return (r["phase"], r["round"], r["task"], r["k"], r["lessons"])


def _read_jsonl(path: Path, required: tuple[str, ...]) -> tuple[list[dict], str | None]:
    """The file's records, repairing a torn last line; (records, a note on any repair)."""
    if not path.exists():
        return [], None
    data = path.read_bytes()
    note = None
    end = data.rfind(b"\n") + 1
    if end < len(data):  # the last line has no newline: a crash during its write
        tail = data[end:]
        try:
            row = json.loads(tail)
            complete = isinstance(row, dict) and all(f in row for f in required)
        except ValueError:
            complete = False
        with path.open("r+b") as fh:
            if complete:
                fh.seek(0, 2)
                fh.write(b"\n")
                data += b"\n"
            else:
                fh.truncate(end)
                data = data[:end]
                note = f"{path}: dropped a torn last line ({len(tail)} bytes) left by an interrupted run"
    records = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise StoreError(f"{path}:{n}: not JSON ({exc}); the file is damaged") from exc
        if not isinstance(row, dict) or any(f not in row for f in required):
            raise StoreError(f"{path}:{n}: not a record of this file (fields {', '.join(required)})")
        records.append(encodable_data(row))
    return records, note


class Store:
    """A run directory opened for one configuration."""

    def __init__(self, out: str | Path, config: RunConfig, retry_excluded: bool = False) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.config = config
        self._check_config()
        self.notes: list[str] = []
        rows, note = _read_jsonl(self.out / "rollouts.jsonl", ("phase", "round", "task", "k", "lessons"))
        self.notes += [note] if note else []
        self.rollouts: dict[Key, dict] = {}
        for r in rows:  # the last record of a key wins
            if retry_excluded and r.get("excluded"):
                self.rollouts.pop(key_of(r), None)
            else:
                self.rollouts[key_of(r)] = r
        rows, note = _read_jsonl(self.out / "lessons.jsonl", ("round", "cluster"))
        self.notes += [note] if note else []
        self.lessons: dict[tuple[int, str], dict] = {}
        for r in rows:
            if not (retry_excluded and r.get("error")):
                self.lessons[(r["round"], r["cluster"])] = r
        self.reused = len(self.rollouts)
        self._rollouts_fh = (self.out / "rollouts.jsonl").open("a", encoding="utf-8")
        self._lessons_fh = (self.out / "lessons.jsonl").open("a", encoding="utf-8")

    def _check_config(self) -> None:
        path = self.out / "config.json"
        if not path.exists():
            if (self.out / "rollouts.jsonl").exists():
                raise ConfigMismatch(f"{self.out} holds rollouts.jsonl but no config.json: it is not a "
                                     "flywheel run directory this version can resume; use a new --out")
            path.write_text(json.dumps(self.config.stored(), indent=2) + "\n", encoding="utf-8")
            return
        try:
            stored = RunConfig.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigMismatch(f"{path}: not a flywheel configuration ({exc})") from exc
        a, b = stored.identity(), self.config.identity()
        diffs = [f"{k}: {a[k]!r} in {path.name}, {b[k]!r} now" for k in a if a[k] != b[k]]
        if diffs:
            raise ConfigMismatch(f"{self.out} holds a run with a different configuration, so it cannot be "
                                 "resumed with this one:\n  " + "\n  ".join(diffs)
                                 + "\nUse another --out, or rerun with the stored options.")

    def get(self, key: Key) -> dict | None:
        return self.rollouts.get(key)

    def put(self, record: dict) -> dict:
        """Store a rollout; returns it as stored (``encodable``)."""
        record = encodable_data(record)
        self._rollouts_fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._rollouts_fh.flush()
        self.rollouts[key_of(record)] = record
        return record

    def lesson(self, round_: int, cluster: str) -> dict | None:
        return self.lessons.get((round_, cluster))

    def put_lesson(self, record: dict) -> dict:
        """Store a lesson; returns it as stored (``encodable``)."""
        record = encodable_data(record)
        self._lessons_fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._lessons_fh.flush()
        self.lessons[(record["round"], record["cluster"])] = record
        return record

    def close(self) -> None:
        self._rollouts_fh.close()
        self._lessons_fh.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
