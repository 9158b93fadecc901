"""What the label-span rule does to learning the prediction label.

PREDICT's CE term (weight alpha) trains the Arm B label ``<PREDICTION>LABEL</PREDICTION>``
toward the verified outcome, and the sampled label's tokens are held out of RL
credit. Which tokens are "the label" is the span rule (``span_tokens``):

* ``study``: the tokens whose text overlaps the label's *characters*. This is
  the PREDICT study's rule (its ``src/glyph/prime_rl.py:49-75`` for the rl=0
  mask and ``:153-173`` for the CE targets: ``end > label_start and start <
  label_end`` over the re-encoded text's offsets). Qwen3's byte-level BPE
  merges the tag's ``>`` into ``>P`` (PASS) and ``>R`` (RUNTIME_ERROR) but
  leaves a lone ``>`` before ASSERTION_FAILURE, SYNTAX_ERROR, TIMEOUT and
  OTHER, so the token where ``>`` competes with ``>P`` / ``>R`` is a CE target
  for PASS and RUNTIME_ERROR only, and keeps its RL credit for the other four.
* ``decision``: glyph's rule (``glyph.predict.annotate.label_token_span``): from the
  token holding the tag's ``>`` through the token holding the label's last
  byte, so every label's CE reaches that first decision token.

The experiment, per seed (the same warmed-up model for both rules):

1. A tiny random Qwen3 (``Qwen3ForCausalLM``, the real Qwen3 vocabulary from
   ``glyph.render.load_tokenizer()``, offline, CPU) is warmed up to always
   predict PASS: CE on PASS's label tokens at every context, as the study's SFT
   checkpoint did ("100% PASS at ... RL step 0", the study's ``docs/blog.md``).
2. Then PREDICT steps with glyph's reference loss
   (``testkit.reference_loss.predict_loss``, PRIME-RL's trainer loss at
   the pin): each context's verified outcome is drawn from the study's outcome
   mix and named by a one-token cue word in the user turn, so it is learnable;
   the policy samples its label from its own distribution over the six labels;
   the sampled turn gets rl 1 on its tokens and 0 on the sampled label's span,
   with an advantage from a reward that does not depend on the label (in the
   study the reward is the task's, never the prediction's); ce alpha on the
   span in place when sampled == verified, otherwise a CE-only sample
   (``Sample.ce_only``) of the verified turn, CE on its span. Only the span
   rule differs between the arms.
3. Per-class recall on held-out contexts (fresh task numbers and names): the
   predicted label is the argmax over the six labels' full token sequences,
   each scored from the shared prefix (which ends before the token holding the
   ``>``) as the sum of its tokens' logprobs, i.e. the label the model is most
   likely to write. ``p(">")`` is the mean probability of the lone ``>`` token
   at the decision position on ASSERTION_FAILURE contexts.

Run with an interpreter that has torch and transformers (the pinned stack's
venv that ``tests/pinstack.py`` builds has CPU torch), glyph on the path::

    PYTHONPATH=. nice -n 10 ~/.cache/glyph/pin/venv-<key>/bin/python benchmarks/label_span.py \\
        [--steps 30] [--seeds 3] [--quick]

or ``uv sync --group train`` and ``uv run python benchmarks/label_span.py``.
The last line is ``af_recall study=<x> decision=<y>``: ASSERTION_FAILURE
recall, mean over seeds.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glyph.predict.annotate import PredictionNotFound, TokenBytes, label_token_span

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root (testkit/)

LABELS = ("PASS", "RUNTIME_ERROR", "ASSERTION_FAILURE", "SYNTAX_ERROR", "TIMEOUT", "OTHER")
# The study's verified-outcome mix at RL step 100 (its docs/blog.md:178-182: ASSERTION_FAILURE
# 57-59%, RUNTIME_ERROR 15-16%, PASS 22-23%); the remaining ~4% split over the rare classes.
OUTCOME_MIX = {"ASSERTION_FAILURE": 0.57, "PASS": 0.23, "RUNTIME_ERROR": 0.16,
               "SYNTAX_ERROR": 0.02, "TIMEOUT": 0.01, "OTHER": 0.01}
# One single-token cue word per outcome (checked at start), so the context determines the label.
CUES = {"PASS": "green", "RUNTIME_ERROR": "crashed", "ASSERTION_FAILURE": "mismatch",
        "SYNTAX_ERROR": "typo", "TIMEOUT": "stalls", "OTHER": "weird"}
TRAIN_NAMES = ["merge_lists", "count_vowels", "find_max", "is_prime", "sum_digits", "reverse_words",
               "flatten", "gcd", "rotate", "unique_sorted", "median", "to_binary"]
HELD_OUT_NAMES = ["parse_date", "bubble_sort", "lcm", "word_count", "clamp"]
RULES = ("study", "decision")
ALPHA = 0.1  # the study's alpha (its configs/arm_b_rl.toml:27) and glyph's default
QWEN3_VOCAB = 151936  # Qwen3's embedding rows (the tokenizer's ids, padded)


def span_tokens(token_ids: Sequence[int], tokenizer: Any, rule: str) -> list[int]:
    """Indices into ``token_ids`` of the label tokens of the one
    ``<PREDICTION>LABEL</PREDICTION>`` they hold, under ``rule``: PREDICT's own
    span (``glyph.predict.annotate.label_token_span``, the rule its
    ``label_span`` config names), so the benchmark trains exactly what
    PREDICT trains. Raises ``ValueError`` for an unknown rule or unless the ids
    hold exactly one valid prediction."""
    if rule not in RULES:
        raise ValueError(f"unknown span rule {rule!r}; expected one of {RULES}")
    try:
        start, end = label_token_span(token_ids, TokenBytes(tokenizer), rule)
    except PredictionNotFound as exc:
        raise ValueError(str(exc)) from None
    return list(range(start, end))


# ---- the experiment (torch from here on) ---------------------------------------------------------

def context_ids(tok, name: str, number: int, label: str) -> list[int]:
    from glyph.render import render_ids

    messages = [{"role": "user", "content": f"Task {number}: fix {name}. Log of the candidate: {CUES[label]}."}]
    return render_ids(messages, tok, add_generation_prompt=True)


class Turns:
    """The agent's prediction turn after each label, tokenized once: its ids and spans per rule."""

    TEXT = "Checking.\n<PREDICTION>{label}</PREDICTION>\n<DECISION>KEEP</DECISION>"

    def __init__(self, tok) -> None:
        self.ids = {lab: tok(self.TEXT.format(label=lab), add_special_tokens=False)["input_ids"]
                    for lab in LABELS}
        self.span = {(lab, rule): span_tokens(self.ids[lab], tok, rule) for lab in LABELS for rule in RULES}
        starts = {self.span[lab, "decision"][0] for lab in LABELS}
        assert len(starts) == 1, "the labels' turns must share the prefix before the decision token"
        self.decision_at = starts.pop()
        self.prefix = self.ids[LABELS[0]][:self.decision_at]
        assert all(self.ids[lab][:self.decision_at] == self.prefix for lab in LABELS)
        self.lone_gt = self.ids["ASSERTION_FAILURE"][self.decision_at]
        assert tok.decode([self.lone_gt]) == ">"


