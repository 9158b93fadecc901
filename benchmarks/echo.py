"""ECHO's observation CE against PREDICT's verified-label CE: what each teaches, on a tiny model.

The question issue 37 asks of the 2x2 is "is it the prediction, or just supervising on
outcomes?". ECHO (PRIME-RL's ``echo`` at the pin) trains cross-entropy on the
environment's observation after the action (here the ``python_test`` result); PREDICT
trains it on the verified outcome label at the earlier prediction point, before the
test runs. This benchmark is evidence about that mechanism on a toy, not a replication
of anything: a tiny random Qwen3 (the real Qwen3 vocabulary, offline, CPU), glyph's
profile's chat format rendered by its renderer (``glyph.render.renderer``, the Qwen3
renderer whose ``is_content`` ECHO reads), one arm B turn per context:

    user       "Task N: fix NAME. Log of the candidate: CUE."      (CUE names the outcome)
    assistant  "Checking.\\n<PREDICTION>L</PREDICTION>\\n<DECISION>KEEP</DECISION>"   (sampled L)
    user       "RESULT 1 python_test OUTCOME"                      (the observation)

Each context's verified OUTCOME is drawn from the study's outcome mix and named by a
one-token cue (``benchmarks/label_span.py``: the same mix, cues, names, warm-up and
label scoring), so both the label and the observation are learnable from the context.
From one always-PASS warm-up per seed, four trainings with PRIME-RL's trainer loss
(``testkit.reference_loss.predict_loss``), RL on the sampled turn with a reward
independent of the label (the sampled label's tokens out of RL, as PREDICT holds them)
and only the CE differing:

* ``none``: no CE (PREDICT's alpha = 0 control);
* ``echo``: ECHO's CE at alpha on the observation's body tokens (the renderer's
  ``is_content`` of the message after the reply), as ``EchoAlgorithm`` weights them;
* ``predict``: PREDICT's CE at alpha on the verified label (in place when the sampled
  label is right, else a CE-only sample of the verified turn; the ``decision`` span);
* ``both``: both, each term at its own per-token mean (``predict_echo``'s
  ``ce_balance = "separate"``).

Measured on held-out contexts (fresh task numbers and names): the prediction's
accuracy (the argmax label at the prediction point, mix-weighted over the six
classes, and ASSERTION_FAILURE recall) and the observation's (the argmax outcome
in the observation after a turn that predicted PASS and kept).

Run like ``benchmarks/label_span.py`` (an interpreter with torch and transformers,
glyph on the path)::

    PYTHONPATH=. nice -n 10 ~/.cache/glyph/pin/venv-<key>/bin/python benchmarks/echo.py \\
        [--steps 30] [--seeds 3] [--quick]

The last line is ``prediction_accuracy none=.. echo=.. predict=.. both=..`` (mix-weighted,
mean over seeds), then on the same line ``observation_accuracy`` likewise.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from label_span import (  # noqa: E402  (the label-span benchmark's toy: mix, cues, names, warm-up, scoring)
    ALPHA,
    CUES,
    HELD_OUT_NAMES,
    LABELS,
    OUTCOME_MIX,
    TRAIN_NAMES,
    Turns,
    label_scores,
    on_policy_step,
    span_tokens,
    tiny_qwen3,
    toy_arguments,
)

ARMS = ("none", "echo", "predict", "both")
OBSERVATION = "RESULT 1 python_test {outcome}"
"""glyph's profile's test result as the agent sees it (a ``user`` message: ``Profile.observation_role``)."""


class World:
    """The rendered episodes: one context's tokens for each (sampled label, verified outcome)."""

    def __init__(self, tok) -> None:
        from glyph.render import renderer

        self.tok = tok
        self.renderer = renderer(tok, "glyph")
        self.turns = Turns(tok)

    @functools.lru_cache(maxsize=None)  # noqa: B019  (one World a run; held-out contexts render again each eval)
    def render(self, name: str, number: int, sampled: str, verified: str,
               observed: str | None = None) -> dict:
        """The episode whose context cues ``verified``, whose turn predicts ``sampled`` and whose test
        says ``observed`` (default: ``verified``): its ids, sampled mask, ECHO's positions (the observation's
        body, the renderer's ``is_content`` of the message after the reply) and where the prediction turn's
        text starts (after the context and the empty think block)."""
        task = f"Task {number}: fix {name}. Log of the candidate: {CUES[verified]}."
        msgs = [{"role": "user", "content": task},
                {"role": "assistant", "content": Turns.TEXT.format(label=sampled)},
                {"role": "user", "content": OBSERVATION.format(outcome=observed or verified)}]
        full = self.renderer.render(msgs)
        ctx = self.renderer.render(msgs[:1], add_generation_prompt=True).token_ids
        ids = list(full.token_ids)
        assert ids[:len(ctx)] == ctx, "the renderer's prefix must be stable"
        text_ids = self.turns.ids[sampled]
        start = next(i for i in range(len(ctx), len(ids)) if ids[i:i + len(text_ids)] == text_ids)
        echo = [i for i, (m, c) in enumerate(zip(full.message_indices, full.is_content)) if m == 2 and c]
        return {"ids": ids, "sampled": list(full.sampled_mask), "echo": echo, "turn_at": start}

    def prefix(self, name: str, number: int, verified: str) -> list[int]:
        """What precedes the prediction turn's text: the context and the empty think block."""
        r = self.render(name, number, "PASS", verified)
        return r["ids"][:r["turn_at"]]


