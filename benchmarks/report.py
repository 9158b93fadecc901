"""``glyph report`` on 10,000 rollouts, on one core.

Builds eight synthetic eval runs (arm A/B x seed 42/43 x checkpoint
sft/step100, 1,250 rollouts each: 250 tasks x 5 samples), half in
``vf-eval`` 0.4.0's layout and half in the PRIME-RL pin's ``eval`` layout,
each episode shaped like a real one on the RL token path (nodes with token
ids, masks and logprobs; ``info.glyph`` with candidates and their contexts;
about 30 KB a line, as the reference policies' train-client eval writes).
About 1% of the rollouts are errored, timed out or tampered. Then times,
pinned to one CPU, what ``glyph report RUN... --out DIR`` does: load and
analyse, print the terminal tables, write report.json, report.md and the
HTML page with its figures.

Prints the input size, the phases, and last ``seconds=<total report time>``.
Target: <= 10 s.

    uv run python benchmarks/report.py [--rollouts 10000] [--keep DIR]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before numpy is imported
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

LABELS = ["PASS", "ASSERTION_FAILURE", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "OTHER"]
SYSTEM = ("You fix a Python function in a small project. " * 40)[:1800]
CELLS = [(arm, seed, ckpt) for arm in "ab" for seed in (42, 43) for ckpt in ("sft", "step100")]


HARNESS = {"max_tool_calls": 8, "test_cost": 1, "revise_feedback": "none", "tool_timeout": 30.0}
"""The harness configuration every synthetic run records (in its config and in each trace)."""


def _node(rng: random.Random, role: str, parent: int | None, tokens: int) -> dict:
    sampled = role == "assistant"
    node = {
        "semantic_parents": [],
        "message": {"role": role, "content": "x" * (tokens * 3)},
        "sampled": sampled,
        "timestamp": 1796061288.11 + rng.random(),
        "token_ids": [rng.randrange(151000) for _ in range(tokens)],
        "mask": [sampled] * tokens,
        "is_content": [sampled] * tokens,
        "logprobs": [round(-rng.random() * 3, 3) for _ in range(tokens)] if sampled else [],
    }
    if parent is not None:
        node["parent"] = parent
    return node


def episode(rng: random.Random, task: int, arm: str, seed: int, ckpt: str, pin: bool) -> dict:
    name = f"mbpp_{11 + task}"
    skill = 0.45 + 0.1 * (ckpt == "step100") + 0.05 * (arm == "a") + 0.3 * ((task * 7919) % 10 < 5)
    data = {
        "name": name,
        "prompt": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Write a function {name}.\n" + "assert f(1) == 2\n" * 3},
        ],
        "arm": arm,
        "task_text": f"Write a function {name}.",
        "visible_tests": ["assert f(1) == 2"] * 3,
        "hidden_setup": "",
        "hidden_tests": ["assert f(1) == 2"] * 3,
        "reference": "def f(x):\n    return x + 1\n",
    }
    task_json = {"type": "GlyphTask", "data": data, "key": "k" * 64, "hash": "k" * 64}
    revised = arm == "b" and rng.random() < 0.2
    passed = rng.random() < (0.05 if revised else skill)
    calls = 8 if revised else rng.randint(3, 7)
    candidates = []
    for i in range(rng.randint(1, 3)):
        last = i == 2 or rng.random() < 0.5
        verified = "PASS" if passed and last else rng.choice(LABELS[1:4])
        cand = {
            "index": i,
            "sha256": "s" * 64,
            "verified_label": verified,
            "sampled_label": None,
            "decision": None,
            "shadow": False,
            "context": [{"role": "user", "content": "RESULT ok\n" * 40}] * 3,
        }
        if arm == "b":
            decision = "REVISE" if revised and not last else "KEEP"
            cand |= {
                "sampled_label": verified if rng.random() < 0.6 else rng.choice(LABELS[:3]),
                "decision": decision,
                "shadow": decision == "REVISE",
            }
        candidates.append(cand)
        if last:
            break
    metrics = {
        "passed": float(passed),
        "visible_tool_calls": float(calls),
        "visible_test_calls": 1.0,
        "budget_exhausted": float(revised),
        "tampered": 0.0,
        "no_trace": 0.0,
        "revise_count": float(sum(c["decision"] == "REVISE" for c in candidates)),
        "predictions": float(sum(c["sampled_label"] is not None for c in candidates)),
    }
    glyph = {
        "reward": float(passed),
        "reason": "passed" if passed else "no visible test passed",
        "tamper": [],
        "candidates": candidates,
        "final_outcome": "PASS" if passed else "ASSERTION_FAILURE",
        "metrics": metrics,
        "program": {"exit_code": 0, "stderr": ""},
    }
    nodes = [_node(rng, "system", None, 270), _node(rng, "user", 0, 90)]
    for _ in range(calls):
        nodes += [_node(rng, "assistant", len(nodes) - 1, 60), _node(rng, "user", len(nodes), 30)]
    trace = {
        "version": 1,
        "id": f"{rng.getrandbits(64):x}",
        "verifiers": {"version": "0.3.1.dev62" if pin else "0.4.0"},
        "task": task_json,
        "agent": {
            "config": {
                "harness": {"id": "glyph-mbpp", **HARNESS},
                "model": ckpt,
                "sampling": {"temperature": 0.0, "max_tokens": 512, "seed": seed},
            },
            "name": "agent",
        },
        "nodes": nodes,
        "calls": [{"node": 2 * i + 2, "model": ckpt, "finish_reason": "stop"} for i in range(calls)],
        "rewards": {"passed": {"score": float(passed), "weight": 1.0}},
        "metrics": metrics,
        "info": {
            "glyph_service_log": [{"sha256": "s" * 64, "outcome": "PASS", "shadow": False}],
            "glyph_program": {"exit_code": 0, "stderr": ""},
            "glyph": glyph,
        },
        "ok": True,
        "stop_condition": "agent_completed",
        "errors": [],
    }
    ep = {
        "id": f"{rng.getrandbits(64):x}",
        "env": {"id": "glyph-mbpp"},
        "task": task_json,
        "run": {"type": "eval", "id": "r", "name": "bench"},
        "ok": True,
        "errors": [],
        "traces": [trace],
    }
    roll = rng.random()
    if roll < 0.005:  # errored (the pin: unscored, no info.glyph)
        trace |= {
            "ok": False,
            "rewards": {},
            "metrics": {},
            "info": {},
            "stop_condition": "error",
            "errors": [{"type": "ProviderError", "message": "upstream 500", "status_code": 500}],
        }
        ep["ok"] = False
    elif roll < 0.008:  # timed out
        if pin:
            trace |= {
                "ok": False,
                "rewards": {},
                "metrics": {},
                "info": {},
                "errors": [
                    {"type": "HarnessError", "message": "agent timeout: rollout exceeded its 600s budget"}
                ],
            }
            ep["ok"] = False
        else:
            trace |= {"is_timeout": True, "rewards": {"passed": {"score": 0.0, "weight": 1.0}}}
            glyph |= {"reward": 0.0, "reason": "the rollout timed out; the program did not finish"}
    elif roll < 0.011:  # tampered
        metrics |= {"tampered": 1.0, "passed": 0.0}
        glyph |= {
            "reward": 0.0,
            "tamper": ["test 3: recorded PASS, re-grade ASSERTION_FAILURE"],
            "reason": "tampered: test 3: recorded PASS, re-grade ASSERTION_FAILURE",
        }
        trace["rewards"] = {"passed": {"score": 0.0, "weight": 1.0}}
    return ep


def build(root: Path, rollouts: int) -> list[Path]:
    rng = random.Random(0)
    per_cell = rollouts // len(CELLS)
    tasks = max(1, per_cell // 5)
    dirs = []
    for i, (arm, seed, ckpt) in enumerate(CELLS):
        pin = i % 2 == 1
        run = root / f"arm-{arm}-seed{seed}-{ckpt}" / "glyph-mbpp--run"
        (run / ("configs" if pin else "configs/resolved")).mkdir(parents=True)
        config = {
            "env": {
                "taskset": {"id": "glyph-mbpp", "arm": arm, "split": "test", "seed": 42},
                "agent": {
                    "harness": HARNESS
                },
            },
            "model": ckpt,
            "sampling": {"temperature": 0.0, "max_tokens": 512, "seed": seed},
            "num_rollouts": per_cell // tasks,
        }
        (run / ("configs/eval.json" if pin else "configs/resolved/eval.json")).write_text(json.dumps(config))
        with (run / "traces.jsonl").open("w") as f:
            for j in range(per_cell):
                f.write(
                    json.dumps(episode(rng, j % tasks, arm, seed, ckpt, pin), separators=(",", ":")) + "\n"
                )
        dirs.append(run.parent)
    return dirs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rollouts", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, help="build the runs here and keep them")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    root = args.keep or Path(tempfile.mkdtemp(prefix="glyph-report-bench-"))
    try:
        t0 = time.perf_counter()
        dirs = build(root, args.rollouts)
        size = sum(p.stat().st_size for p in root.rglob("traces.jsonl"))
        print(
            f"built {args.rollouts} rollouts in {len(dirs)} runs: {size / 1e6:.0f} MB of traces.jsonl "
            f"({size / args.rollouts / 1e3:.1f} KB a rollout) in {time.perf_counter() - t0:.1f} s"
        )
        print(f"cpus: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}")

        t0 = time.perf_counter()
        from rich.console import Console

        from glyph.report import analysis, write
        from glyph.report.load import load
        from glyph.report.tables import tables
        from glyph.report.terminal import render

        t_import = time.perf_counter() - t0
        t = time.perf_counter()
        runs, rows, notes = load(dirs)
        t_load = time.perf_counter() - t
        t = time.perf_counter()
        doc = analysis.build(runs, rows, analysis.Options(), notes)
        t_build = time.perf_counter() - t
        t = time.perf_counter()
        console = Console(file=io.StringIO(), width=200)
        for tab in tables(doc):
            console.print(render(tab))
        t_term = time.perf_counter() - t
        t = time.perf_counter()
        out = root / "report"
        write(doc, out)
        t_write = time.perf_counter() - t
        total = time.perf_counter() - t0
        assert len(rows) == args.rollouts and len(doc["cells"]) == len(CELLS)
        print(
            f"imports {t_import:.2f} s; load {t_load:.2f} s; analysis {t_build:.2f} s; terminal tables "
            f"{t_term:.2f} s; json + markdown + html with {len(doc['cells'])} cells' figures {t_write:.2f} s"
        )
        print(
            f"cells {len(doc['cells'])}, comparisons {len(doc['comparisons'])}, "
            f"incidents {len(doc['incidents'])}, "
            f"html {(out / 'report.html').stat().st_size / 1e3:.0f} KB"
        )
        print(f"seconds={total:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