def tiny_qwen3(seed: int, hidden: int):
    import torch
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=QWEN3_VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=256,
        tie_word_embeddings=True, attn_implementation="eager")
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).train()


def label_scores(model, turns: Turns, contexts: list[list[int]]):
    """(contexts x 6) summed logprob of each label's decision-span tokens after each context,
    and p(lone ">") at the decision position; under the caller's grad mode."""
    import torch

    from testkit.reference_loss import Sample, token_logprobs

    samples = []
    for ctx in contexts:
        for lab in LABELS:
            span = turns.span[lab, "decision"]
            ids = turns.ids[lab]
            samples.append(Sample.ce_only(ctx + ids[:span[0]], ids[span[0]:span[-1] + 1], 1.0))
    lps = token_logprobs(model, samples, weighted_only=True)
    scores = torch.stack([lp[s.ce_tokens].sum() for s, lp in zip(samples, lps)]).view(len(contexts), len(LABELS))
    af = LABELS.index("ASSERTION_FAILURE")
    # AF's first span token is the lone ">": its logprob at the decision position.
    p_gt = torch.stack([lps[k * len(LABELS) + af][samples[k * len(LABELS) + af].ce_tokens][0]
                        for k in range(len(contexts))]).exp()
    return scores, p_gt


def evaluate(model, turns: Turns, held_out: list[tuple[list[int], str]]) -> dict:
    import torch

    with torch.no_grad():
        scores, p_gt = label_scores(model, turns, [c for c, _ in held_out])
    predicted = scores.argmax(1).tolist()
    truth = [LABELS.index(lab) for _, lab in held_out]
    recall = {}
    for k, lab in enumerate(LABELS):
        rows = [i for i, t in enumerate(truth) if t == k]
        recall[lab] = sum(predicted[i] == k for i in rows) / len(rows)
    af_rows = [i for i, t in enumerate(truth) if LABELS[t] == "ASSERTION_FAILURE"]
    counts = {lab: predicted.count(k) for k, lab in enumerate(LABELS)}
    return {"recall": recall, "p_gt": float(p_gt[af_rows].mean()), "predicted": counts}


