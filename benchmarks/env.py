"""Environment overhead: what glyph-mbpp costs per episode with no model
latency, and 64 rollouts at once through vf-eval.

1. Episodes of the agent program against the reference-policy server (the
   ``oracle`` and ``revise`` policies), both arms interleaved in one run: the
   program's loop, every python_test graded by the trusted service in the
   sandbox, and finalize's re-grades. Prints median/p95 ms per arm and
   ``ratio=`` (Arm B median / Arm A median).
2. ``vf-eval glyph-mbpp -n 64 -c 64 -m mix`` (Arm B): wall time, errors, and
   rollouts rewarded as their policy should be.

    uv run python benchmarks/env.py [--mbpp-path PATH] [--episodes 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from glyph.data import mbpp
from glyph.demo import read_rollouts, vf_eval_command
from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.policies.policies import Planner
from glyph.sandbox import get_sandbox
from glyph.testing.rollout import Rollouts

HARNESS = GlyphHarnessConfig(profile="glyph")  # glyph's harness: budget 8, tool_timeout 10


def one_episode(root: Path, rollouts: Rollouts, task, arm: str, policy: str) -> float:
    t0 = time.perf_counter()
    info = rollouts.play(task, arm, policy, Path(tempfile.mkdtemp(dir=root))).record
    elapsed = time.perf_counter() - t0
    if info.reward != 1.0:
        raise RuntimeError(f"{task.id} {arm} {policy}: not rewarded: {info.reason}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mbpp-path")
    ap.add_argument("--episodes", type=int, default=40, help="episodes per arm and policy")
    ap.add_argument("--concurrent", type=int, default=64)
    args = ap.parse_args()
    data_path = args.mbpp_path or os.environ.get(mbpp.ENV_VAR)
    tasks = {t.id: t for t in mbpp.load_source(data_path).tasks}
    sft = mbpp.make_splits([t.task_id for t in tasks.values()])["sft"]
    sample = [tasks[f"mbpp_{i}"] for i in sft[: args.episodes]]
    get_sandbox().protections()
    console = Console()
    times: dict[tuple[str, str], list[float]] = {}
    with Rollouts(tasks, HARNESS) as rollouts, tempfile.TemporaryDirectory() as tmp:
        server = rollouts.policies
        planner = Planner(tasks)
        for t in sample:  # find the mutations once, outside the timings (the policy's own work)
            planner.mutant(t)
            server.planner._mutants[t.task_id] = planner.mutant(t)
        for task in track(sample, description="episodes (both arms, oracle and revise)"):
            for policy in ("oracle", "revise"):
                for arm in ("a", "b"):
                    times.setdefault((arm, policy), []).append(one_episode(Path(tmp), rollouts, task, arm, policy))
        table = Table(title="episode overhead (reference policy, no model latency)")
        for col in ("arm", "policy", "episodes", "median ms", "p95 ms"):
            table.add_column(col, justify="left" if col in ("arm", "policy") else "right")
        for (arm, policy), ts in sorted(times.items()):
            q = statistics.quantiles(ts, n=20)
            table.add_row(arm, policy, str(len(ts)), f"{statistics.median(ts) * 1000:.1f}", f"{q[18] * 1000:.1f}")
        console.print(table)
        med = {arm: statistics.median(times[(arm, "oracle")] + times[(arm, "revise")]) for arm in ("a", "b")}

        out = Path(tmp) / "concurrent"
        cmd = vf_eval_command(server.base_url, "mix", "b", args.concurrent, out, data_path,
                              ["-c", str(args.concurrent)])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PRIME_RUNS_MODE="disabled"))
        wall = time.perf_counter() - t0
        rows = read_rollouts(out)
        errors = sum(not r["ok"] for r in rows) + (proc.returncode != 0)
        as_expected = sum(r["ok"] and r["reward"] == (0.0 if planner.resolve("mix", tasks[r["task"]]) == "hack"
                                                      else 1.0) for r in rows)
    print(f"arm A median {med['a'] * 1000:.1f} ms, arm B median {med['b'] * 1000:.1f} ms per episode")
    print(f"{args.concurrent} concurrent rollouts (vf-eval, arm B, mix): {wall:.1f} s wall including vf-eval start, "
          f"{len(rows)} rollouts, {errors} errors, {as_expected} rewarded as their policy should be")
    print(f"ratio={med['b'] / med['a']:.2f}")


if __name__ == "__main__":
    main()
