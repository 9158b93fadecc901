"""glyph's ECHO configs for PRIME-RL: ``[orchestrator.algo] type =
"glyph_echo"`` (arm A with ECHO) and ``type = "predict_echo"`` (arm B:
PREDICT with ECHO's observation CE). The runtime classes are in
``glyph.predict.echo``.

ECHO is PRIME-RL's own (``EchoAlgoConfig`` in
``packages/prime-rl-configs/src/prime_rl/configs/algorithm.py``,
``EchoAlgorithm`` in ``src/prime_rl/orchestrator/algo/echo.py`` at the pin):
GRPO on the sampled tokens, and cross-entropy at a per-role ``alpha`` on the
tokens the environment wrote after the first model reply (its observations),
only the message bodies where the renderer attributes them
(``MessageNode.is_content``). These configs subclass it, so ``roles`` and
``filter`` are ECHO's, with its defaults (the tool role at alpha 0.1: the
vetted setting, ``EchoAlgoConfig.roles``); what they add is glyph's:

* ``glyph_echo`` is ``echo`` with ``glyph_grpo``'s length rule (truncated and
  over-long rollouts kept out of training, ``exclude_truncated`` /
  ``max_rollout_tokens``), so that arm A with and without ECHO differ in the
  observation CE alone. PRIME-RL's ``echo`` has no such rule.
* ``predict_echo`` is ``predict`` (every field of it) plus ECHO's observation
  CE, and ``ce_balance``, which says how the two CE terms share the trainer's
  one ``ce`` component (see the field).

Imports only ``prime_rl.configs`` and glyph's other config module, as
``glyph.predict.prime_rl_config`` does; registered under the
``prime_rl.algorithms`` entry-point group (``pyproject.toml``).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prime_rl.configs.algorithm import EchoAlgoConfig
from pydantic import model_validator

from glyph.predict.prime_rl_config import GlyphGRPOAlgoConfig, PredictAlgoConfig


class GlyphEchoAlgoConfig(GlyphGRPOAlgoConfig, EchoAlgoConfig):
    type: Literal["glyph_echo"] = "glyph_echo"  # type: ignore[assignment]
    """ECHO as PRIME-RL defines it (``type = "echo"``: GRPO on the sampled
    tokens plus CE at each role's ``alpha`` on the observation bodies of later
    turns), with ``glyph_grpo``'s rule that a truncated or over-long rollout is
    kept out of training, its observation CE included."""

    algorithm: ClassVar[str] = "glyph.predict.echo.GlyphEchoAlgorithm"


class PredictEchoAlgoConfig(PredictAlgoConfig, EchoAlgoConfig):
    type: Literal["predict_echo"] = "predict_echo"  # type: ignore[assignment]
    """PREDICT (``type = "predict"``, every field of it) plus ECHO's CE on the
    observation bodies (``roles``, ``filter``: ECHO's). The two never weight
    one token: PREDICT's CE is on sampled label tokens and on the CE-only
    nodes it grafts (``assistant`` messages), ECHO's on the environment's
    messages of the roles named, so ``roles.assistant`` is refused. ECHO's CE
    follows ``echo``: it is kept in groups whose rewards are all equal (the
    ``ce_in_uniform_groups`` rule is PREDICT's and takes PREDICT's CE only)
    and dropped with a rollout kept out of training."""

    algorithm: ClassVar[str] = "glyph.predict.echo.PredictEchoAlgorithm"

    ce_balance: Literal["separate", "shared"] = "separate"
    """How PREDICT's label CE and ECHO's observation CE share the trainer's one
    ``ce`` component, which PRIME-RL normalises by its count of CE tokens
    (``src/prime_rl/trainer/rl/loss.py``, ``compute_loss``). ``"shared"``:
    each token at its algorithm's alpha, so the step's CE is
    ``(alpha * sum label NLL + alpha_role * sum observation NLL) / (N_label +
    N_observation)`` and the few label tokens are diluted by the many
    observation tokens (PREDICT's term shrinks by ``N_label / (N_label +
    N_observation)`` against arm B's). ``"separate"`` (the default): within
    each group the weights are scaled by the group's counts (label tokens by
    ``N / N_label``, observation tokens by ``N / N_observation``, ``N`` their
    sum), so that each term keeps its own per-token mean: exactly ``alpha *
    mean label NLL + alpha_role * mean observation NLL`` for a step of one
    group, and the groups' token-weighted mean of that for several. So arm B
    with ECHO carries arm B's PREDICT term and arm A with ECHO's observation
    term, the two the 2x2 adds."""

    @model_validator(mode="after")
    def no_assistant_role(self):
        if self.roles.assistant is not None:
            raise ValueError(
                "predict_echo: roles.assistant would put ECHO's CE on PREDICT's grafted CE-only nodes "
                "(assistant messages nobody sampled); name the observation roles only (tool, user)"
            )
        return self
