"""``[orchestrator.algo] type = "predict"``: PREDICT's config for PRIME-RL.

Imports only ``prime_rl.configs`` (PRIME-RL keeps its config package free of
ML dependencies, and so does this module). Registered under the
``prime_rl.algorithms`` entry-point group (glyph's ``pyproject.toml``), which
``patches/prime-rl-algorithm-registry.patch`` teaches PRIME-RL to read; the
runtime class is named by import path in ``algorithm``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prime_rl.configs.algorithm import ActionLossType, GRPOAlgoConfig
from pydantic import Field


class PredictAlgoConfig(GRPOAlgoConfig):
    type: Literal["predict"] = "predict"  # type: ignore[assignment]
    """PREDICT: GRPO on the agent's sampled tokens, the sampled prediction-label
    tokens held out of RL credit (``rl`` weight 0), and cross-entropy at weight
    ``alpha`` on the outcome label the environment verified: in place when the
    sampled label was right, on a CE-only node grafted at the same token prefix
    when it was wrong. Reads glyph-mbpp's verified records
    (``trace.info["glyph"]["candidates"]``); other envs train as plain GRPO."""

    action_loss_type: ClassVar[ActionLossType] = "rl"
    algorithm: ClassVar[str] = "glyph.predict.prime_rl.PredictAlgorithm"

    alpha: float = Field(0.1, gt=0, allow_inf_nan=False)
    """CE weight on each verified label token (the study: 0.1). The trainer
    normalises the ce component by its own token count, apart from rl."""

    max_aux_tokens: int = Field(ge=1)
    """The longest sample PREDICT may train on: set it to the orchestrator's
    ``seq_len``. A grafted CE-only sample longer than this is dropped (and
    counted in ``predict_graft_too_long``), never truncated; an in-place label
    beyond it is counted in ``predict_past_limit`` (the trainer truncates)."""

    tokenizer: str | None = None
    """Tokenizer (hub name or path) whose vocabulary locates labels and
    tokenizes corrected labels; default: the policy model's. It must be the
    tokenizer the policy's renderer uses."""
