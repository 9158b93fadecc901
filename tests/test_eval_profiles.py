"""The eval CLI on glyph-mbpp under each protocol profile against the
reference-policy server (``glyph demo``'s runs, ``demo_runs`` in conftest.py):
``vf-eval`` (verifiers 0.4.0) in the repo's venv, ``eval`` at PRIME-RL's
verifiers pin (this file is in tests/test_pin.py's GLYPH_PIN_TESTS). Each
rollout records the profile it ran (its harness record,
``trace.info["glyph_harness"]``), the model was sent that profile's prompt,
it is rewarded as its policy deserves, and ``glyph report`` reads the run by
that profile's definitions."""

import json

import pytest

from glyph.agent import study as S
from glyph.agent.profiles.glyph import DEFAULT_BUDGET, system_prompt
from glyph.demo import read_rollouts
from glyph.policies.policies import Planner
from glyph.record import harness_record
from glyph.report import report
from glyph.report.episodes import TRACES

N = 3  # tasks per arm: the mix policy plays revise, hack and oracle on the first three of either test split
SYSTEM = {"study": S.SYSTEM_PROMPTS, "glyph": {arm: system_prompt(arm, DEFAULT_BUDGET) for arm in "ab"}}


@pytest.mark.parametrize("arm", ["a", "b"])
@pytest.mark.parametrize("profile", ["study", "glyph"])
def test_the_eval_cli_runs_each_profile(demo_runs, mbpp_tasks, profile, arm):
    """``glyph demo``'s eval runs (``demo_runs``: the eval CLI of the verifiers installed)."""
    run = demo_runs[profile]
    assert run.code == 0, run.text[-3000:]
    out = run.out / f"arm_{arm}-{profile}"
    planner = Planner(mbpp_tasks)
    rows = read_rollouts(out)
    assert len(rows) == N
    for r in rows:
        policy = planner.resolve("mix", mbpp_tasks[r["task"]])
        assert r["ok"] and not r["errors"], r
        assert r["reward"] == (0.0 if policy == "hack" else 1.0), (arm, r["task"], policy, r["reason"])
        assert r["metrics"]["protocol_error"] == 0.0 or policy == "hack", r
    [traces] = out.rglob(TRACES)
    saved = [t for line in traces.read_text().splitlines() if line.strip() for t in json.loads(line)["traces"]]
    assert {harness_record(t["info"]).protocol.profile for t in saved} == {profile}
    [c] = report([out])["cells"]  # glyph report reads the run by the profile's definitions
    assert c["definitions"] == profile and c["episode"]["unrecorded"] == 0 and c["rollouts"] == N
    systems = {t["nodes"][0]["message"]["content"] for t in saved}  # what the model was sent first
    assert systems == {SYSTEM[profile][arm]}, systems