def observation_scores(model, world: World, contexts: list[tuple[str, int, str]]):
    """(contexts x 6) summed logprob of each outcome's tokens in the observation, after a turn that
    predicted PASS and kept: what the model expects the test to say."""
    import torch

    from testkit.reference_loss import Sample, token_logprobs

    head = OBSERVATION.format(outcome="").rstrip()
    samples = []
    for name, number, verified in contexts:
        for outcome in LABELS:
            r = world.render(name, number, "PASS", verified, observed=outcome)
            body = r["echo"]
            # the observation's outcome tokens: the body's tokens after "RESULT 1 python_test"
            cut = next(i for i in body if world.tok.decode(r["ids"][body[0]:i]) == head)
            samples.append(Sample.ce_only(r["ids"][:cut], r["ids"][cut:body[-1] + 1], 1.0))
    lps = token_logprobs(model, samples, weighted_only=True)
    scores = torch.stack([lp[s.ce_tokens].sum() for s, lp in zip(samples, lps)])
    return scores.view(len(contexts), len(LABELS))


def evaluate(model, world: World, held_out: list[tuple[str, int, str]]) -> dict:
    import torch

    truth = [LABELS.index(v) for _, _, v in held_out]
    with torch.no_grad():
        label, _ = label_scores(model, world.turns, [world.prefix(n, k, v) for n, k, v in held_out])
        observed = observation_scores(model, world, held_out)
    out = {}
    for what, scores in (("prediction", label), ("observation", observed)):
        predicted = scores.argmax(1).tolist()
        recall = {lab: statistics.fmean(predicted[i] == k for i, t in enumerate(truth) if t == k)
                  for k, lab in enumerate(LABELS)}
        out[what] = {"recall": recall, "weighted": sum(OUTCOME_MIX[lab] * recall[lab] for lab in LABELS)}
    return out


