"""MBPP task rows from a JSONL in the official schema.

Offline (tests, CI) the file comes in by path: ``GLYPH_MBPP_PATH`` or the
caller's option (``--mbpp-path`` for the ``glyph`` command,
``--env.taskset.data-path`` for ``vf-eval glyph-mbpp``: every loader takes the
``option`` to name, so the message points at what the user can change). A row
that does not match the schema is an error naming the file, the line and the
field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "GLYPH_MBPP_PATH"
CLI_OPTION = "--mbpp-path"  # the ``glyph`` command's; vf-eval's taskset passes its own


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


def resolve_path(path: str | os.PathLike | None = None, option: str = CLI_OPTION) -> Path:
    """The MBPP JSONL to read: ``path`` (given as ``option``), else ``$GLYPH_MBPP_PATH``."""
    chosen = path or os.environ.get(ENV_VAR)
    if not chosen:
        raise DataError(f"no MBPP data: set {ENV_VAR} to an MBPP JSONL in the official schema, "
                        f"or pass {option}")
    p = Path(chosen)
    if not p.is_file():
        raise DataError(f"{p}: no such file (from {option if path else ENV_VAR})")
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


# ---------------------------------------------------------------- official data

OFFICIAL_REPO = "google-research-datasets/mbpp"
OFFICIAL_REVISION = "4bb6404fdc6cacfda99d4ac4205087b89d32030c"
OFFICIAL_FILES = {
    "train": ("full/train-00000-of-00001.parquet",
              "09d125ca31edacb7800be8c67c45abff618faf0214ff551291817d06bdb914ae"),
    "validation": ("full/validation-00000-of-00001.parquet",
                   "3f0ec060987432d99fe8fb409d31e6c67445b208a01741c5583517c80a10fe80"),
    "test": ("full/test-00000-of-00001.parquet",
             "566fd53060ffba5766dace1d1e2f4c38906781526de222b0dfbdbc325b696c77"),
}


def sha256_file(path: str | os.PathLike) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_parquet(path: str | os.PathLike, expected_sha256: str | None = None) -> list[MbppTask]:
    """Rows of one official parquet file, after checking its SHA-256."""
    import pyarrow.parquet as pq

    p = Path(path)
    if expected_sha256 is not None:
        got = sha256_file(p)
        if got != expected_sha256:
            raise DataError(f"{p}: SHA-256 {got} does not match the pinned {expected_sha256}")
    tasks = []
    for i, row in enumerate(pq.read_table(p).to_pylist()):
        where = f"{p}: row {i}"
        for name, kind in _FIELDS.items():
            if not isinstance(row.get(name), kind):
                raise DataError(f"{where}: field {name!r} should be {kind.__name__}")
        tasks.append(MbppTask(row["task_id"], row["text"], row["code"], row["test_setup_code"],
                              tuple(row["test_list"]), tuple(row["challenge_test_list"])))
    return tasks


def download_official(cache_dir: str | os.PathLike | None = None,
                      option: str = CLI_OPTION) -> dict[str, Path]:
    """Fetch the official parquet files at the pinned revision (hub client);
    a failure is one line naming ``$GLYPH_MBPP_PATH`` and ``option``."""
    from huggingface_hub import hf_hub_download

    try:
        return {split: Path(hf_hub_download(OFFICIAL_REPO, filename, repo_type="dataset",
                                            revision=OFFICIAL_REVISION, cache_dir=cache_dir))
                for split, (filename, _) in OFFICIAL_FILES.items()}
    except Exception as exc:  # offline, hub down, proxy: one line on how to proceed
        raise DataError(f"could not download MBPP from the hub ({type(exc).__name__}); offline, set "
                        f"{ENV_VAR} to an MBPP JSONL in the official schema or pass {option}") from None


@dataclass(frozen=True)
class Source:
    """Where the tasks came from, with the hashes the manifest records."""

    kind: str  # "jsonl" or "official"
    files: dict  # name -> {"path", "sha256", "size"}
    tasks: tuple[MbppTask, ...]


def load_source(path: str | os.PathLike | None = None, official_files: dict[str, Path] | None = None,
                option: str = CLI_OPTION) -> Source:
    """``path`` (or ``$GLYPH_MBPP_PATH``) if given; otherwise the official
    parquet files (downloaded unless ``official_files`` are passed in).
    ``option`` is how the caller's user passes ``path``; errors name it."""
    chosen = path or os.environ.get(ENV_VAR)
    if chosen and official_files is None:
        p = resolve_path(path, option)
        return Source("jsonl", {p.name: {"sha256": sha256_file(p), "size": p.stat().st_size}},
                      tuple(load_jsonl(p)))
    files = official_files or download_official(option=option)
    tasks, meta = [], {}
    for split, (filename, digest) in OFFICIAL_FILES.items():
        tasks += load_parquet(files[split], digest)
        meta[filename] = {"sha256": digest, "size": Path(files[split]).stat().st_size}
    return Source("official", meta, tuple(sorted(tasks, key=lambda t: t.task_id)))


