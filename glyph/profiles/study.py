"""The ``study`` profile's trusted half: the PREDICT study as it was run
(``glyph.agent.profiles.study`` is its agent half). Its task rows
(``glyph.data.study``: the text, setup and tests normalised, its SHA-256
split order), its ChatML renderer, its settings (8 calls, 30 s wall clock per
test, 1800 s per model call), its grading limit (wall clock), its four
switches, and what its trace adds: prediction targets, each checked against
a trusted grading, and protocol errors, which forbid the reward.

Its definitions (JayZenith/PREDICT ``src/glyph/taskset.py`` metrics and
``src/glyph/passk.py``): the first patch is correct when the first
prediction target's outcome is PASS, else (no target, Arm A) when the first
visible python_test passed; a prediction's accuracy and rejection rates count
every target, a label that is no outcome class as wrong (the report's
``INVALID``); recovered is a visible PASS after the first visible failure,
whatever the reward.
"""

from __future__ import annotations

import dataclasses

from glyph.agent import study as S
from glyph.agent.profiles.base import Tester
from glyph.agent.profiles.study import STUDY, Switches
from glyph.agent.trace import PredictionTarget, StudyTrace, VerifiedCandidate, sha256
from glyph.data import study
from glyph.data.mbpp import MbppTask
from glyph.data.replay import grading_tester
from glyph.profiles.base import OUTCOMES, PASS, Profile, Regrading, TaskRow, rate
from glyph.sandbox import Limits
from glyph.semantics import STUDY as STUDY_SEMANTICS

INVALID = "INVALID"  # the study's class for a sampled prediction that is no outcome class (src/glyph/passk.py)


def study_episode(first_target: str | None, visible: list[str]) -> tuple[bool, bool, bool]:
    """(first patch correct, had an executed failure, recovered) by the study's definitions: the
    first prediction target's outcome (``first_target``, None: no target) where there is one,
    else the first visible test's; a visible test that did not pass; a visible PASS after the
    first visible failure, whatever the reward. ``visible``: the trusted outcome of each visible
    python_test, in order."""
    first_fail = next((i for i, v in enumerate(visible) if v != PASS), None)
    first = first_target == PASS if first_target is not None else bool(visible) and visible[0] == PASS
    return first, first_fail is not None, first_fail is not None and PASS in visible[first_fail + 1:]


def _targets(trace: StudyTrace, regrader: Regrading) -> tuple[list[PredictionTarget], list[str]]:
    """The prediction targets of a recorded candidate, each with its trusted outcome, and the tamper
    reasons: a target that names no recorded candidate, an outcome no trusted grading gives it."""
    known = {c.sha256: c.source for c in trace.candidates if sha256(c.source) == c.sha256}
    verified, tamper = [], []
    for k, t in enumerate(trace.prediction_targets):
        source = known.get(t.candidate_sha256)
        if source is None:
            tamper.append(f"prediction target {k}: its candidate is no recorded candidate")
            continue
        label = t.verified_label
        if not regrader.agrees(source, label):
            label = regrader.visible(source)
            tamper.append(f"prediction target {k}: recorded {t.verified_label}, re-grade {label}")
        verified.append(dataclasses.replace(t, verified_label=label))
    return verified, tamper


