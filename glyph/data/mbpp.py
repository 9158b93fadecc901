"""MBPP task rows: the official parquet files, or a JSONL in the official schema.

Online the official parquet files are downloaded at a pinned revision, their
SHA-256 checked, and read through Hugging Face ``datasets``. Offline (tests,
CI) a JSONL comes in by path: ``GLYPH_MBPP_PATH`` or the caller's option
(``--mbpp-path`` for the ``glyph`` command, ``--env.taskset.data-path`` for
``vf-eval glyph-mbpp``: every loader takes the ``option`` to name, so the
message points at what the user can change).

Both go through one row schema (``task_from_row``): a row that does not match
it is an error naming the file, the place (``file:line`` in a JSONL,
``file: row N`` in a parquet file, N from 0 as in ``Dataset[N]``) and the
field; a task_id seen before in the same load (any file of it) is an error
naming both places.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from glyph import pins
from glyph.data import SEED
from glyph.errors import DataError

ENV_VAR = "GLYPH_MBPP_PATH"
CLI_OPTION = "--mbpp-path"  # the ``glyph`` command's; vf-eval's taskset passes its own


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


# The row schema, the official one (the dataset card's ``full`` config): every
# field required, extra fields ignored. Hand-written rather than a pydantic
# model: six flat fields, the messages are the ones users see (field, expected
# type, got type), and pydantic's strict mode would need its error locations
# translated back into them.
_FIELDS = {"task_id": int, "text": str, "code": str, "test_setup_code": str,
           "test_list": list, "challenge_test_list": list}


def task_from_row(row: object, where: str) -> MbppTask:
    """One raw row (a dict, as read from either format) as a task, or a
    ``DataError`` naming ``where`` and the field: each field present with its
    type (a bool is not an int), the test lists lists of strings, ``test_list``
    not empty."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: not an object with the fields {', '.join(_FIELDS)}")
    for name, kind in _FIELDS.items():
        if name not in row:
            raise DataError(f"{where}: field {name!r} is missing")
        value = row[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise DataError(f"{where}: field {name!r} should be {kind.__name__}, "
                            f"got {type(value).__name__}")
        if kind is list and not all(isinstance(t, str) for t in value):
            raise DataError(f"{where}: field {name!r} should be a list of strings")
    if not row["test_list"]:
        raise DataError(f"{where}: field 'test_list' is empty")
    return MbppTask(row["task_id"], row["text"], row["code"], row["test_setup_code"],
                    tuple(row["test_list"]), tuple(row["challenge_test_list"]))


def _tasks(rows: Iterable[tuple[str, object]], source: Path, seen: dict[int, str]) -> list[MbppTask]:
    """The tasks of one file's ``(where, row)`` pairs; ``seen`` (task_id ->
    where) is shared by the files of one load, so an id repeated in another
    file is an error too. A file without rows is an error."""
    tasks = []
    for where, row in rows:
        task = task_from_row(row, where)
        if task.task_id in seen:
            raise DataError(f"{where}: task_id {task.task_id} repeats {seen[task.task_id]}")
        seen[task.task_id] = where
        tasks.append(task)
    if not tasks:
        raise DataError(f"{source}: no rows")
    return tasks


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


def _jsonl_rows(p: Path) -> Iterator[tuple[str, object]]:
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
            yield where, row


def load_jsonl(path: str | os.PathLike) -> list[MbppTask]:
    """The tasks of a JSONL in the official schema, one object a line."""
    p = Path(path)
    return _tasks(_jsonl_rows(p), p, {})


def load(path: str | os.PathLike | None = None) -> dict[str, MbppTask]:
    """Tasks by id (``mbpp_<task_id>``)."""
    return {t.id: t for t in load_jsonl(resolve_path(path))}


def get_task(task_id: str, path: str | os.PathLike | None = None) -> MbppTask:
    tasks = load(path)
    if task_id not in tasks:
        raise DataError(f"unknown task id {task_id!r}: list the ids with `glyph data list`")
    return tasks[task_id]


# ---------------------------------------------------------------- official data

OFFICIAL_REPO, OFFICIAL_REVISION, OFFICIAL_FILES = pins.MBPP_REPO, pins.MBPP_REVISION, pins.MBPP_FILES


def sha256_file(path: str | os.PathLike) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_sha256(p: Path, expected: str) -> None:
    got = sha256_file(p)
    if got != expected:
        raise DataError(f"{p}: SHA-256 {got} does not match the pinned {expected}")


def _parquet_rows(p: Path) -> Iterator[tuple[str, object]]:
    """The rows of a parquet file, read through ``datasets``
    (``Dataset.from_parquet``). The Arrow cache ``datasets`` writes first goes
    to a temporary directory, removed on return, and the rows are read into
    memory (``keep_in_memory``): a read leaves nothing behind and needs no
    network."""
    import datasets
    from datasets.exceptions import DatasetsError
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # "Generating train split" for a few hundred rows: noise
    try:
        with tempfile.TemporaryDirectory(prefix="glyph-mbpp-") as cache:
            rows = datasets.Dataset.from_parquet(str(p), keep_in_memory=True, cache_dir=cache).to_list()
    # pyarrow's errors are OSError/ValueError/TypeError/NotImplementedError subclasses
    # (ArrowInvalid is a ValueError); datasets wraps some in DatasetGenerationError
    except (OSError, ValueError, TypeError, NotImplementedError, DatasetsError) as exc:
        while exc.__cause__ is not None:
            exc = exc.__cause__
        detail = (str(exc).strip().splitlines() or [""])[0]
        raise DataError(f"{p}: not a readable parquet file ({type(exc).__name__}: {detail})") from None
    finally:
        if not quiet:
            enable_progress_bars()
    for i, row in enumerate(rows):
        yield f"{p}: row {i}", row


def load_parquet(path: str | os.PathLike, expected_sha256: str | None = None,
                 seen: dict[int, str] | None = None) -> list[MbppTask]:
    """The tasks of one parquet file in the official schema, after checking
    its SHA-256 against ``expected_sha256`` (when given). ``seen`` (task_id ->
    where) is shared by the files of one load: an id seen in another is an error."""
    p = Path(path)
    if expected_sha256 is not None:
        _check_sha256(p, expected_sha256)
    return _tasks(_parquet_rows(p), p, {} if seen is None else seen)


def load_official(files: dict[str, str | os.PathLike]) -> list[MbppTask]:
    """The tasks of the official parquet files (split -> path, the splits of
    ``OFFICIAL_FILES``), sorted by task_id: every file's SHA-256 checked
    against its pin before any is read; a task_id in two files is an error."""
    paths = {split: Path(files[split]) for split in OFFICIAL_FILES}
    for split, (_, digest) in OFFICIAL_FILES.items():
        _check_sha256(paths[split], digest)
    seen: dict[int, str] = {}
    tasks = [t for split in OFFICIAL_FILES for t in load_parquet(paths[split], seen=seen)]
    return sorted(tasks, key=lambda t: t.task_id)


def download_official(cache_dir: str | os.PathLike | None = None,
                      option: str = CLI_OPTION) -> dict[str, Path]:
    """Fetch the official parquet files at the pinned revision (hub client);
    a failure is one line naming ``$GLYPH_MBPP_PATH`` and ``option``. When the
    hub cannot be reached (``glyph.data.hub``: a two-second check) or
    ``HF_HUB_OFFLINE`` is set, only the local hub cache is read, so an
    offline machine gets that line in seconds, not after the client's retries."""
    from huggingface_hub import hf_hub_download

    from glyph.data import hub

    why = "HF_HUB_OFFLINE is set" if hub.offline() else hub.unreachable()
    try:
        return {split: Path(hf_hub_download(OFFICIAL_REPO, filename, repo_type="dataset",
                                            revision=OFFICIAL_REVISION, cache_dir=cache_dir,
                                            local_files_only=why is not None))
                for split, (filename, _) in OFFICIAL_FILES.items()}
    except Exception as exc:  # offline, hub down, proxy: one line on how to proceed
        cause = f"{why}; not in the local hub cache" if why else type(exc).__name__
        raise DataError(f"could not download MBPP from the hub ({cause}); offline, set "
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
    tasks = load_official(files)
    meta = {filename: {"sha256": digest, "size": Path(files[split]).stat().st_size}
            for split, (filename, digest) in OFFICIAL_FILES.items()}
    return Source("official", meta, tuple(tasks))


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


def make_splits(task_ids, seed: int = SEED) -> dict[str, list[int]]:
    """glyph's splits (of the study's sizes; not the study's draw, which is
    ``glyph.data.study.make_splits``), deterministic from ``seed``: test = official test
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
    tests, ``glyph.data.plus``, graded after the hidden tests; trusted side
    only; None where not generated) and the reference solution (for the
    reference policies; never shown to the model).

    The budget is the harness's (``GlyphHarnessConfig.max_tool_calls``), not
    the task's: ``prompt`` is ``protocol.messages`` at the default budget,
    recorded as ``prompt_budget``; a harness with another budget builds its
    own from the same parts (``text`` and ``visible_tests``)."""
    from glyph.agent.profiles import glyph as protocol

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
