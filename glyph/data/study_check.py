"""``glyph study check``: a data folder in the study's layout, compared with
the facts of the study's published data (``../shared/study/facts.json``,
``$GLYPH_STUDY_FACTS``).

The facts hold ids, labels and SHA-256 digests of canonical JSON
(``json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``,
UTF-8), none of the study's files. Four parts are compared:

* ``splits``: the SFT ids (``sft/arm_a/train.jsonl``), the RL ids
  (``arm_a_train.jsonl``) and the validation ids (``arm_a_validation.jsonl``);
  one count per id of the facts found in the same split (of 464);
* ``sft_a`` / ``sft_b``: per SFT task, its trace type, recovery mode,
  candidate outcome(s) and the digest of its ``messages`` (of 212 each);
* ``task_rows``: per row of the six task files, the digests of its
  ``prompt`` and ``test_code``, at the same place in the file (of 1504).

Each part names its first differing row and what differs in it; for a trace,
which of its parts (roles, system prompt, first user message, the assistant
turns, the tool messages) the facts' digests tell apart.

Besides, ``artifacts`` counts the files whose SHA-256 equals the one the
study's manifest records (``facts["artifact_sha256"]``): glyph writes the
study's files byte for byte. It is reported, not required: the four parts
decide the exit status.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from glyph.data import mbpp
from glyph.errors import DataError

ENV_VAR = "GLYPH_STUDY_FACTS"
SPLIT_FILES = {"sft_task_ids": "sft/arm_a/train.jsonl", "rl_train_task_ids": "arm_a_train.jsonl",
               "validation_task_ids": "arm_a_validation.jsonl"}
TASK_FILES = {f"{arm}_{split}": f"arm_{arm}_{split}.jsonl" for arm in "ab" for split in ("train", "validation", "test")}
_ROLE_LETTERS = {"system": "s", "user": "u", "assistant": "a", "tool": "t"}
_LABELS = ("trace_type", "recovery_mode", "candidate_outcome", "second_candidate_outcome")


def canonical_sha256(obj) -> str:
    text = json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Part:
    name: str
    equal: int = 0
    total: int = 0
    first_difference: str | None = None
    differing: list[str] = field(default_factory=list)

    def count(self, ok: bool, where: str, why: str = "") -> None:
        self.total += 1
        if ok:
            self.equal += 1
            return
        self.differing.append(where)
        if self.first_difference is None:
            self.first_difference = f"{where}: {why}"

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.equal == self.total

    def line(self) -> str:
        tail = "" if self.ok else f"; first difference: {self.first_difference or 'nothing to compare'}"
        return f"{self.name}: {self.equal}/{self.total} equal{tail}"


def resolve_facts(path: str | os.PathLike | None = None) -> Path:
    chosen = path or os.environ.get(ENV_VAR)
    if not chosen:
        raise DataError(f"no study facts: pass --facts or set {ENV_VAR} (the facts file: "
                             "../shared/study/facts.json)")
    p = Path(chosen)
    if not p.is_file():
        raise DataError(f"{p}: no such facts file (from {'--facts' if path else ENV_VAR})")
    return p


def load_facts(path: str | os.PathLike | None = None) -> dict:
    """The facts file (``resolve_facts``), parsed."""
    return json.loads(resolve_facts(path).read_text(encoding="utf-8"))


def _facts(facts: dict | str | os.PathLike | None) -> dict:
    """``facts`` as loaded (``load_facts``), or the path to load them from."""
    return facts if isinstance(facts, dict) else load_facts(facts)


def _rows(path: Path) -> list[dict]:
    """The rows of ``path``; none where it is absent (the check counts them missing)."""
    from glyph.data.prepare import read_jsonl

    return read_jsonl(path) if path.is_file() else []


def _trace_difference(messages: list, fact: dict) -> str:
    """Which part of a trace the facts' digests tell apart from ``messages``."""
    roles = "".join(_ROLE_LETTERS.get(m.get("role"), "?") for m in messages)
    if roles != fact["roles"]:
        return f"roles {roles} != {fact['roles']}"
    parts = []
    if canonical_sha256(messages[0]["content"]) != fact["system_sha256"]:
        parts.append("message 0 (system)")
    if canonical_sha256(messages[1]["content"]) != fact["first_user_sha256"]:
        parts.append("message 1 (user)")
    if canonical_sha256([m["content"] for m in messages if m["role"] == "assistant"]) != fact["assistant_turns_sha256"]:
        parts.append("the assistant turns (messages " + ", ".join(
            str(i) for i, m in enumerate(messages) if m["role"] == "assistant") + ")")
    if canonical_sha256([m["content"] for m in messages if m["role"] == "tool"]) != fact["observations_sha256"]:
        parts.append("the tool messages")
    return "messages differ: " + (", ".join(parts) or "in a key other than role and content")


