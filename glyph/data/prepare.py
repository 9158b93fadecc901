"""``glyph data prepare`` and ``glyph data validate``: every generated file,
recorded in one manifest with its SHA-256 and size, and re-checked.

Layout of the output folder::

    manifest.json             source hashes, seed, split ids, counts, artifacts
    tasks/<split>.jsonl       environment rows (sft, rl, validation, test)
    sft/arm_a/train.jsonl     SFT traces, one {"messages": [...], ...} a line;
    sft/arm_b/train.jsonl     PRIME-RL's SFT reads the folder (data.name)
    plus/mbpp_<id>.py         plus tests (``glyph.data.plus``), one file per task
                              of the source; each row's ``plus_tests`` holds its lines

Each trace records ``tokens``, the length of its SFT sample under glyph's one
renderer (``glyph.render``: the ``renderers`` Qwen3 renderer, thinking off,
as PRIME-RL's ``[renderer]``); the manifest records the renderer, the limit
(``sft.MAX_TOKENS``, the SFT ``seq_len``) and the longest trace of each arm.
``validate`` measures every trace again: one over the limit, or whose length
differs from the recorded one, is named.

Plus tests (``prepare(plus=...)``, ``glyph data prepare`` by default, or
``glyph data plus`` on a prepared folder): their files are artifacts like the
others, hashed in the manifest, whose ``plus`` section holds the counts.
``validate`` re-checks that each file is current for its task, that the
rows carry its lines, that every line is one fast-path assert, and grades
every reference solution on its visible tests followed by its plus tests.

AGAIN_ALONE: a grading's outcome can hang on the wall clock (a run that hits
its time limit while the machine is loaded, the two worker threads included),
so a gold solution or trace that ``validate`` finds wrong in its parallel pass
is checked once more, alone, with ``gold.second_look``'s limits (a longer wall
clock, the same CPU limit), and only what it finds again is reported. A CI
run saw gold ``mbpp_123`` (3.7 s of CPU) stopped at its 20 s wall limit after
3.47 s of CPU, alone at the unstretched limit: the machine, not the data, ran
out. Wrong data is found both times.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from glyph.data import mbpp, plus, sft
from glyph.data.gold import GOLD_LIMITS, second_look
from glyph.data.plus.generate import generate as generate_plus
from glyph.errors import DataError
from glyph.render import OFFLINE, load_tokenizer
from glyph.sandbox import Limits

MANIFEST = "manifest.json"
PLUS_DIR = "plus"
EXPECTED_COUNTS = {"sft": 212, "rl": 212, "validation": 40, "test": 500}


class ValidationFailed(Exception):
    """The problems ``validate`` found; the message names the first few (a test log shows them)."""

    SHOWN = 5

    def __init__(self, problems: list[str]) -> None:
        more = f"\n... and {len(problems) - self.SHOWN} more" if len(problems) > self.SHOWN else ""
        super().__init__(f"{len(problems)} problem(s):\n" + "\n".join(problems[:self.SHOWN]) + more)
        self.problems = problems


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file; a line that is not JSON is a ``DataError`` naming it."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
    return rows


def prepare(out: Path, mbpp_path=None, seed: int = mbpp.SEED, progress: bool = True,
            plus_tasks: bool | list[str] = False, jobs: int | None = None) -> dict:
    """Build the splits, task rows and SFT traces into ``out``; return the
    manifest. ``plus_tasks``: True generates (or reuses, ``glyph.data.plus``)
    plus tests for every task of the source, a list of ids for those only."""
    t0 = time.perf_counter()
    source = mbpp.load_source(mbpp_path)
    by_id = {t.task_id: t for t in source.tasks}
    splits = mbpp.make_splits(by_id, seed)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    plus_summary, plus_tests = None, {}
    if plus_tasks:
        plus_summary, plus_tests = _generate_plus(out, source, seed, plus_tasks, jobs, progress)
        files += [out / PLUS_DIR / plus.file_name(i) for i in sorted(plus_tests)]
    for split, ids in splits.items():
        path = out / "tasks" / f"{split}.jsonl"
        _write_jsonl(path, [mbpp.task_row(by_id[i], split, plus_tests=plus_tests.get(i)) for i in ids])
        files.append(path)
    traces, notes = sft.build_sft([by_id[i] for i in splits["sft"]], seed, progress=progress)
    for arm, rows in traces.items():
        path = out / "sft" / f"arm_{arm}" / "train.jsonl"
        _write_jsonl(path, rows)
        files.append(path)
    kinds = {arm: {k: sum(1 for r in rows if r["kind"] == k) for k in sorted({r["kind"] for r in rows})}
             for arm, rows in traces.items()}
    longest = {arm: _longest(rows) for arm, rows in traces.items()}
    manifest = {
        "created_by": "glyph data prepare",
        "seed": seed,
        "source": {"kind": source.kind, "files": source.files,
                   "official": {"repo": mbpp.OFFICIAL_REPO, "revision": mbpp.OFFICIAL_REVISION}},
        "splits": splits,
        "counts": {k: len(v) for k, v in splits.items()},
        "sft": {"kinds": kinds, "notes": notes, "renderer": renderer_record(), "tokenizer": OFFLINE,
                "max_tokens": sft.MAX_TOKENS, "longest": longest,
                "longest_tokens": max((v["tokens"] for v in longest.values()), default=0)},
        "artifacts": {str(p.relative_to(out)): {"sha256": mbpp.sha256_file(p), "size": p.stat().st_size}
                      for p in files},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if plus_summary is not None:
        manifest["plus"] = plus_summary
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _generate_plus(out: Path, source: mbpp.Source, seed: int, which: bool | list[str], jobs: int | None,
                   progress: bool) -> tuple[dict, dict[int, list[str]]]:
    """Generate (or reuse) plus tests into ``out/plus``; (summary, lines by task id)."""
    by_name = {t.id: t for t in source.tasks}
    if which is True:
        chosen = list(source.tasks)
    else:
        unknown = [i for i in which if i not in by_name]
        if unknown:
            raise DataError(f"unknown task ids {unknown[:5]}: list the ids with `glyph data list`")
        chosen = [by_name[i] for i in dict.fromkeys(which)]
    folder = out / PLUS_DIR
    summary = generate_plus(chosen, folder, seed, jobs=jobs, progress=progress)
    return summary, {t.task_id: plus.current(folder, t, seed) for t in chosen}


def glyph_layout(manifest: object) -> bool:
    """Whether ``manifest`` is one ``prepare`` wrote (glyph's layout: tasks/, sft/, plus/); another
    profile's preparation names its profile there (the study's: ``glyph.data.study.prepare``)."""
    return isinstance(manifest, dict) and "profile" not in manifest


def add_plus(out: Path, mbpp_path=None, seed: int | None = None, tasks: list[str] | None = None,
             jobs: int | None = None, progress: bool = True) -> dict:
    """``glyph data plus``: generate (resumably) the plus tests into
    ``out/plus``; on a prepared folder, also put them in the task rows and
    the manifest (hashes, counts); a folder of the study profile keeps the
    study's files as they are (the plus tests go into ``out/plus`` only, where
    ``--env.taskset.plus-path`` reads them). Returns the plus summary."""
    source = mbpp.load_source(mbpp_path)
    mpath = out / MANIFEST
    manifest = json.loads(mpath.read_text()) if mpath.is_file() else None
    if not glyph_layout(manifest):
        manifest = None
    if seed is None:
        seed = manifest["seed"] if manifest else mbpp.SEED
    if manifest is not None and manifest["seed"] != seed:
        raise DataError(f"{mpath}: prepared with seed {manifest['seed']}, not {seed}")
    if manifest is not None and tasks:  # the rows must stay complete: keep what is already there
        tasks = sorted({*tasks, *(k for k in (manifest.get("plus") or {}).get("kept", {}))})
    summary, lines = _generate_plus(out, source, seed, tasks or True, jobs, progress)
    if manifest is None:
        return summary
    by_id = {t.task_id: t for t in source.tasks}
    artifacts = {k: v for k, v in manifest["artifacts"].items() if not k.startswith(PLUS_DIR + "/")}
    for split, ids in manifest["splits"].items():
        path = out / "tasks" / f"{split}.jsonl"
        _write_jsonl(path, [mbpp.task_row(by_id[i], split, plus_tests=lines.get(i)) for i in ids])
    for rel in [f"tasks/{s}.jsonl" for s in manifest["splits"]] + [f"{PLUS_DIR}/{plus.file_name(i)}"
                                                                    for i in sorted(lines)]:
        artifacts[rel] = {"sha256": mbpp.sha256_file(out / rel), "size": (out / rel).stat().st_size}
    manifest["artifacts"] = artifacts
    manifest["plus"] = summary
    mpath.write_text(json.dumps(manifest, indent=2) + "\n")
    return summary


def renderer_record() -> dict:
    """The renderer trace lengths are measured with, as the manifest records it."""
    from importlib.metadata import version

    from glyph.render import RENDERER
    return {"package": "renderers", "version": version("renderers"), **RENDERER}


def _longest(rows: list[dict]) -> dict:
    row = max(rows, key=lambda r: r["tokens"], default=None)
    return {"task_id": row["task_id"], "tokens": row["tokens"]} if row else {"task_id": None, "tokens": 0}


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
    plus_lines = _check_plus_files(out, manifest, by_id, problems)
    for name, ids in splits.items():
        p = out / "tasks" / f"{name}.jsonl"
        if p.is_file():
            try:
                rows = read_jsonl(p)
            except DataError as exc:
                problems.append(str(exc))
                continue
            if [r.get("task_id") for r in rows] != ids:
                problems.append(f"{p}: task ids differ from the manifest's {name} split")
            for lineno, r in enumerate(rows, 1):
                if r.get("plus_tests") != plus_lines.get(r.get("task_id")):
                    problems.append(f"{p}:{lineno}: plus_tests differ from {PLUS_DIR}/"
                                    f"{plus.file_name(r.get('task_id'))}")
    if problems:  # no point grading data that is already wrong
        raise ValidationFailed(problems)
    graded = {i for ids in splits.values() for i in ids} | set(plus_lines)
    problems += _check_gold([by_id[i] for i in sorted(graded)], progress, jobs, plus_lines)
    summary = {"tasks": sum(len(v) for v in splits.values()), "traces": 0, "longest": {}, "longest_tokens": 0,
               "plus": {"tasks": len(plus_lines), "tests": sum(len(v) for v in plus_lines.values())}}
    recorded = manifest.get("sft", {})
    used, now = recorded.get("renderer") or {}, renderer_record()
    # Another `renderers` release may stand in: every length is measured again below.
    if {k: v for k, v in used.items() if k != "version"} != {k: v for k, v in now.items() if k != "version"}:
        problems.append(f"{mpath}: traces were measured with renderer {used}, glyph renders with {now}")
    tokenizer = load_tokenizer(OFFLINE)
    for arm in ("a", "b"):
        p = out / "sft" / f"arm_{arm}" / "train.jsonl"
        try:
            rows = read_jsonl(p)
        except (OSError, DataError) as exc:
            problems.append(str(exc))
            continue
        summary["traces"] += len(rows)
        trace_problems, lengths = _check_traces(p, rows, by_id, tokenizer, progress, jobs)
        problems += trace_problems
        if trace_problems:
            continue
        measured = _longest([dict(r, tokens=n) for r, n in zip(rows, lengths)])
        if recorded.get("longest", {}).get(arm) != measured:
            problems.append(f"{mpath}: arm {arm}'s longest trace is {measured}, "
                            f"the manifest says {recorded.get('longest', {}).get(arm)}")
        summary["longest"][arm] = measured
        summary["longest_tokens"] = max(summary["longest_tokens"], measured["tokens"])
    if problems:
        raise ValidationFailed(problems)
    return summary


def _check_plus_files(out: Path, manifest: dict, by_id: dict, problems: list[str]) -> dict[int, list[str]]:
    """Each plus file the manifest lists is current for its task and seed,
    and its lines (after the visible tests) compile to fast-path asserts
    with literal expected values. Returns the lines by task id."""
    from glyph.grading import InvalidTests, compile_tests, solution_bindings

    lines: dict[int, list[str]] = {}
    if "plus" not in manifest:
        return lines
    folder = out / PLUS_DIR
    for rel in manifest["artifacts"]:
        if not rel.startswith(PLUS_DIR + "/"):
            continue
        path = out / rel
        try:
            task = by_id[int(Path(rel).stem.removeprefix("mbpp_"))]
        except (KeyError, ValueError):
            problems.append(f"{path}: names no task of the source")
            continue
        try:
            got = plus.current(folder, task, manifest["seed"]) if path.is_file() else None
        except DataError as exc:
            problems.append(str(exc))
            continue
        if got is None:
            if path.is_file():
                problems.append(f"{path}: generated for another version of {task.id}, generator or seed")
            continue
        lines[task.task_id] = got
        if not got:
            continue
        try:
            suite = compile_tests(task.test_setup_code, "\n".join(list(task.test_list) + got),
                                  solution_bindings(task.code))
        except InvalidTests as exc:
            problems.append(f"{path}: {exc}")
            continue
        plus_checks = suite.checks[len(task.test_list):]
        if suite.program is not None or len(plus_checks) != len(got) or \
                any(c.expected_expr is not None for c in plus_checks):
            problems.append(f"{path}: not one fast-path assert with a literal expected value per line")
    kept = {by_id[i].id: len(v) for i, v in lines.items()}
    if manifest["plus"].get("kept") != kept:
        problems.append(f"{out / MANIFEST}: plus counts differ from the plus files")
    return lines


def _check_gold(tasks, progress: bool, jobs: int, plus_lines: dict[int, list[str]] | None = None,
                limits: Limits = GOLD_LIMITS) -> list[str]:
    """Every reference solution passes its tests (followed by its plus tests, where it has some)."""
    from rich.progress import track

    from glyph.grading import grade

    plus_lines = plus_lines or {}

    def one(t, limits=limits):
        extra = plus_lines.get(t.task_id) or []
        g = grade(t.code, t.test_setup_code, "\n".join(list(t.test_list) + extra), limits=limits)
        what = " (with its plus tests)" if extra else ""
        return None if g.passed else f"{t.id}: the reference solution gets {g.outcome.value}{what}: {g.detail}"

    with ThreadPoolExecutor(jobs) as pool:
        results = list(track(pool.map(one, tasks), total=len(tasks), description="grading gold solutions",
                             disable=not progress))
    results = [one(t, second_look(limits)) if r else r for t, r in zip(tasks, results)]  # AGAIN_ALONE
    return [r for r in results if r]


def _check_traces(path: Path, rows, by_id, tokenizer, progress: bool,
                  jobs: int) -> tuple[list[str], list[int | None]]:
    """Replay and re-measure each trace: (problems, measured token counts)."""
    from rich.progress import track

    lock = threading.Lock()  # one tokenizer, used by one thread at a time

    def one(item, limits=sft.LIMITS):
        lineno, row = item
        try:
            task = by_id[row["task_id"]]
            name = f"task {row['task_id']} arm {row['arm']}"
            problems = sft.replay(row, task, limits)
            with lock:
                tokens = sft.count_tokens(row["messages"], tokenizer)
        except (KeyError, TypeError, ValueError) as exc:
            return [f"{path}:{lineno}: malformed trace ({exc!r})"], None
        if tokens > sft.MAX_TOKENS:
            problems.append(f"{name}: {tokens} tokens > {sft.MAX_TOKENS} (the SFT seq_len)")
        if tokens != row.get("tokens"):
            problems.append(f"{name}: recorded {row.get('tokens')} tokens, the renderer gives {tokens}")
        return [f"{path}:{lineno}: {p}" for p in problems], tokens

    items = list(enumerate(rows, 1))
    with ThreadPoolExecutor(jobs) as pool:
        results = list(track(pool.map(one, items), total=len(rows),
                             description=f"replaying {path.parent.name} traces", disable=not progress))
    results = [one(item, second_look(sft.LIMITS)) if found else (found, n)  # AGAIN_ALONE
               for item, (found, n) in zip(items, results)]
    return [p for r, _ in results for p in r], [n for _, n in results]
