"""PREDICT's two CE rules through PRIME-RL's own trainer loss at the pin: loss and gradient.

``ce_rule = "study"`` is the PREDICT study's (its ``src/glyph/prime_rl.py`` at ``9eefac7``,
``PredictAlgorithm.score_rollout`` / ``_auxiliary_sample``): one CE-only sample per recorded
prediction target, right or wrong, its sampled label valid, invalid or missing, on the target's
context re-rendered with the generation prompt, then ``<PREDICTION>VERIFIED</PREDICTION>`` encoded
alone. ``ce_rule = "in_place"`` is glyph's: CE in place on a right label's sampled tokens, a CE-only
node grafted at the same token prefix for a wrong one, nothing for an invalid or missing label.

Per batch (``testkit.ce_rules.SCENARIOS``: Arm B rollouts in the study's format written by
the study profile's own turn writer, laid out with the study renderer as the pin's train client
lays them out), both rules annotate the same rollouts; the pin's ``trace_to_samples`` turns each
graph into samples (temperature 0.8 stamped as ``TrainSink`` stamps it, GRPO advantages on the
sampled tokens, inference logprobs near the model's own); PRIME-RL's ``compute_loss`` (default loss
config, normalised as ``train.py`` normalises a step) gives the loss on a tiny random Qwen3 (the
real vocabulary, 2 layers of width 32) and ``backward`` its gradient. Printed per batch: each
rule's loss, its RL and CE parts and token counts, the samples it ships, and the gradients'
cosine and ``|g_study - g_in_place| / |g_in_place|``.

Run in the pinned stack (PRIME-RL's ``src`` on ``PYTHONPATH``, the venv ``tests/pinstack.py``
builds)::

    PYTHONPATH=.:<prime-rl>/src:<prime-rl>/packages/prime-rl-configs/src \\
        ~/.cache/glyph/pin/<venv>/bin/python benchmarks/ce_rule.py [--alpha 0.1] [--seed 0]
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--alpha", type=float, default=0.1, help="PREDICT's CE weight (the study's 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="the tiny model's initialisation")
    parser.add_argument("--temperature", type=float, default=0.8, help="the study's sampling temperature")
    args = parser.parse_args()

    from glyph.render import load_tokenizer, renderer
    from testkit import ce_rules as C
    from testkit.pin_loss import tiny_qwen3

    tok = load_tokenizer()
    study_renderer = renderer(tok, "study")
    model = tiny_qwen3(args.seed)
    table = Table(title=f"CE rules through the pin's compute_loss (alpha {args.alpha}, seed {args.seed})")
    for column in ("batch", "rule", "loss", "rl", "ce", "rl tok", "ce tok", "samples", "ctx differs",
                   "cosine", "|dg|/|g|"):
        table.add_column(column, justify="left" if column in ("batch", "rule") else "right")
    lines = []
    for name in C.SCENARIOS:
        rollouts = C.scenario(tok, study_renderer, name)
        steps = {rule: C.rule_step(tok, study_renderer, model, rollouts, rule, alpha=args.alpha,
                                   temperature=args.temperature) for rule in ("in_place", "study")}
        cos, rel = C.agreement(steps["in_place"][0], steps["study"][0])
        for rule, (step, notes) in steps.items():
            differs = sum(n.aux_context_differs for n in notes) if rule == "study" else ""
            table.add_row(name, rule, f"{step.loss:.7f}", f"{step.rl:.7f}", f"{step.ce:.7f}",
                          str(step.rl_tokens), str(step.ce_tokens), str(step.samples), str(differs),
                          f"{cos:.7f}" if rule == "study" else "", f"{rel:.2e}" if rule == "study" else "")
        ours, study = steps["in_place"][0], steps["study"][0]
        lines.append(f"{name} loss in_place={ours.loss:.7f} study={study.loss:.7f} "
                     f"grad_cosine={cos:.7f} grad_rel_diff={rel:.2e}")
    console = Console(width=150)
    console.print(table)
    for line in lines:
        console.print(line, highlight=False)


if __name__ == "__main__":
    main()
