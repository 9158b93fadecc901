"""The recipe's eval configs end to end against glyph's reference policies, no
GPU: verifiers' v1 eval CLI (``vf-eval`` in 0.4.0; ``eval`` at PRIME-RL's
verifiers pin, where tests/test_pin.py runs this file too) reads one of
``configs/glyph/eval_*.toml``, with the reference server's URL and policy
on the command line, exactly as REPRODUCTION.md runs them against a checkpoint. The reference server records
what reaches it: every prompt rendered by the Qwen3 renderer with thinking off
(the RL rollouts' token path) and greedy sampling with 512 new tokens a turn.
The study's eval files (``configs/study/eval_*.toml``) go through chat
completions instead, as the study's ``scripts/evaluate.sh`` did, with its
4096-token cap, over which a rollout fails (``glyph.envs.mbpp.token_cap``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from glyph.data import mbpp
from glyph.demo import read_rollouts
from glyph.policies.policies import Planner
from glyph.policies.server import PolicyServer
from glyph.vfcompat import eval_command

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "glyph"
THINKING_OFF_PROMPT_END = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def tokdir() -> str:
    from glyph.render import offline_tokenizer_dir

    return str(offline_tokenizer_dir())


@pytest.fixture(scope="module")
def server(mbpp_tasks, tokdir):
    """The reference policies, recording each /inference/v1/generate request's
    prompt ids and sampling parameters."""
    with PolicyServer(mbpp_tasks, tokenizer=tokdir) as s:
        s.seen = {"prompts": [], "sampling": []}
        prompt_messages, generate = s.prompt_messages, s.generate

        def record_prompt(token_ids):
            s.seen["prompts"].append(list(token_ids))
            return prompt_messages(token_ids)

        def record_sampling(content, sampling, prompt_len):
            s.seen["sampling"].append(dict(sampling))
            return generate(content, sampling, prompt_len)

        s.prompt_messages, s.generate = record_prompt, record_sampling
        yield s


def run_eval(server, tokdir, out: Path, *configs: str, extra: tuple[str, ...] = ()) -> list[dict]:
    cmd = eval_command(
        *[t for name in configs for t in ("@", str(CONFIGS / f"{name}.toml"))],
        "--client.base-url",
        server.base_url,
        "--client.renderer-model-name",
        tokdir,
        "-m",
        "mix",
        "--no-rich",
        "-o",
        str(out),
        *extra,
    )
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_rollouts(out)


@pytest.mark.parametrize("arm", ["a", "b"])
def test_the_validation_eval_runs_greedy_on_the_rl_token_path(arm, tmp_path, server, tokdir, mbpp_tasks):
    seen_before = len(server.seen["prompts"])
    rows = run_eval(
        server, tokdir, tmp_path, f"eval_validation_arm_{arm}", extra=("-n", "6")
    )
    planner = Planner(mbpp_tasks)
    validation = {
        f"mbpp_{i}" for i in mbpp.make_splits({t.task_id for t in mbpp_tasks.values()})["validation"]
    }
    assert len(rows) == 6 and {r["task"] for r in rows} <= validation
    for r in rows:
        policy = planner.resolve("mix", mbpp_tasks[r["task"]])
        assert r["ok"] and not r["errors"], r
        assert r["reward"] == (0.0 if policy == "hack" else 1.0), (arm, r["task"], policy, r["reason"])
    prompts, sampling = server.seen["prompts"][seen_before:], server.seen["sampling"][seen_before:]
    assert prompts and len(prompts) == len(sampling)
    tok = server.tokenizer
    assert all(
        tok.decode(p[-12:], skip_special_tokens=False).endswith(THINKING_OFF_PROMPT_END) for p in prompts
    )
    assert all((s.get("temperature"), s.get("max_tokens")) == (0.0, 512) for s in sampling), sampling[:2]


@pytest.mark.parametrize("arm", ["a", "b"])
def test_the_test_split_configs_resolve(arm, tmp_path, server, tokdir):
    run_eval(server, tokdir, tmp_path, f"eval_test_arm_{arm}", extra=("--dry-run",))
    [resolved] = tmp_path.glob("**/eval.json")
    config = json.loads(resolved.read_text())
    assert config["env"]["taskset"] | {"arm": arm, "split": "test", "profile": "glyph"} == config["env"]["taskset"]
    harness = config["env"]["agent"]["harness"]
    assert (harness["max_tool_calls"], harness["tool_timeout"], harness["test_cost"]) == (8, 30.0, 1)
    assert config["client"]["type"] == "train" and config["client"]["renderer"]["enable_thinking"] is False
    assert (config["sampling"]["temperature"], config["sampling"]["max_tokens"]) == (0.0, 512)


def test_the_costly_overlay_reaches_the_harness(tmp_path, server, tokdir):
    """eval_costly.toml: a visible test costs 4 of 8 units, so the recover policy (patch,
    failing test, patch, test) runs out of budget; a REVISE shows the shadow outcome."""
    [recover] = run_eval(
        server,
        tokdir,
        tmp_path / "a",
        "eval_validation_arm_a",
        "eval_costly",
        extra=("-n", "1", "-m", "recover"),
    )
    assert recover["reward"] == 0.0 and recover["metrics"]["budget_exhausted"] == 1.0, recover
    [revise] = run_eval(
        server,
        tokdir,
        tmp_path / "b",
        "eval_validation_arm_b",
        "eval_costly",
        extra=("-n", "1", "-m", "revise"),
    )
    assert revise["metrics"]["revise_count"] >= 1, revise
    [traces] = (tmp_path / "b").glob("**/traces.jsonl")
    assert "(shadow test of the revised candidate:" in traces.read_text()


STUDY = CONFIGS.parent / "study"


@pytest.fixture(scope="module")
def chat_server(mbpp_tasks):
    """The reference policies answering chat completions, recording every request's messages."""
    with PolicyServer(mbpp_tasks, record=True) as s:
        yield s


