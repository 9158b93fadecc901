"""The PREDICT study's data, rebuilt: its splits, task rows and SFT traces
(``glyph data prepare --profile study``).

What the study's pipeline does, as glyph does it here (the protocol texts
are ``glyph.agent.study``'s; this module is the algorithm):

* **Text.** Task text, reference code, setup code and each test have CRLF
  (and lone CR) turned into LF and are stripped; the code gets one trailing
  newline back; the test code is the setup followed by the tests, one a line.
* **Splits.** Each task is ordered by the hex SHA-256 of
  ``f"{seed}\\0{task_id}\\0{text}"`` (ties by task id). The first 50 official
  validation tasks in that order join official train (601-974) in the
  training pool; the other 40 are validation. The pool in the same order:
  the first 212 are SFT, the next 212 RL. Test is official test (11-510) in
  task-id order. SFT, RL and validation rows are written in key order.
* **Recoveries.** The SFT tasks are visited in key order. While fewer than
  20 two-step recoveries are kept, a task is offered one: the first failing
  mutation A, paired with the first later failing mutation B whose block of
  lines (from the lower to the higher of the two lines) differs between A's
  code and B's and occurs once in A's code; it is kept if its ``deep_visible``
  Arm B trace fits ``SFT_MAX_TOKENS`` under the study's chat format. Else,
  while fewer than 50 one-step recoveries are kept, the first failing
  mutation is offered the same way (``visible`` trace). The visit stops when
  both quotas are full. Modes alternate in the order kept: shadow, visible,
  ... and deep_shadow, deep_visible, ...
* **Mutations.** Every token of the reference code, in source order, that
  the study's table (``study.MUTATIONS``) replaces, or a decimal integer
  literal (n -> n + 1); never on a ``def``/``import``/``from`` line, on a
  line that occurs twice, where the changed line already occurs, or where
  the mutated code would hold the changed line twice.
* **Grading.** A mutation fails when glyph's grader (``glyph.grading.grade``,
  in the sandbox, with the study's verdicts: ``glyph.semantics.STUDY``) gives
  it any outcome but PASS, under the study's 5 s limit; the outcome recorded
  is the grader's class.

Arm A and Arm B traces of a task share the candidate, the patches and the
outcomes; only the turns around ``python_test`` differ.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import time
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from glyph.agent import study as S
from glyph.agent.profiles.study import STUDY, prompt
from glyph.data import mbpp
from glyph.data.sft import Fix, Script, _mutations, written
from glyph.data.study_check import text_sha256
from glyph.errors import DataError

ARMS = ("a", "b")
TASK_FILES = (("train", "rl"), ("validation", "validation"), ("test", "test"))
"""(the study's file name, glyph's split): its ``train`` files are the RL split."""
DEEP_COUNT = S.MODE_COUNTS["deep_shadow"] + S.MODE_COUNTS["deep_visible"]
SHALLOW_COUNT = S.MODE_COUNTS["shadow"] + S.MODE_COUNTS["visible"]
MANIFEST = "manifest.json"
ASSIGNMENTS = "assignments.json"  # the SFT tasks' labels by task id, as the study writes them


def normalize(text: str) -> str:
    """CRLF and lone CR as LF, then stripped: the study's text rule."""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


@dataclass(frozen=True)
class StudyTask:
    """One MBPP task as the study's pipeline reads it."""

    task_id: int
    text: str
    code: str  # normalized, one trailing newline
    setup: str
    tests: tuple[str, ...]

    @property
    def test_code(self) -> str:
        return "\n".join(p for p in (self.setup, *self.tests) if p) + "\n"

    @property
    def project(self) -> str:
        return S.PROJECT_PATH.format(task_id=self.task_id)

    @property
    def solution_path(self) -> str:
        return f"{self.project}/{S.SOLUTION_FILE}"


def from_mbpp(task: mbpp.MbppTask) -> StudyTask:
    tests = tuple(normalize(t) for t in task.test_list if t.strip())
    return StudyTask(task.task_id, normalize(task.text), normalize(task.code) + "\n",
                     normalize(task.test_setup_code), tests)