def data_problem(path: str | os.PathLike | None, option: str = CLI_OPTION) -> str | None:
    """One line on why ``path`` (else ``$GLYPH_MBPP_PATH``, else the official
    download) cannot give the study's splits, naming ``option``; None when it
    can. For config validators: vf-eval shows a validator's error as one
    config error naming the option, where an error in ``load`` is a traceback."""
    try:
        source = load_source(path, option=option)
        make_splits([t.task_id for t in source.tasks])
    except DataError as exc:
        return str(exc)
    except OSError as exc:
        return f"{path or os.environ.get(ENV_VAR)}: cannot read ({exc}); check {option}"
    return None


# ---------------------------------------------------------------- splits

TEST_IDS = range(11, 511)  # the official test split: the untouched 500-task final test
VALIDATION_IDS = range(511, 601)  # official validation: 50 move to the training pool
TRAIN_IDS = range(601, 975)
MOVED_TO_TRAIN = 50
SPLIT_NAMES = ("sft", "rl", "validation", "test")


def make_splits(task_ids, seed: int = 42) -> dict[str, list[int]]:
    """The study's splits, deterministic from ``seed``: test = official test
    (11-510); ``random.Random(seed).sample`` picks 50 of the 90 official
    validation ids for the training pool, the other 40 stay validation; the
    same generator shuffles the 424-task pool (official train + those 50),
    whose first half is SFT and second half RL."""
    import random

    have = set(task_ids)
    missing = [i for r in (TEST_IDS, VALIDATION_IDS, TRAIN_IDS) for i in r if i not in have]
    if missing:
        raise DataError(f"the data lacks {len(missing)} task ids the splits need (first: {missing[:5]})")
    rng = random.Random(seed)
    moved = sorted(rng.sample(list(VALIDATION_IDS), MOVED_TO_TRAIN))
    pool = sorted(list(TRAIN_IDS) + moved)
    rng.shuffle(pool)
    half = len(pool) // 2
    return {"sft": sorted(pool[:half]), "rl": sorted(pool[half:]),
            "validation": sorted(set(VALIDATION_IDS) - set(moved)), "test": list(TEST_IDS)}


# ---------------------------------------------------------------- task rows


def task_row(task: MbppTask, split: str, plus_tests: list[str] | None = None) -> dict:
    """One environment row: prompts per arm, the workspace blueprint, the
    hidden tests (trusted side only), ``plus_tests`` (the generated plus
    tests, ``glyph.tasks.plus``, graded after the hidden tests; trusted side
    only; None where not generated) and the reference solution (for the
    reference policies; never shown to the model).

    The budget is the harness's (``GlyphHarnessConfig.max_tool_calls``), not
    the task's: ``prompt`` is ``protocol.messages`` at the default budget,
    recorded as ``prompt_budget``; a harness with another budget builds its
    own from the same parts (``text`` and ``visible_tests``)."""
    from glyph import protocol

    return {
        "id": task.id,
        "task_id": task.task_id,
        "split": split,
        "text": task.text,
        "prompt": {arm: protocol.messages(arm, task.text, task.test_list) for arm in ("a", "b")},
        "prompt_budget": protocol.DEFAULT_BUDGET,
        "workspace": {protocol.SOLUTION_FILE: protocol.PLACEHOLDER},
        "visible_tests": list(task.test_list),
        "hidden": {"setup": task.test_setup_code, "tests": list(task.test_list),
                   "challenge_tests": list(task.challenge_test_list)},
        "plus_tests": None if plus_tests is None else list(plus_tests),
        "reference": task.code,
    }
