"""ECHO in glyph's arms, inside PRIME-RL's orchestrator (the configs:
``glyph.predict.echo_config``). Beside ``glyph.predict.prime_rl``, the only
other module that imports PRIME-RL's orchestrator.

The observation weights are PRIME-RL's own: ``EchoAlgorithm`` at the pin
(``src/prime_rl/orchestrator/algo/echo.py``) walks each trainable branch and,
on every node nobody sampled that follows the first sampled one and whose
role has an ``alpha``, writes ``ce`` = alpha on the tokens the renderer marks
``is_content`` (the whole node where it marks none). Nothing here rewrites
that rule; these classes only decide when it runs and what it runs beside.

* ``GlyphEchoAlgorithm`` (arm A with ECHO): ``EchoAlgorithm.score_episode``
  unchanged, then ``glyph_grpo``'s ``score_group``, which keeps truncated and
  over-long rollouts out of training and so takes their ECHO weights off too.
* ``PredictEchoAlgorithm`` (arm B with ECHO): PREDICT's ``score_episode``
  (``glyph.predict.annotate``: label tokens out of RL, CE on verified labels,
  CE-only grafts) and ``score_group`` (GRPO, the length rule, the study's
  uniform-group rule, which removes PREDICT's CE only), then ECHO's weights
  on the rollouts that train (``EchoAlgorithm._weight_observations``, the
  method ``score_episode`` calls there), then the ``ce_balance`` scaling.
  ECHO runs last so that the uniform-group rule, which removes the CE-only
  nodes by their ``ce`` stream, never sees an observation node with one.

Each trainable trace gets ``echo_ce_tokens`` (observation tokens with ECHO
CE, each node once) and, under ``predict_echo``, ``echo_ce_scale`` and
``echo_predict_ce_scale`` (the factors ``ce_balance`` put on the two terms)
in ``trace.metrics``, which the orchestrator logs as ``train/metrics/*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prime_rl.orchestrator.algo.base import iter_trainable_traces
from prime_rl.orchestrator.algo.echo import EchoAlgorithm

from glyph.predict.echo_config import GlyphEchoAlgoConfig, PredictEchoAlgoConfig
from glyph.predict.prime_rl import GlyphGRPOAlgorithm, PredictAlgorithm

if TYPE_CHECKING:
    import verifiers.v1 as vf
    from prime_rl.utils.client import InferencePool


def ce_nodes(trace: vf.Trace) -> list[Any]:
    """The nodes of ``trace`` whose ``ce`` stream has a nonzero weight, each once."""
    return [n for n in trace.nodes if any((n.loss_weights or {}).get("ce") or ())]


def ce_count(nodes: list[Any]) -> int:
    """Tokens with a nonzero ``ce`` weight on ``nodes``: what the trainer counts in its ``ce`` denominator
    (``trajectories._loss_weights`` ships each node's stream once)."""
    return sum(sum(1 for w in n.loss_weights["ce"] if w) for n in nodes)


def scale_ce(nodes: list[Any], factor: float) -> None:
    for n in nodes:
        n.loss_weights = {**n.loss_weights, "ce": [w * factor for w in n.loss_weights["ce"]]}


class GlyphEchoAlgorithm(GlyphGRPOAlgorithm, EchoAlgorithm):
    """``echo`` with ``glyph_grpo``'s length rule (MRO: glyph_grpo's ``score_group``, ECHO's
    ``__init__`` and ``score_episode``, then GRPO)."""

    def __init__(self, config: GlyphEchoAlgoConfig, policy_pool: InferencePool):
        super().__init__(config, policy_pool)

    async def score_group(self, episodes: list[vf.Episode]) -> None:
        await super().score_group(episodes)
        for _, trace in iter_trainable_traces(episodes):
            trace.metrics["echo_ce_tokens"] = float(ce_count(ce_nodes(trace)))


class PredictEchoAlgorithm(PredictAlgorithm, EchoAlgorithm):
    """PREDICT, then ECHO's observation CE on the rollouts that train (module docstring)."""

    def __init__(self, config: PredictEchoAlgoConfig, policy_pool: InferencePool):
        super().__init__(config, policy_pool)
        self.ce_balance = config.ce_balance

    async def score_group(self, episodes: list[vf.Episode]) -> None:
        await super().score_group(episodes)  # PREDICT's and GRPO's, the length and uniform-group rules
        kept = [trace for _, trace in iter_trainable_traces(episodes) if not self.excluded(trace)]
        label_nodes, echo_nodes = [], []
        for trace in kept:
            before = ce_nodes(trace)
            theirs = {id(n): list(n.loss_weights["ce"]) for n in before}
            self._weight_observations(trace)
            added = [n for n in ce_nodes(trace) if id(n) not in theirs]
            # ECHO merges max(old, new) into a node's stream: it must leave PREDICT's weights as they were.
            if any(n.loss_weights["ce"] != theirs[id(n)] for n in before):
                raise RuntimeError(f"predict_echo: trace {trace.id}: ECHO weighted a token PREDICT weights")
            label_nodes += before
            echo_nodes += added
            trace.metrics["echo_ce_tokens"] = float(ce_count(added))
        n_label, n_echo = ce_count(label_nodes), ce_count(echo_nodes)
        label_scale = echo_scale = 1.0
        if self.ce_balance == "separate" and n_label and n_echo:
            label_scale, echo_scale = (n_label + n_echo) / n_label, (n_label + n_echo) / n_echo
            scale_ce(label_nodes, label_scale)
            scale_ce(echo_nodes, echo_scale)
        for trace in kept:
            trace.metrics["echo_ce_scale"] = echo_scale
            trace.metrics["echo_predict_ce_scale"] = label_scale