# ---------------------------------------------------------------- splits


def order_key(task: StudyTask, seed: int = S.SEED) -> tuple[str, int]:
    digest = hashlib.sha256(f"{seed}\0{task.task_id}\0{task.text}".encode()).hexdigest()
    return digest, task.task_id


SPLIT_KEYS = {"study": True, "glyph": False}
"""Whether the draw is the study's: ``study``, its SHA-256 order (``order_key``); ``glyph``, glyph's
``random.Random(seed)`` draw (``mbpp.make_splits``), a switch (``--split-key``, ``--env.taskset.split-key``)."""
RECOVERIES = {"study": True, "glyph": False}
"""Which mutations a recovery is built from: ``study``: the first failing one in source order over
the study's table, any non-PASS outcome; ``glyph``: glyph's swaps (``glyph.data.sft``), up to
``GLYPH_ATTEMPTS`` of them in a seeded order per task, TIMEOUT and OTHER passed over (the value: whether
the mutations are the study's). Either way graded at the study's 5 s limit into the study's composition
(a switch: ``--recovery``)."""
GLYPH_ATTEMPTS = 40


def make_splits(tasks: list[StudyTask], seed: int = S.SEED, split_key: str = "study") -> dict[str, list[StudyTask]]:
    """``sft``, ``rl``, ``validation`` (each in key order) and ``test`` (task-id order); under
    ``split_key = "glyph"`` glyph's draw, each split in task-id order."""
    by_id = {t.task_id: t for t in tasks}
    missing = [i for r in (mbpp.TEST_IDS, mbpp.VALIDATION_IDS, mbpp.TRAIN_IDS) for i in r if i not in by_id]
    if missing:
        raise DataError(f"the data lacks {len(missing)} task ids the splits need (first: {missing[:5]})")
    if split_key not in SPLIT_KEYS:
        raise ValueError(f"split_key is {split_key!r}, not one of {SPLIT_KEYS}")
    if not SPLIT_KEYS[split_key]:  # glyph's draw
        return {k: [by_id[i] for i in ids] for k, ids in mbpp.make_splits(by_id, seed).items()}

    def ranked(ids) -> list[StudyTask]:
        return sorted((by_id[i] for i in ids), key=lambda t: order_key(t, seed))

    validation = ranked(mbpp.VALIDATION_IDS)
    moved, kept = validation[:S.VALIDATION_TO_TRAIN], validation[S.VALIDATION_TO_TRAIN:]
    pool = ranked([*mbpp.TRAIN_IDS, *(t.task_id for t in moved)])
    return {"sft": pool[:S.SFT_COUNT], "rl": pool[S.SFT_COUNT:S.SFT_COUNT + S.RL_COUNT],
            "validation": kept, "test": [by_id[i] for i in mbpp.TEST_IDS]}


# ---------------------------------------------------------------- task rows


def task_row(task: StudyTask, arm: str, split: str) -> dict:
    return {"task_id": task.task_id, "case_id": f"mbpp_{task.task_id}", "arm": arm, "split": split,
            "prompt": prompt(arm, task.text, task.test_code, task.project), "test_code": task.test_code,
            "blueprint_root": S.BLUEPRINT_ROOT.format(task_id=task.task_id), "trace_prefix": task.project,
            "source": "mbpp"}


# ---------------------------------------------------------------- mutations


@dataclass(frozen=True)
class Mutation:
    line: int  # 0-based
    original: str
    changed: str

    def apply(self, code: str) -> str:
        lines = code.splitlines(keepends=True)
        lines[self.line] = self.changed
        return "".join(lines)


def mutations(code: str):
    """The study's candidate mutations of ``code``, in source order (lazily)."""
    lines = code.splitlines(keepends=True)
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        row = tok.start[0] - 1
        if row >= len(lines) or tok.start[0] != tok.end[0]:
            continue
        line = lines[row]
        if line.lstrip().startswith(S.UNMUTATED_LINE_PREFIXES) or lines.count(line) != 1:
            continue
        new = S.MUTATIONS.get(tok.string)
        if new is None and tok.type == tokenize.NUMBER and tok.string.isdigit():
            new = str(int(tok.string) + 1)
        if new is None:
            continue
        changed = line[:tok.start[1]] + new + line[tok.end[1]:]
        if changed == line or changed in lines:
            continue
        m = Mutation(row, line, changed)
        if m.apply(code).count(changed) == 1:
            yield m


