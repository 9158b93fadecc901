"""The ``glyph`` profile's trusted half: glyph's bundle of departures from
the study (``glyph.agent.profiles.glyph`` is its agent half). MBPP's rows as
they are, glyph's splits (``glyph.data.mbpp.make_splits``), the Qwen3
renderer with thinking off, limits of ``tool_timeout`` CPU seconds (twice
that of wall clock), no switches (it has them all).

Its definitions: the first patch is the first candidate's verified outcome;
a prediction is a sampled label that is an outcome class; recovered is a
rollout that passed after a visible test failed.
"""

from __future__ import annotations

from glyph.agent.profiles.base import Tester
from glyph.agent.profiles.glyph import GLYPH
from glyph.agent.trace import Trace, VerifiedCandidate
from glyph.data import mbpp, sft
from glyph.data.mbpp import MbppTask
from glyph.data.replay import grading_tester
from glyph.errors import DataError
from glyph.profiles.base import OUTCOMES, PASS, Profile, TaskRow, rate


class GlyphProfile(Profile):
    name = "glyph"
    agent = GLYPH
    renderer = "glyph"
    definitions = ("glyph's (glyph.profiles.glyph): first patch = the first candidate's verified outcome; "
                   "recovered = passed after a visible failure")

    def row(self, task: MbppTask) -> TaskRow:
        return TaskRow(task, task.text, task.test_setup_code, tuple(task.test_list), task.code,
                       tuple(task.challenge_test_list))

    def split(self, rows: dict[int, TaskRow], seed: int, split_key: str | None = None) -> dict[str, list[int]]:
        return mbpp.make_splits(rows, seed)

    def switch_values(self, given: dict) -> None:
        if given:
            raise ValueError(f"{', '.join(given)}: a switch of the study profile; the glyph profile has glyph's "
                             "rules already (drop it, or set profile = \"study\")")
        return None

    def sft_setup(self, row: dict, arm: str, tasks: dict[int, MbppTask] | None,
                  sandbox=None) -> tuple[dict, Tester]:
        """glyph's SFT traces (``glyph.data.sft``): the default budget, the task's tests from the MBPP data."""
        task = (tasks or {}).get(row["task_id"])
        if task is None:
            raise DataError(f"task {row['task_id']} is not in the MBPP data: glyph's traces carry no tests "
                            f"(set --mbpp-path or $GLYPH_MBPP_PATH)")
        return sft.replay_config(arm), grading_tester(task.test_setup_code, task.tests(), sft.LIMITS, sandbox)

    def prediction_metrics(self, trace: Trace, candidates: list[VerifiedCandidate], visible: list[str],
                           passed: bool) -> dict[str, float]:
        preds = [c for c in candidates if c.sampled_label is not None]
        failing = [c for c in preds if c.verified_label != PASS]
        passing = [c for c in preds if c.verified_label == PASS]
        return {
            "first_patch_correct": float(bool(candidates) and candidates[0].verified_label == PASS),
            "predictions": float(len(preds)),
            "prediction_accuracy": rate(sum(c.sampled_label == c.verified_label for c in preds), len(preds)),
            "invalid_predictions": 0.0,
            "bad_patch_rejection_rate": rate(sum(c.decision == "REVISE" for c in failing), len(failing)),
            "unnecessary_rejection_rate": rate(sum(c.decision == "REVISE" for c in passing), len(passing)),
            "revise_count": float(sum(c.decision == "REVISE" for c in preds)),
            "recovered_after_executed_failure": float(passed and any(v != PASS for v in visible)),
        }

    def predictions(self, candidates: list[VerifiedCandidate]) -> tuple[tuple[str, str, str | None], ...]:
        return tuple((c.sampled_label, c.verified_label, c.decision) for c in candidates
                     if c.sampled_label in OUTCOMES and c.verified_label in OUTCOMES)


GLYPH_PROFILE = GlyphProfile()
