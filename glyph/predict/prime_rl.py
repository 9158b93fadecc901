"""PREDICT's runtime inside PRIME-RL's orchestrator (the adapter: the one
module that imports PRIME-RL's orchestrator; the config lives in
``glyph.predict.prime_rl_config``).

An algorithm at the pin is a class over finalized episodes that only writes
per-token weights (``prime_rl/orchestrator/algo/base.py``); the trainer just
executes them. PREDICT annotates each trainable trace in ``score_episode``
(rollout-local, before the group is complete) with
``glyph.predict.annotate``, then GRPO assigns advantages in ``score_group``.
Annotation counts go to ``trace.metrics`` (``predict_*``), which the
orchestrator logs as ``train/metrics/predict_*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prime_rl.orchestrator.algo.base import iter_trainable_traces
from prime_rl.orchestrator.algo.grpo import GRPOAlgorithm
from prime_rl.utils.logger import get_logger

from glyph.predict.annotate import Annotation, TokenBytes, annotate
from glyph.predict.prime_rl_config import PredictAlgoConfig

if TYPE_CHECKING:
    import verifiers.v1 as vf

    from prime_rl.utils.client import InferencePool

INFO_KEY = "glyph"  # glyph-mbpp's finalize writes the verified record here


class PredictAlgorithm(GRPOAlgorithm):
    def __init__(self, config: PredictAlgoConfig, policy_pool: InferencePool):
        super().__init__(config, policy_pool)
        self.alpha = config.alpha
        self.max_aux_tokens = config.max_aux_tokens
        self.tokenizer_name = config.tokenizer
        self.tokenizer = None
        self.token_bytes: TokenBytes | None = None

    async def setup(self) -> None:
        from renderers.base import load_tokenizer

        self.use_tokenizer(load_tokenizer(self.tokenizer_name or self.policy_pool.model_name))

    def use_tokenizer(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.token_bytes = TokenBytes(tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def annotate(self, trace: vf.Trace) -> Annotation:
        assert self.token_bytes is not None, "PredictAlgorithm.setup() must run first"
        candidates = (trace.info.get(INFO_KEY) or {}).get("candidates") or []
        out = annotate(
            trace.nodes,
            candidates,
            self.token_bytes,
            self.encode,
            alpha=self.alpha,
            max_tokens=self.max_aux_tokens,
        )
        trace.metrics.update(out.metrics())
        for error in out.errors:
            get_logger().warning(f"predict: trace {trace.id}: {error}")
        return out

    async def score_episode(self, episode: vf.Episode) -> None:
        for _, trace in iter_trainable_traces([episode]):
            self.annotate(trace)