@dataclass(frozen=True)
class Recovery:
    """``first_code`` fails; each of ``fixes`` patches it toward the reference, the outcome each names
    the failing candidate's before it. One-step: one fix back to the reference; two-step: one to
    another failing mutation, then one back."""

    first_code: str
    fixes: tuple[Fix, ...]

    @property
    def first_outcome(self) -> str:
        return self.fixes[0].outcome


@dataclass
class Grader:
    """Grades candidates with glyph's grader under the study's limit and verdicts
    (``glyph.semantics.STUDY``), each distinct (task, code) once."""

    limit_s: float = S.SFT_TEST_TIMEOUT_S
    cache: dict = field(default_factory=dict)
    gradings: int = 0
    seconds: float = 0.0

    def outcome(self, task: StudyTask, code: str) -> str:
        key = (task.task_id, code)
        if key not in self.cache:
            from glyph.grading import grade
            from glyph.sandbox import Limits
            from glyph.semantics import STUDY

            t0 = time.perf_counter()
            limits = Limits(cpu_s=self.limit_s, wall_s=self.limit_s)
            g = grade(code, task.setup, "\n".join(task.tests), limits=limits, semantics=STUDY)
            self.seconds += time.perf_counter() - t0
            self.gradings += 1
            self.cache[key] = g.outcome.value
        return self.cache[key]


def glyph_mutations(code: str, rng: random.Random):
    """glyph's swaps of ``code`` (``glyph.data.sft``) as ``Mutation``s, in ``rng``'s order, at most
    ``GLYPH_ATTEMPTS``, each changed line new and once in the mutated code."""
    options = list(_mutations(code))
    rng.shuffle(options)
    for row, line, changed, source in options[:GLYPH_ATTEMPTS]:
        if changed.strip() and source.count(changed) == 1:
            yield Mutation(row - 1, line, changed)


def _failing(task: StudyTask, grader: Grader, recovery: str = "study", seed: int = S.SEED):
    if recovery not in RECOVERIES:
        raise ValueError(f"recovery is {recovery!r}, not one of {RECOVERIES}")
    studys = RECOVERIES[recovery]
    candidates = mutations(task.code) if studys else \
        glyph_mutations(task.code, random.Random(f"{seed}\0{task.task_id}"))
    for m in candidates:
        outcome = grader.outcome(task, m.apply(task.code))
        if outcome != "PASS" and (studys or outcome not in ("TIMEOUT", "OTHER")):
            yield m, outcome


def one_step(task: StudyTask, grader: Grader, recovery: str = "study", seed: int = S.SEED) -> Recovery | None:
    for m, outcome in _failing(task, grader, recovery, seed):
        return Recovery(m.apply(task.code), (Fix(m.changed, m.original, outcome),))
    return None


def two_step(task: StudyTask, grader: Grader, recovery: str = "study", seed: int = S.SEED) -> Recovery | None:
    """The first failing mutation A with the first later failing B that makes
    a well-formed middle patch (see the module docstring)."""
    lines = task.code.splitlines(keepends=True)
    first = None
    for m, outcome in _failing(task, grader, recovery, seed):
        if first is None:
            first = (m, outcome)
            a_code = m.apply(task.code)
            a_lines = a_code.splitlines(keepends=True)
            continue
        a, a_outcome = first
        lo, hi = sorted((a.line, m.line))
        b_lines = list(lines)
        b_lines[m.line] = m.changed
        a_block, b_block = "".join(a_lines[lo:hi + 1]), "".join(b_lines[lo:hi + 1])
        # B's code holds m.changed once: mutations() yields only such m.
        if a_block == b_block or a_code.count(a_block) != 1:
            continue
        return Recovery(a_code, (Fix(a_block, b_block, a_outcome), Fix(m.changed, m.original, outcome)))
    return None