def warm_up(model, tok, turns: Turns, rng: random.Random, steps: int, batch: int, lr: float) -> None:
    """CE toward PASS at every context: the always-PASS starting checkpoint."""
    import torch

    from testkit.reference_loss import Sample, predict_loss, token_logprobs

    span = turns.span["PASS", "decision"]  # == the study's span for PASS: ">P", "ASS"
    ids = turns.ids["PASS"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for _ in range(steps):
        samples = [Sample.ce_only(
            context_ids(tok, rng.choice(TRAIN_NAMES), rng.randrange(100, 1000), rng.choice(LABELS))
            + ids[:span[0]], ids[span[0]:span[-1] + 1], ALPHA) for _ in range(batch)]
        loss, _ = predict_loss(token_logprobs(model, samples, weighted_only=True), samples)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def predict_step_samples(model, tok, turns: Turns, rng: random.Random, batch: int, rule: str):
    """One PREDICT step's samples under ``rule``; and how many sampled labels were right."""
    import torch

    from testkit.reference_loss import Sample

    verified = rng.choices(list(OUTCOME_MIX), weights=list(OUTCOME_MIX.values()), k=batch)
    contexts = [context_ids(tok, rng.choice(TRAIN_NAMES), rng.randrange(100, 1000), lab) for lab in verified]
    with torch.no_grad():
        scores, _ = label_scores(model, turns, contexts)
        probs = scores.softmax(1)  # the policy's distribution over the six labels it can write
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    sampled = [LABELS[int(i)] for i in torch.multinomial(probs, 1, generator=gen).squeeze(1)]
    # Task reward independent of the label (Bernoulli 1/2), advantage = reward - batch mean.
    rewards = [float(rng.random() < 0.5) for _ in range(batch)]
    baseline = sum(rewards) / batch
    samples, right = [], 0
    for ctx, want, got, reward in zip(contexts, verified, sampled, rewards):
        ids = ctx + turns.ids[got]
        mask = [False] * len(ctx) + [True] * len(turns.ids[got])
        span = {len(ctx) + i for i in turns.span[got, rule]}
        rl = [0.0 if (i in span or not m) else 1.0 for i, m in enumerate(mask)]
        in_place = got == want
        right += in_place
        ce = [ALPHA if in_place and i in span else 0.0 for i in range(len(ids))]
        adv = reward - baseline
        # Inference logprobs are filled in by train_predict (on-policy: the trainer's own, detached).
        samples.append(Sample(token_ids=ids, mask=mask, inference_logprobs=[0.0] * len(ids),
                              advantages=[adv if m else 0.0 for m in mask], rl_weights=rl,
                              ce_weights=ce if in_place else None))
        if not in_place:
            vspan = turns.span[want, rule]
            vids = turns.ids[want]
            samples.append(Sample.ce_only(ctx + vids[:vspan[0]], vids[vspan[0]:vspan[-1] + 1], ALPHA))
    return samples, right


def train_predict(model, tok, turns: Turns, rng: random.Random, steps: int, batch: int, lr: float,
                  rule: str) -> float:
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    right = 0
    for _ in range(steps):
        samples, ok = predict_step_samples(model, tok, turns, rng, batch, rule)
        right += ok
        on_policy_step(model, optimizer, samples)
    return right / (steps * batch)


def on_policy_step(model, optimizer, samples) -> None:
    """One optimizer step of PRIME-RL's trainer loss on ``samples`` (zero-advantage RL tokens pruned, as
    the orchestrator's filter does), on-policy: one forward, whose logprobs are also the sampler's."""
    import torch

    from testkit.reference_loss import predict_loss, prune_zero_advantages, token_logprobs

    samples = [s for s in map(prune_zero_advantages, samples) if s is not None]
    if not samples:
        return
    lps = token_logprobs(model, samples, weighted_only=True)
    # On-policy, one forward: the sampler's logprobs are this step's trainer logprobs (ratio 1).
    samples = [dataclasses.replace(s, inference_logprobs=torch.where(s.mask, lp.detach(), 0.0))
               for s, lp in zip(samples, lps)]
    loss, _ = predict_loss(lps, samples)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def toy_arguments(description: str, steps_help: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """The toy's command line (this benchmark's and ``benchmarks/echo.py``'s): steps, seeds, warm-up,
    batch, learning rate, model width, and ``--quick``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=30, help=steps_help)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=15, help="always-PASS warm-up steps")
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 seed, 8 warm-up and 8 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.warmup, args.steps = 1, 8, 8
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = toy_arguments(__doc__.split("\n\n")[0], "PREDICT steps per rule and seed", argv)

    import torch
    from rich.console import Console
    from rich.table import Table

    from glyph.render import load_tokenizer

    torch.set_num_threads(2)
    console = Console(width=160)  # the table unwrapped when piped to a file
    tok = load_tokenizer()
    for lab, word in CUES.items():
        assert len(tok(" " + word, add_special_tokens=False)["input_ids"]) == 1, (lab, word)
    turns = Turns(tok)
    console.print("label tokens (from the decision token on; [bold]bold[/bold] = study CE / rl-0 span):")
    for lab in LABELS:
        dspan, sspan = turns.span[lab, "decision"], set(turns.span[lab, "study"])
        pieces = [f"[bold]{tok.decode([turns.ids[lab][i]])!r}[/bold]" if i in sspan
                  else repr(tok.decode([turns.ids[lab][i]])) for i in dspan]
        console.print(f"  {lab:<18} " + " ".join(pieces))

    results: dict[str, list[dict]] = {"warm-up": [], "study": [], "decision": []}
    started = time.perf_counter()
    for seed in range(args.seeds):
        rng = random.Random(1000 + seed)
        held_out = [(context_ids(tok, name, rng.randrange(100, 1000), lab), lab)
                    for name in HELD_OUT_NAMES for lab in LABELS for _ in range(2)]
        base = tiny_qwen3(seed, args.hidden)
        warm_up(base, tok, turns, random.Random(seed), args.warmup, args.batch, args.lr)
        results["warm-up"].append(evaluate(base, turns, held_out))
        for rule in RULES:
            model = copy.deepcopy(base)
            train_acc = train_predict(model, tok, turns, random.Random(seed + 7), args.steps, args.batch,
                                      args.lr, rule)
            out = evaluate(model, turns, held_out)
            out["train_acc"] = train_acc
            results[rule].append(out)
            console.print(f"seed {seed} {rule:<8}: AF recall {out['recall']['ASSERTION_FAILURE']:.2f}, "
                          f"p('>') {out['p_gt']:.3f}, predicted {out['predicted']} "
                          f"({time.perf_counter() - started:.0f} s)")

    def mean(rows: list[dict], key) -> float:
        return statistics.fmean(key(r) for r in rows)

    table = Table(title=f"held-out recall after {args.warmup} warm-up + {args.steps} PREDICT steps "
                        f"(batch {args.batch}, alpha {ALPHA}), mean over {args.seeds} seed(s)")
    table.add_column("model")
    for lab in LABELS:
        table.add_column(f"{lab}\n({OUTCOME_MIX[lab]:.0%})", justify="right")
    table.add_column("mix-weighted\naccuracy", justify="right")
    table.add_column("p('>') on AF", justify="right")
    for name, rows in results.items():
        recall = {lab: mean(rows, lambda r, lab=lab: r["recall"][lab]) for lab in LABELS}
        weighted = sum(OUTCOME_MIX[lab] * recall[lab] for lab in LABELS)
        table.add_row("always-PASS warm-up" if name == "warm-up" else f"span rule {name}",
                      *(f"{recall[lab]:.2f}" for lab in LABELS), f"{weighted:.2f}",
                      f"{mean(rows, lambda r: r['p_gt']):.3f}")
    console.print(table)
    console.print(f"recall = argmax over the six labels' full token sequences (summed logprobs); "
                  f"{len(HELD_OUT_NAMES) * 2} held-out contexts per class; {time.perf_counter() - started:.0f} s")
    af = {rule: mean(results[rule], lambda r: r["recall"]["ASSERTION_FAILURE"]) for rule in RULES}
    print(f"af_recall study={af['study']:.2f} decision={af['decision']:.2f}")


if __name__ == "__main__":
    main()