def warm_up(model, world: World, rng: random.Random, steps: int, batch: int, lr: float) -> None:
    """CE toward PASS at the prediction point of every context: the always-PASS starting checkpoint."""
    import torch

    from testkit.reference_loss import Sample, predict_loss, token_logprobs

    span = world.turns.span["PASS", "decision"]
    ids = world.turns.ids["PASS"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for _ in range(steps):
        prefixes = [world.prefix(rng.choice(TRAIN_NAMES), rng.randrange(100, 1000), rng.choice(LABELS))
                    for _ in range(batch)]
        samples = [Sample.ce_only(p + ids[:span[0]], ids[span[0]:span[-1] + 1], ALPHA) for p in prefixes]
        loss, _ = predict_loss(token_logprobs(model, samples, weighted_only=True), samples)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def step_samples(model, world: World, rng: random.Random, batch: int, arm: str):
    """One step's samples for ``arm``: the policy samples its label, the environment answers."""
    import torch

    from testkit.reference_loss import Sample

    verified = rng.choices(list(OUTCOME_MIX), weights=list(OUTCOME_MIX.values()), k=batch)
    tasks = [(rng.choice(TRAIN_NAMES), rng.randrange(100, 1000), v) for v in verified]
    with torch.no_grad():
        scores, _ = label_scores(model, world.turns, [world.prefix(*t) for t in tasks])
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    sampled = [LABELS[int(i)] for i in torch.multinomial(scores.softmax(1), 1, generator=gen).squeeze(1)]
    rewards = [float(rng.random() < 0.5) for _ in range(batch)]  # the task's reward, not the label's
    baseline = sum(rewards) / batch
    predict_ce, echo_ce = arm in ("predict", "both"), arm in ("echo", "both")
    samples, label_at, echo_at = [], [], []  # per sample: its PREDICT and its ECHO CE positions
    for (name, number, want), got, reward in zip(tasks, sampled, rewards):
        r = world.render(name, number, got, want)
        ids, mask = r["ids"], r["sampled"]
        span = set(span_tokens(ids, world.tok, "decision"))
        rl = [0.0 if (i in span or not m) else 1.0 for i, m in enumerate(mask)]
        labels = sorted(span) if predict_ce and got == want else []
        echoes = r["echo"] if echo_ce else []
        ce = [0.0] * len(ids)
        for i in labels + echoes:
            ce[i] = ALPHA
        adv = reward - baseline
        samples.append(Sample(token_ids=ids, mask=mask, inference_logprobs=[0.0] * len(ids),
                              advantages=[adv if m else 0.0 for m in mask], rl_weights=rl,
                              ce_weights=ce if any(ce) else None))
        label_at.append(labels)
        echo_at.append(echoes)
        if predict_ce and got != want:  # PREDICT's CE-only sample of the verified turn
            v = world.render(name, number, want, want)
            vspan = span_tokens(v["ids"], world.tok, "decision")
            samples.append(Sample.ce_only(v["ids"][:vspan[0]], v["ids"][vspan[0]:vspan[-1] + 1], ALPHA))
            label_at.append(list(range(vspan[0], vspan[-1] + 1)))
            echo_at.append([])
    if arm == "both":  # ce_balance = "separate": each term at its own per-token mean
        n_label, n_echo = sum(map(len, label_at)), sum(map(len, echo_at))
        if n_label and n_echo:
            scaled = []
            for s, labels, echoes in zip(samples, label_at, echo_at):
                ce = list(s.ce_weights.tolist()) if s.ce_weights is not None else None
                if ce is not None:
                    for i in labels:
                        ce[i] *= (n_label + n_echo) / n_label
                    for i in echoes:
                        ce[i] *= (n_label + n_echo) / n_echo
                scaled.append(dataclasses.replace(s, ce_weights=torch.tensor(ce) if ce is not None else None))
            samples = scaled
    return samples


def train(model, world: World, rng: random.Random, steps: int, batch: int, lr: float, arm: str) -> None:
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    for _ in range(steps):
        on_policy_step(model, optimizer, step_samples(model, world, rng, batch, arm))


def main(argv: Sequence[str] | None = None) -> None:
    args = toy_arguments(__doc__.split("\n\n")[0], "training steps per arm and seed", argv)

    import torch
    from rich.console import Console
    from rich.table import Table

    from glyph.render import load_tokenizer

    torch.set_num_threads(2)
    console = Console(width=160)
    tok = load_tokenizer()
    world = World(tok)
    results: dict[str, list[dict]] = {"warm-up": [], **{arm: [] for arm in ARMS}}
    started = time.perf_counter()
    for seed in range(args.seeds):
        rng = random.Random(2000 + seed)
        held_out = [(name, rng.randrange(100, 1000), lab) for name in HELD_OUT_NAMES for lab in LABELS
                    for _ in range(2)]
        base = tiny_qwen3(seed, args.hidden)
        warm_up(base, world, random.Random(seed), args.warmup, args.batch, args.lr)
        results["warm-up"].append(evaluate(base, world, held_out))
        for arm in ARMS:
            model = copy.deepcopy(base)
            train(model, world, random.Random(seed + 7), args.steps, args.batch, args.lr, arm)
            out = evaluate(model, world, held_out)
            results[arm].append(out)
            console.print(f"seed {seed} {arm:<8}: prediction {out['prediction']['weighted']:.2f}, "
                          f"observation {out['observation']['weighted']:.2f} "
                          f"({time.perf_counter() - started:.0f} s)")

    def mean(rows: list[dict], what: str, key: str | None = None) -> float:
        return statistics.fmean(r[what]["recall"][key] if key else r[what]["weighted"] for r in rows)

    table = Table(title=f"held-out accuracy after {args.warmup} warm-up + {args.steps} steps "
                        f"(batch {args.batch}, alpha {ALPHA}), mean over {args.seeds} seed(s)")
    table.add_column("CE")
    for what in ("prediction", "observation"):
        table.add_column(f"{what}\nmix-weighted", justify="right")
        table.add_column(f"{what}\nAF recall", justify="right")
    for name, rows in results.items():
        table.add_row("always-PASS warm-up" if name == "warm-up" else name,
                      *(f"{v:.2f}" for what in ("prediction", "observation")
                        for v in (mean(rows, what), mean(rows, what, "ASSERTION_FAILURE"))))
    console.print(table)
    console.print(f"prediction: the argmax label at the prediction point; observation: the argmax outcome in "
                  f"the test result after a PASS/KEEP turn; {len(HELD_OUT_NAMES) * 2} held-out contexts per "
                  f"class; {time.perf_counter() - started:.0f} s")
    print("prediction_accuracy " + " ".join(f"{a}={mean(results[a], 'prediction'):.2f}" for a in ARMS)
          + " observation_accuracy " + " ".join(f"{a}={mean(results[a], 'observation'):.2f}" for a in ARMS))


if __name__ == "__main__":
    main()