# ---------------------------------------------------------------- traces


def messages(task: StudyTask, arm: str, recovery: Recovery | None, mode: str | None) -> list[dict]:
    """One SFT trace: the reference plan (``glyph.data.sft.plan``: a shadow mode REVISEs each fix, any
    other tests first) played through the study's episode, each test answered with its candidate's
    recorded outcome, a TIMEOUT as the study's SFT traces read it."""
    cfg = {"arm": arm, "max_tool_calls": S.MAX_TOOL_CALLS, "timeout_text": "sft", "project": task.project,
           "limits": {"cpu_s": S.SFT_TEST_TIMEOUT_S, "wall_s": S.SFT_TEST_TIMEOUT_S}}
    opening = prompt(arm, task.text, task.test_code, task.project)
    msgs, _ = written(Script(STUDY, task.solution_path, task.project), cfg, opening,
                      recovery.first_code if recovery else task.code, recovery.fixes if recovery else (),
                      revise=mode in ("shadow", "deep_shadow"))
    return msgs


def sft_row(task: StudyTask, arm: str, recovery: Recovery | None, mode: str | None) -> dict:
    """One SFT row, with the study's audit fields beside the trace (the
    candidate's and the reference's digests, the pair key both arms share)."""
    candidate = recovery.first_code if recovery else task.code
    outcomes = [f.outcome for f in recovery.fixes] if recovery else ["PASS"]
    pair = {"task_id": task.task_id, "initial_code": candidate, "initial_outcome": outcomes[0],
            "final_code": task.code, "final_outcome": "PASS"}
    return {"task_id": task.task_id, "case_id": f"mbpp_{task.task_id}", "arm": arm,
            "messages": messages(task, arm, recovery, mode),
            "trace_type": S.RECOVERY if recovery else S.DIRECT, "recovery_mode": mode,
            "candidate_outcome": outcomes[0], "second_candidate_outcome": (outcomes + [None])[1],
            "candidate_code_sha256": text_sha256(candidate), "final_code_sha256": text_sha256(task.code),
            "final_outcome": "PASS", "matched_key": text_sha256(json.dumps(pair, sort_keys=True)),
            "test_code": task.test_code}


def chat_text(msgs: list[dict]) -> str:
    """The study's chat format as text (its fit gate's text; the study's
    renderer, ``glyph.render_study``, gives its tokens)."""
    return "".join(S.CHAT_TURN.format(role=m["role"], content=m["content"].rstrip()) for m in msgs if m["role"])


@dataclass
class Selection:
    """The recoveries chosen, by task id, with their modes, and what the
    search cost."""

    recoveries: dict[int, Recovery]
    modes: dict[int, str]
    visited: int
    too_long: list[int]


def select_recoveries(sft_tasks: list[StudyTask], grader: Grader, tokenizer, seed: int = S.SEED,
                      progress: bool = False, recovery: str = "study") -> Selection:
    """The study's recovery assignment over the SFT tasks (module docstring)."""
    from rich.progress import track

    from glyph.render import render_ids

    def fits(task, trace, mode) -> bool:
        # The study's renderer: the tokens of chat_text (glyph.render_study).
        return len(render_ids(messages(task, "b", trace, mode), tokenizer, profile="study")) <= S.SFT_MAX_TOKENS

    deep: dict[int, Recovery] = {}
    shallow: dict[int, Recovery] = {}
    too_long: list[int] = []
    visited = 0
    ordered = sorted(sft_tasks, key=lambda t: order_key(t, seed))
    for task in track(ordered, description="grading recovery mutations", disable=not progress):
        if len(deep) == DEEP_COUNT and len(shallow) == SHALLOW_COUNT:
            break
        visited += 1
        if len(deep) < DEEP_COUNT:
            d = two_step(task, grader, recovery, seed)
            if d is not None and fits(task, d, "deep_visible"):
                deep[task.task_id] = d
                continue
            if d is not None:
                too_long.append(task.task_id)
        if len(shallow) < SHALLOW_COUNT:
            r = one_step(task, grader, recovery, seed)
            if r is not None and fits(task, r, "visible"):
                shallow[task.task_id] = r
            elif r is not None:
                too_long.append(task.task_id)
    if len(deep) != DEEP_COUNT or len(shallow) != SHALLOW_COUNT:
        raise DataError(f"found {len(deep)} two-step and {len(shallow)} one-step recoveries among the "
                             f"{len(sft_tasks)} SFT tasks; the study needs {DEEP_COUNT} and {SHALLOW_COUNT}")
    modes = {i: S.SHALLOW_MODES[k % 2] for k, i in enumerate(shallow)}
    modes |= {i: S.DEEP_MODES[k % 2] for k, i in enumerate(deep)}
    return Selection({**shallow, **deep}, modes, visited, too_long)


