"""A recorded conversation replayed through its profile's episode
(``glyph.agent.profiles``): the model replaced by the recorded assistant
turns, every observation the episode answers compared with the recorded
one; and a scripted one played (``play``): how the SFT traces are written
(``glyph.data.sft.written``), so a trace holds what the episode answers.
``glyph study replay`` runs SFT traces of either profile through it (the
study's own files, or ``glyph data prepare``'s), and ``glyph data prepare``
checks the traces it writes with it (``glyph.data.sft.replay``).

Each replay starts from the profile's workspace (the placeholder
``solution.py``, in a fresh temporary directory); ``python_test`` and the
Arm B shadow tests are graded by the ``tester`` the caller gives (glyph's
grader in its sandbox). A trace reproduces when every replayed observation
(role and content) equals the recorded one, each shadow test it records
gives the outcome it records, and the replay ends, with FINAL, where the
trace ends.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from glyph.agent.profiles.base import AgentProfile, Episode, Tester
from glyph.agent.trace import FINAL


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


def grading_tester(setup: str, tests: str, limits, sandbox=None, semantics=None) -> Tester:
    """``tester(source, shadow)``: glyph's grader on ``tests`` after ``setup``, under ``limits`` and
    ``semantics`` (``glyph.semantics``; None: glyph's)."""
    from glyph.grading import grade
    from glyph.semantics import GLYPH

    sem = semantics or GLYPH
    return lambda source, shadow: grade(source, setup, tests, limits=limits, sandbox=sandbox,
                                        semantics=sem).outcome.value


def _view(message: dict | None):
    return None if message is None else {"role": message.get("role"), "content": message.get("content")}


def play(agent: AgentProfile, cfg: dict, opening: list[dict], turns: Iterable[str], tester: Tester
         ) -> tuple[list[dict], Episode]:
    """``opening``, then each of ``turns`` through ``agent``'s episode under the program config ``cfg``
    from its workspace (as ``replay``), each answered by its observation (role and content): the
    conversation and the episode. A script that does not end with FINAL is a ValueError."""
    msgs = [dict(m) for m in opening]
    with tempfile.TemporaryDirectory(prefix="glyph-play-") as root:
        agent.lay_out(root, cfg.get("project"))
        ep = agent.episode(cfg, agent.trace_type(), root)
        for text in turns:
            step = ep.turn(text, tester, [dict(m) for m in msgs])
            msgs.append({"role": "assistant", "content": text})
            if step is None:
                break
            msgs.append(_view(ep.observation(step)))
    if ep.end != FINAL:
        raise ValueError(f"the scripted episode ended by {ep.end} ({ep.error}), not with FINAL")
    return msgs, ep


def replay(n: int, row: dict, agent: AgentProfile, cfg: dict, tester: Tester) -> Replay:
    """Replay ``row["messages"]`` (opening messages, then assistant turns each answered by its
    observation) through ``agent``'s episode under the program config ``cfg`` (``arm``,
    ``max_tool_calls``, ``project``...). ``row["shadow"]`` (where present: ``[{"call", "outcome"}]``)
    is what the trace says each REVISE's shadow test gave."""
    msgs = row["messages"]
    task_id = row.get("task_id")
    shadow = {s["call"]: s["outcome"] for s in row["shadow"]} if "shadow" in row else None
    checked: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="glyph-replay-") as root:
        agent.lay_out(root, cfg.get("project"))
        ep = agent.episode(cfg, agent.trace_type(), root)
        i = 0
        while i < len(msgs):
            if msgs[i].get("role") != "assistant":
                i += 1
                continue
            step = ep.turn(msgs[i]["content"], tester, [dict(m) for m in msgs[:i]])
            recorded = msgs[i + 1] if i + 1 < len(msgs) else None
            if step is None:
                if ep.end != FINAL or recorded is not None:
                    return Replay(n, task_id, False, i + 1, _view(recorded), {"end": ep.end, "error": ep.error})
                return Replay(n, task_id, True)
            for c in ep.trace.candidates if shadow is not None else ():
                if c.shadow and c.index not in checked:
                    checked.add(c.index)
                    if shadow.get(c.prediction_call) != c.verified_label:
                        return Replay(n, task_id, False, i, {"shadow test": shadow.get(c.prediction_call)},
                                      {"shadow test": c.verified_label})
            replayed = _view(ep.observation(step))
            if _view(recorded) != replayed:
                return Replay(n, task_id, False, i + 1, _view(recorded), replayed)
            i += 2
        return Replay(n, task_id, False, len(msgs), None, {"end": "trace ends before FINAL"})


def summary_line(results: list[Replay]) -> str:
    return f"replay: {sum(r.ok for r in results)}/{len(results)} traces reproduce every observation"
