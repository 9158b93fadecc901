"""``glyph study replay``: the study's SFT traces run through the study-profile
episode (``glyph.agent.study_episode.StudyEpisode``), the model replaced by
each trace's recorded assistant turns.

Each trace starts from the study's workspace (the placeholder ``solution.py``
in the task's project folder, in a fresh temporary directory); ``python_test``
and the Arm B shadow tests are graded by glyph's grader in its sandbox on the
row's ``test_code``, under the limits the SFT traces were made with
(``SFT_TEST_TIMEOUT_S``; a TIMEOUT reads as those traces record it). A trace
reproduces when every replayed observation (tool message: role and content)
equals the recorded one and the replay ends, with FINAL, where the trace ends.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from glyph.agent import study as S
from glyph.agent.program import workspace
from glyph.agent.study_episode import StudyEpisode


@dataclass(frozen=True)
class Replay:
    """One trace's replay: ``index`` (its message index) and the recorded and
    replayed message where they first differ, or ``ok``."""

    row: int
    task_id: object
    ok: bool
    index: int | None = None
    recorded: object = None
    replayed: object = None

    def line(self) -> str:
        return (f"trace {self.row} (task {self.task_id}): message {self.index} differs\n"
                f"  recorded: {json.dumps(self.recorded, ensure_ascii=False)}\n"
                f"  replayed: {json.dumps(self.replayed, ensure_ascii=False)}")


def read_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def arm_of(row: dict, arm: str | None) -> str:
    """The arm a row is replayed as: ``arm`` where given, else the row's own
    (``arm``), else from its system prompt."""
    if arm:
        return arm
    if row.get("arm") in ("a", "b"):
        return row["arm"]
    system = row["messages"][0]["content"]
    return next((a for a, p in S.SYSTEM_PROMPTS.items() if p == system), "a")


def grading_tester(test_code: str, limit_s: float, sandbox=None):
    """``tester(source, shadow)``: glyph's grader on ``test_code``."""
    from glyph.grading import grade
    from glyph.sandbox import Limits

    limits = Limits(cpu_s=limit_s, wall_s=limit_s)
    return lambda source, shadow: grade(source, "", test_code, limits=limits, sandbox=sandbox).outcome.value


def _view(message: dict | None):
    return None if message is None else {"role": message.get("role"), "content": message.get("content")}


def replay_row(n: int, row: dict, arm: str | None = None, limit_s: float = S.SFT_TEST_TIMEOUT_S,
               sandbox=None) -> Replay:
    msgs = row["messages"]
    task_id = row.get("task_id")
    tester = grading_tester(row["test_code"], limit_s, sandbox)
    with tempfile.TemporaryDirectory(prefix="glyph-study-replay-") as root:
        project = S.PROJECT_PATH.format(task_id=task_id)
        solution, placeholder = workspace("study", project)
        os.makedirs(os.path.dirname(os.path.join(root, solution)))
        with open(os.path.join(root, solution), "w", encoding="utf-8") as f:
            f.write(placeholder)
        ep = StudyEpisode(arm_of(row, arm), S.MAX_TOOL_CALLS, {}, root=root, project=project,
                          timeout_s=int(limit_s), timeout_text="sft")
        i = 0
        while i < len(msgs):
            if msgs[i].get("role") != "assistant":
                i += 1
                continue
            step = ep.turn(msgs[i]["content"], tester, [dict(m) for m in msgs[:i]])
            recorded = msgs[i + 1] if i + 1 < len(msgs) else None
            if step is None:
                if ep.end != "final" or recorded is not None:
                    replayed = {"end": ep.end, "error": ep.error}
                    return Replay(n, task_id, False, i + 1, _view(recorded), replayed)
                return Replay(n, task_id, True)
            replayed = _view(ep.observation(step))
            if _view(recorded) != replayed:
                return Replay(n, task_id, False, i + 1, _view(recorded), replayed)
            i += 2
        return Replay(n, task_id, False, len(msgs), None, {"end": "trace ends before FINAL"})


def summary_line(results: list[Replay]) -> str:
    return f"replay: {sum(r.ok for r in results)}/{len(results)} traces reproduce every observation"
