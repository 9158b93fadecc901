"""A protocol profile is one object per side of the trust boundary, found by
name (``glyph.agent.profiles``, ``glyph.profiles``): a third profile is one
class per side and a registry line, and every part of glyph (the harness,
the agent program, the reference policies, finalize, the report, credit)
takes it from the registry; outside the profile packages no module compares
profile names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from glyph import profiles, record
from glyph.agent import profiles as agent_profiles
from glyph.agent import study as S
from glyph.agent.profiles.base import Registry
from glyph.agent.profiles.study import StudyAgent
from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.profiles.study import StudyProfile
from testkit.rollout import Rollouts

PACKAGE = Path(__file__).resolve().parent.parent / "glyph"


# ---------------------------------------------------------------- a third profile, minimal


THIRD_SYSTEM = {arm: text + " The project is a folder of its own." for arm, text in S.SYSTEM_PROMPTS.items()}


class ThirdAgent(StudyAgent):
    """The study's grammar and episode, its own system prompts and workspace layout."""

    name = "third"

    def project(self, task_id: int) -> str | None:
        return f"work/task_{task_id}"

    def messages(self, arm, task_text, setup, tests, project, budget, switches=None):
        opening = super().messages(arm, task_text, setup, tests, project, budget, switches)
        return [{"role": "system", "content": THIRD_SYSTEM[arm]}, *opening[1:]]

    def arm_of(self, messages):
        system = messages[0].get("content") if messages and messages[0].get("role") == "system" else None
        return next((arm for arm, text in THIRD_SYSTEM.items() if system == text), None)


class ThirdProfile(StudyProfile):
    """The study's task rows, renderer, settings, switches and definitions."""

    name = "third"
    agent = ThirdAgent()


@pytest.fixture
def third(monkeypatch):
    """The third profile registered on both sides (one line each), for this test only."""
    profile = ThirdProfile()
    monkeypatch.setattr(agent_profiles, "PROFILES", Registry(agent_profiles.PROFILES))
    monkeypatch.setattr(profiles, "PROFILES", Registry(profiles.PROFILES))
    agent_profiles.register(profile.agent)
    profiles.register(profile)
    return profile


def test_a_profile_is_registered_once_and_found_by_name(third):
    assert profiles.get("third") is third and agent_profiles.get("third") is third.agent
    with pytest.raises(ValueError, match="registered already"):
        profiles.register(third)
    with pytest.raises(ValueError, match="not one of study, glyph, third"):
        profiles.get("fourth")
    orphan = type("Orphan", (StudyProfile,), {"name": "orphan", "agent": ThirdAgent()})()
    with pytest.raises(ValueError, match="agent half that is not registered"):
        profiles.register(orphan)


@pytest.mark.verifiers_free
def test_a_third_profile_runs_an_episode_a_finalize_a_report_and_credit(third, mbpp_tasks, tmp_path):
    """The harness, the agent program, the reference policies (which read the profile from its system
    prompt and write its grammar), finalize, ``glyph report`` and credit all take the third profile
    from the registry."""
    from glyph.credit import replay as credit
    from glyph.credit.trajectory import load_trajectory, resolve_task
    from glyph.report import report

    task = mbpp_tasks["mbpp_11"]
    harness = GlyphHarnessConfig(profile="third", tool_timeout=5, model_timeout=30)
    assert harness.max_tool_calls == S.MAX_TOOL_CALLS and harness.limits().wall_s == 5.0  # the study's settings
    with Rollouts(mbpp_tasks, harness) as r:
        played = {arm: r.play(task, arm, "revise", tmp_path / f"ws-{arm}") for arm in ("a", "b")}
    for arm, p in played.items():
        assert (p.workspace / "work" / "task_11" / "solution.py").is_file()
        assert p.trace["messages"][0]["content"] == THIRD_SYSTEM[arm] and p.trace["end"] == "final"
        assert p.record.reward == 1.0 and p.record.tamper == [], p.record.reason
    assert played["b"].trace["prediction_targets"] and played["b"].record.metrics.predictions == 2.0
    # a report of the two rollouts, as verifiers saves them
    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for arm, p in played.items():
        info = {}
        record.store(info, p.record)
        record.store_harness(info, record.HarnessRecord(protocol=record.ProtocolRecord(
            arm=arm, max_tool_calls=8, test_cost=1, profile="third", project=third.agent.project(task.task_id))))
        data = {"name": task.id, "arm": arm}
        lines.append(json.dumps({"env": {"id": "glyph-mbpp"}, "ok": True, "task": {"data": data}, "traces": [{
            "ok": True, "task": {"data": data}, "info": info, "rewards": {"passed": {"score": p.record.reward}},
            "metrics": p.record.metrics.flat(), "agent": {"config": {"model": "revise"}}}]}))
    (run / "traces.jsonl").write_text("\n".join(lines) + "\n")
    doc = report([run], [{"arm": "a"}])  # one cell of both arms, labelled
    [cell] = doc["cells"]
    assert cell["definitions"] == "third" and cell["pass_at_1"]["successes"] == 2
    # credit on the program's own trace: the third profile's workspace and grammar
    saved = tmp_path / "trace.json"
    saved.write_text(json.dumps(played["a"].trace))
    traj = load_trajectory(saved)
    found, notes = resolve_task(traj, mbpp_tasks)
    assert (traj.profile, found.id, notes) == ("third", task.id, [])
    rep = credit.assign(traj, found)
    assert rep.divergences == [] and rep.earliest_unreachable is None and rep.final_outcome == "PASS"


# ---------------------------------------------------------------- nobody else compares profile names


COMPARISON = re.compile(r"""(==|!=|\bis\b|\bis not\b)\s*["'](study|glyph)["']|["'](study|glyph)["']\s*(==|!=)"""
                        r"""|(==|!=|\bis\b)\s*Profile\.(study|glyph)\b""")
"""A profile name compared (``x == "study"``, ``"glyph" != y``, ``p is Profile.study``): a string in any
quotes, either side, or the CLI's enum of profiles."""
ALLOWED = {
    "glyph/layers.py": 1,  # ``parts[0] != "glyph"``: the package's name, not a profile
    "glyph/cli/data.py": 1,  # ``glyph data prepare --profile``: two data pipelines, each with options of its own
}
"""The comparisons with a profile name left outside the profile packages, each with why."""


def test_outside_the_profile_packages_no_module_compares_profile_names():
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith(("glyph/profiles/", "glyph/agent/profiles/")):
            continue
        n = len(COMPARISON.findall(path.read_text()))
        if n:
            found[rel] = n
    assert found == ALLOWED and sum(found.values()) <= 3
