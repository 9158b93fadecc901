"""glyph's algorithm configs for PRIME-RL: ``[orchestrator.algo] type =
"glyph_grpo"`` (the study's arm A) and ``type = "predict"`` (arm B).

Imports only ``prime_rl.configs`` (PRIME-RL keeps its config package free of
ML dependencies, and so does this module). Registered under the
``prime_rl.algorithms`` entry-point group (glyph's ``pyproject.toml``), which
``patches/prime-rl-algorithm-registry.patch`` teaches PRIME-RL to read; each
runtime class is named by import path in ``algorithm``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prime_rl.configs.algorithm import ActionLossType, GRPOAlgoConfig
from pydantic import Field


class GlyphGRPOAlgoConfig(GRPOAlgoConfig):
    type: Literal["glyph_grpo"] = "glyph_grpo"  # type: ignore[assignment]
    """GRPO as the study trains it: a rollout that was truncated (a length
    limit stopped it, or its last turn ran out of tokens: ``Trace.is_truncated``)
    or that is longer than ``max_rollout_tokens`` is kept out of training. It
    takes no part in its group's baseline, and its advantages are 0 with no
    loss weight, so the zero-advantage filter
    (``orchestrator.train.filter_zero_advantages``, on by default: keep it on)
    drops it before the trainer. Counted in ``train/metrics/glyph_excluded``.
    PRIME-RL at the pin has no such filter of its own."""

    action_loss_type: ClassVar[ActionLossType] = "rl"
    algorithm: ClassVar[str] = "glyph.predict.prime_rl.GlyphGRPOAlgorithm"

    exclude_truncated: bool = True
    """Keep truncated rollouts out of training."""

    max_rollout_tokens: int | None = Field(None, ge=1)
    """Keep rollouts whose longest branch exceeds this many tokens out of
    training (the study: 4096, its ``seq_len``); None: no length limit."""


class PredictAlgoConfig(GlyphGRPOAlgoConfig):
    type: Literal["predict"] = "predict"  # type: ignore[assignment]
    """PREDICT: GRPO on the agent's sampled tokens, the sampled prediction-label
    tokens held out of RL credit (``rl`` weight 0), and cross-entropy at weight
    ``alpha`` on the outcome label the environment verified: in place when the
    sampled label was right, on a CE-only node grafted at the same token prefix
    when it was wrong. Reads glyph-mbpp's verified records
    (``trace.info["glyph"]["candidates"]``); with no predictions it is
    ``glyph_grpo``. Rollouts are kept out of training as in ``glyph_grpo``."""

    algorithm: ClassVar[str] = "glyph.predict.prime_rl.PredictAlgorithm"

    alpha: float = Field(0.1, ge=0, allow_inf_nan=False)
    """CE weight on each verified label token (the study: 0.1). The trainer
    normalises the ce component by its own token count, apart from rl.
    0: no CE (no grafts), the sampled label tokens still held out of RL
    credit (the alpha-0 control)."""

    label_span: Literal["decision", "study"] = "decision"
    """Which tokens of a label are held out of RL and trained with CE
    (``glyph.predict.annotate.SpanRule``). ``"decision"`` (glyph's): from the
    token holding the ``>`` of ``<PREDICTION>`` through the label's last
    token; with Qwen3's BPE that token is the first label decision (``'>P'``,
    ``'>R'``, or a lone ``'>'`` before ASSERTION_FAILURE, SYNTAX_ERROR,
    TIMEOUT, OTHER). ``"study"``: the study's rule (its
    ``src/glyph/prime_rl.py``, ``_mask_label_tokens``): the tokens overlapping
    the label's characters, so a lone ``'>'`` gets no CE and keeps RL credit
    while a merged ``'>P'``/``'>R'`` is in the span."""

    ce_in_uniform_groups: bool = True
    """Whether a group whose trainable rollouts all got the same reward
    still trains PREDICT's CE. True (glyph's, PRIME-RL at the pin): the
    zero-advantage filter zeroes the group's RL tokens but keeps its CE and
    CE-only samples. False (the study's: PRIME-RL ``d334ea5`` with the
    ``zero_advantage`` post-batch filter enforced, its ``configs/arm_b_rl.toml``):
    such a group's rollouts are dropped whole, CE included; here their CE is
    removed (grafts too) in ``score_group``, so the zero-advantage filter
    drops them, and ``predict_ce_dropped`` counts the labels."""

    max_aux_tokens: int = Field(ge=1)
    """The longest sample PREDICT may train on: set it to the orchestrator's
    ``seq_len``. A grafted CE-only sample longer than this is dropped (and
    counted in ``predict_graft_too_long``), never truncated; an in-place label
    beyond it is counted in ``predict_past_limit`` (the trainer truncates)."""

    ce_rule: Literal["in_place", "study"] = "in_place"
    """Which samples carry the CE (``glyph.predict.annotate.CeRule``). ``"in_place"``
    (glyph's): the policy's own tokens, in place on a right label, on a CE-only node
    grafted at the same token prefix for a wrong one, none for an invalid or missing
    label. ``"study"`` (the study's ``PredictAlgorithm.score_rollout``, its
    ``src/glyph/prime_rl.py``): one CE-only sample per recorded prediction target,
    right or wrong, valid label or not, its context re-rendered from the target's
    messages by the renderer of the rollout's profile (``glyph.profiles``:
    ``Profile.renderer``, what glyph's configs set ``[orchestrator.renderer]`` to),
    then ``<PREDICTION>VERIFIED</PREDICTION>`` as the tokenizer encodes it alone."""

    tokenizer: str | None = None
    """Tokenizer (hub name or path) whose vocabulary locates labels and
    tokenizes corrected labels; default: the policy model's. It must be the
    tokenizer the policy's renderer uses."""