def run_study_eval(server, out: Path, *configs: str, extra: tuple[str, ...] = ()) -> list[dict]:
    """A study eval file as REPRODUCTION.md runs it against a served checkpoint: no token path."""
    cmd = eval_command(*[t for name in configs for t in ("@", str(STUDY / f"{name}.toml"))],
                       "--client.base-url", server.base_url, "-m", "mix", "--no-rich", "-o", str(out), *extra)
    env = dict(os.environ, PRIME_RUNS_MODE="disabled", HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_rollouts(out)


def calls(out: Path) -> list[dict]:
    """Every model call the eval's traces record (each episode's traces' ``calls``)."""
    return [c for line in next(out.glob("**/traces.jsonl")).read_text().splitlines()
            for t in json.loads(line)["traces"] for c in t.get("calls", [])]


def test_the_study_eval_runs_through_chat_completions(tmp_path, chat_server, server):
    """configs/study/eval_*: the study's scripts/evaluate.sh: verifiers' default client, so the messages
    reach the server's chat completions (no token path), greedy, 512 tokens a turn, a 4096-token cap."""
    tokens_before, chats_before = len(server.seen["prompts"]), len(chat_server.received)
    rows = run_study_eval(chat_server, tmp_path, "eval_validation_arm_b", extra=("-n", "4"))
    assert len(rows) == 4 and all(r["ok"] and not r["errors"] for r in rows), rows
    assert any(r["reward"] == 1.0 for r in rows) and not any("token cap" in r["reason"] for r in rows), rows
    assert len(chat_server.received) > chats_before and len(server.seen["prompts"]) == tokens_before
    assert all(m[0]["role"] == "system" for m in chat_server.received[chats_before:])
    sampled = [c["sampling"] for c in calls(tmp_path)]
    assert sampled, tmp_path
    assert all((s.get("temperature"), s.get("max_tokens")) == (0.0, 512) for s in sampled), sampled[:2]
    run_study_eval(chat_server, tmp_path / "resolved", "eval_test_arm_b", extra=("--dry-run",))
    [resolved] = (tmp_path / "resolved").glob("**/eval.json")
    config = json.loads(resolved.read_text())
    assert config["client"]["type"] == "eval" and config["env"]["agent"]["max_total_tokens"] == 4096


def test_over_the_study_cap_is_a_failure(tmp_path, chat_server):
    """Over the cap (here 5 tokens: every first reply crosses it), every rollout fails with the reason."""
    rows = run_study_eval(chat_server, tmp_path, "eval_validation_arm_a",
                          extra=("-n", "3", "--env.agent.max-total-tokens", "5"))
    assert len(rows) == 3 and all(r["reward"] == 0.0 for r in rows), rows
    assert all("failed by the token cap" in r["reason"] for r in rows), [r["reason"] for r in rows]
