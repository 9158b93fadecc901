"""``glyph data prepare`` and ``glyph data validate``: every generated file,
recorded in one manifest with its SHA-256 and size, and re-checked.

Layout of the output folder::

    manifest.json             source hashes, seed, split ids, counts, artifacts
    tasks/<split>.jsonl       environment rows (sft, rl, validation, test)
    sft/arm_a/train.jsonl     SFT traces, one {"messages": [...], ...} a line;
    sft/arm_b/train.jsonl     PRIME-RL's SFT reads the folder (data.name)
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from glyph.tasks import mbpp, sft

MANIFEST = "manifest.json"
EXPECTED_COUNTS = {"sft": 212, "rl": 212, "validation": 40, "test": 500}


class ValidationFailed(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{len(problems)} problem(s)")
        self.problems = problems


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise mbpp.DataError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
    return rows


def prepare(out: Path, mbpp_path=None, seed: int = 42, progress: bool = True) -> dict:
    """Build the splits, task rows and SFT traces into ``out``; return the manifest."""
    t0 = time.perf_counter()
    source = mbpp.load_source(mbpp_path)
    by_id = {t.task_id: t for t in source.tasks}
    splits = mbpp.make_splits(by_id, seed)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    for split, ids in splits.items():
        path = out / "tasks" / f"{split}.jsonl"
        _write_jsonl(path, [mbpp.task_row(by_id[i], split) for i in ids])
        files.append(path)
    traces, notes = sft.build_sft([by_id[i] for i in splits["sft"]], seed, progress=progress)
    for arm, rows in traces.items():
        path = out / "sft" / f"arm_{arm}" / "train.jsonl"
        _write_jsonl(path, rows)
        files.append(path)
    kinds = {arm: {k: sum(1 for r in rows if r["kind"] == k) for k in sorted({r["kind"] for r in rows})}
             for arm, rows in traces.items()}
    manifest = {
        "created_by": "glyph data prepare",
        "seed": seed,
        "source": {"kind": source.kind, "files": source.files,
                   "official": {"repo": mbpp.OFFICIAL_REPO, "revision": mbpp.OFFICIAL_REVISION}},
        "splits": splits,
        "counts": {k: len(v) for k, v in splits.items()},
        "sft": {"kinds": kinds, "notes": notes, "max_tokens": sft.MAX_TOKENS,
                "longest_tokens": max((r["tokens"] for rows in traces.values() for r in rows), default=0)},
        "artifacts": {str(p.relative_to(out)): {"sha256": mbpp.sha256_file(p), "size": p.stat().st_size}
                      for p in files},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def validate(out: Path, mbpp_path=None, progress: bool = True, jobs: int = 2) -> dict:
    """Re-check everything ``prepare`` wrote; raise ``ValidationFailed``
    naming each file and mismatch; return a summary when all holds."""
    problems: list[str] = []
    mpath = out / MANIFEST
    if not mpath.is_file():
        raise ValidationFailed([f"{mpath}: missing (run `glyph data prepare` first)"])
    try:
        manifest = json.loads(mpath.read_text())
        splits = {k: manifest["splits"][k] for k in mbpp.SPLIT_NAMES}
        artifacts = manifest["artifacts"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValidationFailed([f"{mpath}: unreadable manifest ({exc})"]) from None
    for rel, meta in artifacts.items():
        p = out / rel
        if not p.is_file():
            problems.append(f"{p}: missing")
            continue
        size, digest = p.stat().st_size, mbpp.sha256_file(p)
        if size != meta["size"]:
            problems.append(f"{p}: size {size} != {meta['size']} in the manifest")
        if digest != meta["sha256"]:
            problems.append(f"{p}: SHA-256 {digest[:16]}... != {meta['sha256'][:16]}... in the manifest")
    source = mbpp.load_source(mbpp_path)
    if source.files != manifest["source"]["files"]:
        problems.append(f"source data {sorted(source.files)} differs from the manifest's "
                        f"{sorted(manifest['source']['files'])} (hash or size)")
    by_id = {t.task_id: t for t in source.tasks}
    for name, want in EXPECTED_COUNTS.items():
        if len(splits[name]) != want:
            problems.append(f"{mpath}: split {name} has {len(splits[name])} ids, expected {want}")
    seen: dict[int, str] = {}
    for name, ids in splits.items():
        for i in ids:
            if i in seen:
                problems.append(f"{mpath}: task {i} is in both {seen[i]} and {name}")
            seen[i] = name
    if splits != mbpp.make_splits(by_id, manifest["seed"]):
        problems.append(f"{mpath}: splits differ from those seed {manifest['seed']} gives")
    for name, ids in splits.items():
        p = out / "tasks" / f"{name}.jsonl"
        if p.is_file():
            try:
                got = [r.get("task_id") for r in _read_jsonl(p)]
            except mbpp.DataError as exc:
                problems.append(str(exc))
                continue
            if got != ids:
                problems.append(f"{p}: task ids differ from the manifest's {name} split")
    if problems:  # no point grading data that is already wrong
        raise ValidationFailed(problems)
    problems += _check_gold([by_id[i] for ids in splits.values() for i in ids], progress, jobs)
    summary = {"tasks": sum(len(v) for v in splits.values()), "traces": 0, "longest_tokens": 0}
    from glyph.render import load_tokenizer
    tokenizer = load_tokenizer()
    for arm in ("a", "b"):
        p = out / "sft" / f"arm_{arm}" / "train.jsonl"
        try:
            rows = _read_jsonl(p)
        except (OSError, mbpp.DataError) as exc:
            problems.append(str(exc))
            continue
        summary["traces"] += len(rows)
        problems += _check_traces(p, rows, by_id, tokenizer, progress, jobs)
        summary["longest_tokens"] = max([summary["longest_tokens"]] + [r.get("tokens", 0) for r in rows])
    if problems:
        raise ValidationFailed(problems)
    return summary


def _check_gold(tasks, progress: bool, jobs: int) -> list[str]:
    from rich.progress import track

    from glyph.grading import grade

    def one(t):
        g = grade(t.code, t.test_setup_code, t.tests())
        return None if g.passed else f"{t.id}: the reference solution gets {g.outcome.value}: {g.detail}"

    with ThreadPoolExecutor(jobs) as pool:
        results = list(track(pool.map(one, tasks), total=len(tasks), description="grading gold solutions",
                             disable=not progress))
    return [r for r in results if r]


def _check_traces(path: Path, rows, by_id, tokenizer, progress: bool, jobs: int) -> list[str]:
    from rich.progress import track

    lock = threading.Lock()  # one tokenizer, used by one thread at a time

    def one(item):
        lineno, row = item
        try:
            task = by_id[row["task_id"]]
            problems = sft.replay(row, task)
            with lock:
                tokens = sft.count_tokens(row["messages"], tokenizer)
        except (KeyError, TypeError) as exc:
            return [f"{path}:{lineno}: malformed trace ({exc!r})"]
        if tokens > sft.MAX_TOKENS:
            problems.append(f"{tokens} tokens > {sft.MAX_TOKENS}")
        if tokens != row.get("tokens"):
            problems.append(f"recorded {row.get('tokens')} tokens, the tokenizer gives {tokens}")
        return [f"{path}:{lineno}: {p}" for p in problems]

    with ThreadPoolExecutor(jobs) as pool:
        results = list(track(pool.map(one, enumerate(rows, 1)), total=len(rows),
                             description=f"replaying {path.parent.name} traces", disable=not progress))
    return [p for r in results for p in r]