class StudyProfile(Profile):
    name = "study"
    agent = STUDY
    renderer = "study"
    settings = {"max_tool_calls": S.MAX_TOOL_CALLS, "tool_timeout": float(S.TOOL_TIMEOUT_S),
                "model_timeout": float(S.MODEL_TIMEOUT_S)}
    switches = tuple(Switches().as_dict())
    split_keys = study.SPLIT_KEYS
    invalid_class = True
    semantics = STUDY_SEMANTICS  # its classifier's verdicts on honest code (PREDICT src/glyph/program.py)
    reuse_final_grade = False  # its final_verification re-ran the tests (program.py, end of main)
    definitions = ("the study's (PREDICT src/glyph/taskset.py, passk.py): first patch = the first prediction "
                   "target's outcome, else the first visible python_test's; recovered = a visible PASS after the "
                   "first visible failure, and passed; an invalid prediction label is the class INVALID")

    def row(self, task: MbppTask) -> TaskRow:
        st = study.from_mbpp(task)
        return TaskRow(task, st.text, st.setup, st.tests, st.code,
                       tuple(study.normalize(c) for c in task.challenge_test_list if c.strip()))

    def split(self, rows: dict[int, TaskRow], seed: int, split_key: str | None = None) -> dict[str, list[int]]:
        tasks = [study.StudyTask(i, r.text, r.code, r.setup, r.tests) for i, r in rows.items()]
        splits = study.make_splits(tasks, seed, split_key or "study")
        return {k: [t.task_id for t in ts] for k, ts in splits.items()}

    def sft_setup(self, row: dict, arm: str, tasks: dict[int, MbppTask] | None,
                  sandbox=None) -> tuple[dict, Tester]:
        """The study's SFT traces: its budget, the task's project folder, its test code (the row's),
        graded at the limit the traces were made with (``SFT_TEST_TIMEOUT_S``; a TIMEOUT reads as
        those traces record it) by the study's verdicts."""
        limit = float(S.SFT_TEST_TIMEOUT_S)
        cfg = {"arm": arm, "max_tool_calls": S.MAX_TOOL_CALLS, "timeout_text": "sft",
               "project": S.PROJECT_PATH.format(task_id=row["task_id"]), "limits": {"cpu_s": limit, "wall_s": limit}}
        limits = Limits(cpu_s=limit, wall_s=limit)
        return cfg, grading_tester("", row["test_code"], limits, sandbox, self.semantics)

    def limits(self, tool_timeout: float) -> Limits:
        """The study's limit is wall clock: ``tool_timeout`` of each."""
        return Limits(cpu_s=float(tool_timeout), wall_s=float(tool_timeout))

    def switch_values(self, given: dict) -> dict:
        return Switches(**given).as_dict()

    def check_trace(self, trace: StudyTrace, regrader: Regrading) -> list[str]:
        """A prediction target that names no recorded candidate, or an outcome no trusted grading
        gives it; a trace that ends with FINAL and lists protocol errors (the episode never does)."""
        tamper = _targets(trace, regrader)[1]
        if trace.protocol_errors and (trace.final or trace.end == "final"):
            tamper.append("the trace says the episode ended with FINAL and lists protocol errors")
        return tamper

    def verified_targets(self, trace: StudyTrace, regrader: Regrading) -> list[PredictionTarget]:
        """Every prediction target whose candidate the trace recorded, with its trusted outcome (the
        recorded one where a trusted grading gives it): what the study's CE rule trains."""
        return _targets(trace, regrader)[0]

    def model_errors(self, trace: StudyTrace) -> tuple[str, ...]:
        return tuple(trace.protocol_errors)

    def prediction_metrics(self, trace: StudyTrace, candidates: list[VerifiedCandidate], visible: list[str],
                           passed: bool) -> dict[str, float]:
        """Over the prediction targets (each checked by ``check_trace``) and the trusted visible outcomes."""
        targets = trace.prediction_targets
        hits = [t.verified_label == PASS for t in targets]
        bad = [t for t, ok in zip(targets, hits) if not ok]
        good = [t for t, ok in zip(targets, hits) if ok]
        first, _, recovered = study_episode(targets[0].verified_label if targets else None, visible)
        return {
            "first_patch_correct": float(first),
            "predictions": float(len(targets)),
            "prediction_accuracy": rate(sum(t.sampled_label == t.verified_label for t in targets), len(targets)),
            "invalid_predictions": float(sum(t.sampled_label not in OUTCOMES for t in targets)),
            "bad_patch_rejection_rate": rate(sum(t.decision == "REVISE" for t in bad), len(bad)),
            "unnecessary_rejection_rate": rate(sum(t.decision == "REVISE" for t in good), len(good)),
            "revise_count": float(sum(t.decision == "REVISE" for t in targets)),
            "recovered_after_executed_failure": float(recovered),
        }

    def predictions(self, candidates: list[VerifiedCandidate]) -> tuple[tuple[str, str, str | None], ...]:
        """Every candidate with a prediction turn, a sampled label that is no outcome class as ``INVALID``."""
        return tuple((c.sampled_label if c.sampled_label in OUTCOMES else INVALID, c.verified_label, c.decision)
                     for c in candidates if c.prediction_turn is not None and c.verified_label in OUTCOMES)


STUDY_PROFILE = StudyProfile()