# ---------------------------------------------------------------- prepare


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def prepare(out: Path, mbpp_path=None, seed: int = S.SEED, progress: bool = True, grader: Grader | None = None,
            tokenizer=None, split_key: str = "study", recovery: str = "study") -> dict:
    """Write the study's layout into ``out`` (``arm_{a,b}_{train,validation,test}.jsonl``,
    ``sft/arm_{a,b}/train.jsonl``, ``assignments.json``: the study's files, byte
    for byte, with both switches at ``study``) and glyph's manifest; return the
    manifest. ``split_key`` (``SPLIT_KEYS``) and ``recovery`` (``RECOVERIES``):
    glyph's departures, one at a time."""
    from glyph.render import OFFLINE, load_tokenizer

    t0 = time.perf_counter()
    source = mbpp.load_source(mbpp_path)
    splits = make_splits([from_mbpp(t) for t in source.tasks], seed, split_key)
    grader = grader or Grader()
    tokenizer = tokenizer or load_tokenizer(OFFLINE)
    chosen = select_recoveries(splits["sft"], grader, tokenizer, seed, progress, recovery)
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    sft_rows: dict[str, list[dict]] = {}
    for arm in ARMS:
        for name, split in TASK_FILES:
            path = out / f"arm_{arm}_{name}.jsonl"
            _write_jsonl(path, [task_row(t, arm, name) for t in splits[split]])
            files.append(path)
        rows = sft_rows[arm] = [sft_row(t, arm, chosen.recoveries.get(t.task_id), chosen.modes.get(t.task_id))
                                for t in splits["sft"]]
        path = out / "sft" / f"arm_{arm}" / "train.jsonl"
        _write_jsonl(path, rows)
        files.append(path)
    assignments = [{k: r[k] for k in ("task_id", "case_id", "trace_type", "candidate_outcome", "recovery_mode")}
                   for r in sorted(sft_rows["a"], key=lambda r: r["task_id"])]
    path = out / ASSIGNMENTS
    path.write_text(json.dumps(assignments, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    files.append(path)
    outcomes = Counter()
    for r in chosen.recoveries.values():
        outcomes.update(f.outcome for f in r.fixes)
    manifest = {
        "created_by": "glyph data prepare --profile study",
        "profile": "study",
        "switches": {"split_key": split_key, "recovery": recovery},
        "seed": seed,
        "source": {"kind": source.kind, "files": source.files,
                   "official": {"repo": mbpp.OFFICIAL_REPO, "revision": mbpp.OFFICIAL_REVISION}},
        "splits": {k: [t.task_id for t in v] for k, v in splits.items()},
        "counts": {k: len(v) for k, v in splits.items()},
        "sft": {"composition": {S.DIRECT: len(splits["sft"]) - len(chosen.recoveries),
                                **Counter(chosen.modes.values())},
                "recovery_outcomes": dict(sorted(outcomes.items())),
                "tasks_visited": chosen.visited, "too_long": chosen.too_long,
                "gradings": grader.gradings, "grading_seconds": round(grader.seconds, 1),
                "test_limit_s": grader.limit_s, "max_tokens": S.SFT_MAX_TOKENS, "tokenizer": OFFLINE},
        "artifacts": {str(p.relative_to(out)): {"sha256": mbpp.sha256_file(p), "size": p.stat().st_size}
                      for p in files},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
