"""glyph's algorithms inside PRIME-RL's orchestrator (the adapter: the one
module that imports PRIME-RL's orchestrator; the configs live in
``glyph.predict.prime_rl_config``).

An algorithm at the pin is a class over finalized episodes that only writes
per-token weights (``prime_rl/orchestrator/algo/base.py``); the trainer just
executes them. ``GlyphGRPOAlgorithm`` is GRPO with the study's rule that
truncated or over-long rollouts are kept out of training. PREDICT annotates
each trainable trace in ``score_episode`` (rollout-local, before the group is
complete) with ``glyph.predict.annotate``, then GRPO assigns advantages in
``score_group``, where a group of equal rewards also loses its CE unless
``ce_in_uniform_groups`` (the study's stack dropped such groups whole).
Counts go to ``trace.metrics`` (``predict_*``, ``glyph_excluded``), which the
orchestrator logs as ``train/metrics/*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prime_rl.orchestrator.algo.base import iter_trainable_traces
from prime_rl.orchestrator.algo.grpo import GRPOAlgorithm
from prime_rl.orchestrator.algo.routing import assign_advantages
from prime_rl.utils.logger import get_logger

from glyph import profiles
from glyph.predict.annotate import CE_RULES, Annotation, TokenBytes, annotate
from glyph.predict.prime_rl_config import GlyphGRPOAlgoConfig, PredictAlgoConfig
from glyph.record import harness_record, mbpp_record
from glyph.render import renderer

if TYPE_CHECKING:
    import verifiers.v1 as vf
    from prime_rl.utils.client import InferencePool

class GlyphGRPOAlgorithm(GRPOAlgorithm):
    def __init__(self, config: GlyphGRPOAlgoConfig, policy_pool: InferencePool):
        super().__init__(config, policy_pool)
        self.exclude_truncated = config.exclude_truncated
        self.max_rollout_tokens = config.max_rollout_tokens

    def excluded(self, trace: vf.Trace) -> str | None:
        """Why ``trace`` is kept out of training, or None."""
        if self.exclude_truncated and trace.is_truncated:
            return f"truncated ({trace.stop_condition or 'the last turn hit its token limit'})"
        if self.max_rollout_tokens is not None:
            longest = max((len(b.token_ids) for b in trace.branches), default=0)
            if longest > self.max_rollout_tokens:
                return f"{longest} tokens > max_rollout_tokens {self.max_rollout_tokens}"
        return None

    async def score_group(self, episodes: list[vf.Episode]) -> None:
        kept, out = [], []
        for episode in episodes:
            traces = []
            for trace in episode.traces:
                (out if self.excluded(trace) else traces).append(trace)
            kept.append(episode.model_copy(update={"traces": traces}))
        await super().score_group(kept)  # the baseline over the rollouts that train
        for trace in out:
            if trace.has_error or not trace.agent.trainable:
                continue
            assign_advantages(trace, 0.0)
            for node in trace.nodes:
                node.loss_weights = {"rl": [0.0] * len(node.token_ids)} if any(node.mask) else None
            trace.metrics["glyph_excluded"] = 1.0
            get_logger().debug(f"glyph_grpo: trace {trace.id} kept out of training: {self.excluded(trace)}")
        for _, trace in iter_trainable_traces(kept):
            trace.metrics["glyph_excluded"] = 0.0


class PredictAlgorithm(GlyphGRPOAlgorithm):
    def __init__(self, config: PredictAlgoConfig, policy_pool: InferencePool):
        super().__init__(config, policy_pool)
        self.alpha = config.alpha
        self.label_span = config.label_span
        self.ce_in_uniform_groups = config.ce_in_uniform_groups
        self.max_aux_tokens = config.max_aux_tokens
        self.ce_rule = config.ce_rule
        self.per_target = CE_RULES[config.ce_rule]  # the study's rule: a CE-only sample per target
        self.tokenizer_name = config.tokenizer
        self.tokenizer = None
        self.token_bytes: TokenBytes | None = None
        self.renderers: dict[str, object] = {}

    async def setup(self) -> None:
        from renderers.base import load_tokenizer

        self.use_tokenizer(load_tokenizer(self.tokenizer_name or self.policy_pool.model_name))

    def use_tokenizer(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.token_bytes = TokenBytes(tokenizer)
        self.renderers = {}

    def render(self, trace: vf.Trace):
        """Messages -> prompt ids (generation prompt added) by the renderer of ``trace``'s profile
        (its trusted harness record), for the study's CE rule."""
        protocol = harness.protocol if (harness := harness_record(trace.info)) is not None else None
        name = profiles.get(protocol.profile if protocol is not None else profiles.DEFAULT).renderer
        if name not in self.renderers:
            self.renderers[name] = renderer(self.tokenizer, name)
        found = self.renderers[name]
        return lambda messages: list(found.render_ids(messages, add_generation_prompt=True))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def annotate(self, trace: vf.Trace) -> Annotation:
        assert self.token_bytes is not None, "PredictAlgorithm.setup() must run first"
        found = mbpp_record(trace.info)
        candidates = found.candidates if found is not None else []
        if self.per_target:  # every recorded target; a profile without targets predicts on candidates
            candidates = (found.prediction_targets if found is not None else []) or [
                c for c in candidates if c.prediction_turn is not None]
        out = annotate(
            trace.nodes,
            candidates,
            self.token_bytes,
            self.encode,
            alpha=self.alpha,
            max_tokens=self.max_aux_tokens,
            rule=self.label_span,
            ce_rule=self.ce_rule,
            render=self.render(trace) if self.per_target else None,
        )
        trace.metrics.update(out.metrics())
        for error in out.errors:
            get_logger().warning(f"predict: trace {trace.id}: {error}")
        return out

    async def score_episode(self, episode: vf.Episode) -> None:
        for _, trace in iter_trainable_traces([episode]):
            self.annotate(trace)

    async def score_group(self, episodes: list[vf.Episode]) -> None:
        await super().score_group(episodes)
        if self.ce_in_uniform_groups:
            return
        kept = [trace for _, trace in iter_trainable_traces(episodes) if not self.excluded(trace)]
        if len({trace.reward for trace in kept}) > 1:
            return
        for trace in kept:
            drop_ce(trace)


def drop_ce(trace: vf.Trace) -> None:
    """Take PREDICT's CE out of ``trace`` (the study's uniform-reward groups):
    the grafted CE-only nodes and the study rule's auxiliary samples go (they
    hang at the end of ``trace.nodes``, as ``annotate`` appends them) and no
    node keeps a ``ce`` stream, so with
    zero advantages nothing of the rollout reaches the trainer."""
    trained = trace.metrics.get("predict_labels_trained", 0.0)
    trace.nodes[:] = [n for n in trace.nodes if n.sampled or not (n.loss_weights or {}).get("ce")]
    for node in trace.nodes:
        if node.loss_weights and "ce" in node.loss_weights:
            rest = {k: v for k, v in node.loss_weights.items() if k != "ce"}
            node.loss_weights = rest or None
    trace.metrics.update(
        predict_ce_dropped=trained,
        predict_labels_trained=0.0,
        predict_ce_tokens=0.0,
        predict_graft_tokens=0.0,
        predict_aux_samples=0.0,
        predict_aux_tokens=0.0,
    )
