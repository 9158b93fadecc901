"""The eval CLI on glyph-mbpp under each protocol profile against the
reference-policy server: ``vf-eval`` (verifiers 0.4.0) in the repo's venv,
``eval`` at PRIME-RL's verifiers pin (this file is in tests/test_pin.py's
GLYPH_PIN_TESTS). One server plays both profiles; each rollout records the
profile it ran (``trace.info["glyph_protocol"]``) and is rewarded as its
policy deserves, and ``glyph report`` reads the run by that profile's
definitions."""

import os
import subprocess

import pytest

from glyph.agent import study as S
from glyph.demo import read_rollouts, vf_eval_command
from glyph.policies.policies import Planner
from glyph.policies.server import PolicyServer
from glyph.report import report
from glyph.report.load import TRACES, iter_episodes

N = 3  # tasks per arm: the mix policy plays revise, hack and oracle on the first three of either test split


@pytest.fixture(scope="module")
def server(mbpp_tasks):
    with PolicyServer(mbpp_tasks, record=True) as s:
        yield s


@pytest.mark.parametrize("profile", ["study", "glyph"])
def test_the_eval_cli_runs_each_profile(tmp_path, server, mbpp_tasks, mbpp_path, profile):
    planner = Planner(mbpp_tasks)
    env = dict(os.environ, PRIME_RUNS_MODE="disabled")
    for arm in ("a", "b"):
        out = tmp_path / arm
        server.received.clear()
        cmd = vf_eval_command(server.base_url, "mix", arm, N, out, mbpp_path,
                              ["--env.agent.harness.tool-timeout", "5"], profile=profile)
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = read_rollouts(out)
        assert len(rows) == N
        for r in rows:
            policy = planner.resolve("mix", mbpp_tasks[r["task"]])
            assert r["ok"] and not r["errors"], r
            assert r["reward"] == (0.0 if policy == "hack" else 1.0), (arm, r["task"], policy, r["reason"])
            assert r["metrics"]["protocol_error"] == 0.0 or policy == "hack", r
        [traces] = out.rglob(TRACES)
        recorded = {t["info"]["glyph_protocol"].get("profile", "glyph")
                    for _, ep in iter_episodes(traces) for t in ep["traces"]}
        assert recorded == {profile}
        [c] = report([out])["cells"]  # glyph report reads the run by the profile's definitions
        assert c["definitions"] == profile and c["episode"]["unrecorded"] == 0 and c["rollouts"] == N
        systems = {m[0]["content"] for m in server.received}
        assert (systems == {S.SYSTEM_PROMPTS[arm]}) == (profile == "study"), systems
