"""PREDICT's cost: extra trainer tokens and annotation time per rollout.

Arm B rollouts of ~4k tokens, laid out as the PRIME-RL pin's message graph
(Qwen3 chat scaffold, thinking off; real Qwen3 vocabulary), each with several
predictions, at 0%, 50% and 100% wrong predictions. Side by side, in one run:

* the study's method: one re-rendered sample per prediction (the context
  before the prediction turn, rendered again, then the turn up to
  ``<PREDICTION>VERIFIED</PREDICTION>``), right or wrong;
* glyph's (``glyph.predict.annotate``): in-place CE on the policy's own tokens
  when the prediction was right (no extra tokens), a CE-only branch at the
  same prefix only when it was wrong.

Prints extra trainer tokens per rollout token for both, glyph's annotation
time per rollout (p50/p95, warm tokenizer cache, as in a long-lived
orchestrator), and last ``ratio=<study extra tokens / glyph extra tokens at
50% wrong>``. Targets: glyph's extra = the study's x the wrong share (0 at
100% accuracy); annotation <= 1 ms p50 per 4k-token rollout.

    uv run python benchmarks/predict.py [--rollouts 40] [--repeats 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from glyph.agent.profiles import glyph as protocol
from glyph.agent.profiles.base import Call
from glyph.outcomes import Outcome
from glyph.predict.annotate import TokenBytes, annotate
from glyph.record import VerifiedCandidate
from glyph.render import load_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root (testkit/)
from testkit.graph_layout import GENERATION_PROMPT as GEN  # noqa: E402
from testkit.graph_layout import layout  # noqa: E402

TARGET_TOKENS = 4096
PREDICTIONS = 4


def rollout(tok, rng: random.Random, wrong: int) -> tuple[list[tuple[str, str]], list[VerifiedCandidate]]:
    """An Arm B conversation of ~TARGET_TOKENS tokens with PREDICTIONS predictions, ``wrong`` wrong."""
    lines = [f"    value_{i} = compute(items[{i}], {rng.randint(0, 999)})  # step {i}" for i in range(125)]
    source = "def solve(items):\n" + "\n".join(lines) + "\n    return value_0\n"
    turns = [
        ("system", protocol.system_prompt("b")),
        ("user", "Write solve(items). Your code must pass these tests:\n\nassert solve([1, 2]) == 3"),
    ]
    call_id = iter(range(1, 100))
    turns.append(
        (
            "assistant",
            "Let me look at the file.\n"
            + protocol.call_line(Call(str(next(call_id)), "read_file", {"path": "solution.py"})),
        )
    )
    turns.append(("user", protocol.result_message(Call("1", "read_file", {}), "ok", source, 7)))
    labels = [o.value for o in Outcome]
    wrong_at = set(rng.sample(range(PREDICTIONS), wrong))  # early and late predictions alike
    cands = []
    for k in range(PREDICTIONS):
        patch = Call(
            str(next(call_id)),
            "apply_patch",
            {"path": "solution.py", "find": f"value_{k} =", "replace": f"value_{k} = 1 +"},
        )
        turns.append(("assistant", f"Fix step {k}.\n{protocol.call_line(patch)}"))
        turns.append(("user", protocol.result_message(patch, "ok", "", 6 - k)))
        sampled = rng.choice(labels)
        verified = rng.choice([x for x in labels if x != sampled]) if k in wrong_at else sampled
        test = Call(str(next(call_id)), "python_test", {})
        turn = (f"Checking.\n<PREDICTION>{sampled}</PREDICTION>\n<DECISION>KEEP</DECISION>\n"
                f"{protocol.call_line(test)}")
        cands.append(
            VerifiedCandidate(
                index=k,
                sha256="0" * 64,
                sampled_label=sampled,
                verified_label=verified,
                context=[{"role": r, "content": c} for r, c in turns],
                prediction_turn=turn,
            )
        )
        turns.append(("assistant", turn))
        turns.append(("user", protocol.result_message(test, verified, "", 5 - k)))
    turns.append(("assistant", "FINAL: done."))
    return turns, cands


def study_extra(tok, cands) -> int:
    """One re-rendered sample per prediction: context + generation prompt + turn up to the verified label."""
    total = 0
    for c in cands:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in c.context)
        head = c.prediction_turn.split("<PREDICTION>")[0]
        text += GEN + f"{head}<PREDICTION>{c.verified_label}</PREDICTION>"
        total += len(tok.encode(text, add_special_tokens=False))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollouts", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=200, help="timed annotations per wrong-share")
    args = ap.parse_args()
    console = Console(width=120)
    tok = load_tokenizer()
    tb = TokenBytes(tok)
    encode = lambda text: tok.encode(text, add_special_tokens=False)  # noqa: E731
    rng = random.Random(0)
    table = Table(title=f"PREDICT cost per Arm B rollout ({PREDICTIONS} predictions each)")
    for col in ("wrong", "tokens", "study extra/tok", "glyph extra/tok", "glyph/study", "p50 ms", "p95 ms"):
        table.add_column(col, justify="right")
    at_half = None
    for wrong in (0, PREDICTIONS // 2, PREDICTIONS):
        rollouts = [rollout(tok, rng, wrong) for _ in range(args.rollouts)]
        tokens = study = ours = 0
        for turns, cands in rollouts:
            nodes = layout(tok, turns)
            tokens += sum(len(n.token_ids) for n in nodes)
            study += study_extra(tok, cands)
            out = annotate(nodes, cands, tb, encode, alpha=0.1, max_tokens=8192)
            assert out.unlocated == 0 and out.grafted == wrong, out
            ours += out.graft_tokens
        fresh = [layout(tok, rollouts[i % len(rollouts)][0]) for i in range(args.repeats)]
        times = []
        for i, nodes in enumerate(fresh):
            cands = rollouts[i % len(rollouts)][1]
            t0 = time.perf_counter()
            annotate(nodes, cands, tb, encode, alpha=0.1, max_tokens=8192)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        share = wrong / PREDICTIONS
        table.add_row(
            f"{share:.0%}",
            f"{tokens / len(rollouts):.0f}",
            f"{study / tokens:.3f}",
            f"{ours / tokens:.3f}",
            f"{ours / study:.3f}",
            f"{statistics.median(times):.3f}",
            f"{times[int(0.95 * (len(times) - 1))]:.3f}",
        )
        if wrong == PREDICTIONS // 2:
            at_half = study / ours
    console.print(table)
    console.print(
        "glyph's extra tokens are the study's x the wrong share when glyph / study equals the wrong share."
    )
    print(f"ratio={at_half:.2f}")


if __name__ == "__main__":
    main()