def check(folder: Path, facts: dict | str | os.PathLike | None = None) -> list[Part]:
    """The four parts compared; each ``Part`` counts its equal rows.
    ``facts``: the loaded facts (``load_facts``) or the facts file's path."""
    facts = _facts(facts)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder (write one with `glyph data prepare --profile study --out`)")
    read: dict[str, list[dict]] = {}

    def rows_of(rel: str) -> list[dict]:  # each file parsed once
        if rel not in read:
            read[rel] = _rows(folder / rel)
        return read[rel]

    splits = Part("splits")
    for key, rel in SPLIT_FILES.items():
        mine = {r.get("task_id") for r in rows_of(rel)}
        for task_id in facts["splits"][key]:
            splits.count(task_id in mine, f"{key} task {task_id}", f"not in {rel}")
    parts = [splits]
    for arm in "ab":
        part = Part(f"sft_{arm}")
        rel = f"sft/arm_{arm}/train.jsonl"
        by_id = {r.get("task_id"): r for r in rows_of(rel)}
        for task_id, fact in facts["sft"][arm]["per_task"].items():
            where = f"{rel} task {task_id}"
            row = by_id.get(int(task_id))
            if row is None:
                part.count(False, where, "missing")
                continue
            labels = [k for k in _LABELS if row.get(k) != fact[k]]
            if labels:
                part.count(False, where, ", ".join(f"{k} {row.get(k)!r} != {fact[k]!r}" for k in labels))
                continue
            messages = row.get("messages") or []
            same = canonical_sha256(messages) == fact["messages_sha256"]
            part.count(same, where, "" if same else _trace_difference(messages, fact))
        parts.append(part)
    rows_part = Part("task_rows")
    for key, rel in TASK_FILES.items():
        fact = facts["task_rows"][key]
        rows = rows_of(rel)
        for index, task_id in enumerate(fact["task_ids"]):
            where = f"{rel} row {index + 1} (task {task_id})"
            row = rows[index] if index < len(rows) else None
            if row is None or row.get("task_id") != task_id:
                rows_part.count(False, where, "missing" if row is None else f"holds task {row.get('task_id')}")
                continue
            why = []
            if canonical_sha256(row.get("prompt")) != fact["prompt_sha256"][str(task_id)]:
                why.append("prompt differs")
            if text_sha256(row.get("test_code") or "") != fact["test_code_sha256"][str(task_id)]:
                why.append("test_code differs")
            rows_part.count(not why, where, ", ".join(why))
    parts.append(rows_part)
    return parts


def artifacts(folder: Path, facts: dict | str | os.PathLike | None = None) -> Part:
    """The files of ``folder`` byte-identical to the study's (by SHA-256).
    ``facts``: the loaded facts (``load_facts``) or the facts file's path."""
    facts = _facts(facts)
    part = Part("artifacts")
    for rel, digest in sorted(facts["artifact_sha256"].items()):
        p = folder / rel
        got = mbpp.sha256_file(p) if p.is_file() else None
        part.count(got == digest, rel, "missing" if got is None else "SHA-256 differs")
    return part


def summary_line(parts: list[Part]) -> str:
    by = {p.name: p for p in parts}
    return "study: " + ", ".join(f"{name} {by[name].equal}/{by[name].total}"
                                 for name in ("splits", "sft_a", "sft_b", "task_rows"))
