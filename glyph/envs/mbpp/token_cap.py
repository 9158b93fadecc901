"""A run's token cap on a rollout, made hard as the PREDICT study's eval made it.

verifiers' ``max_total_tokens`` (``env.agent.max_total_tokens``, the study's
``--max-total-tokens 4096``) is checked between turns: the first turn past
the cap is refused, but the turn that crosses it completes (soft by one
turn, ``RolloutLimits`` in verifiers' ``session.py``), so a rollout can end
with FINAL above the cap. The study's taskset (its ``src/glyph/taskset.py``,
``max_trace_tokens = 4096``) failed every rollout that verifiers marks
truncated (``Trace.is_truncated``: a framework limit stopped it, or its last
reply ran out of tokens) or whose longest branch holds more tokens than the
cap; its ``scripts/evaluate.sh`` counted those as failures.

glyph applies the same rule wherever a run sets ``max_total_tokens``: after
finalize has checked and recorded everything else, such a rollout is scored
0 and its reason says why. A fault's record (``reward`` None) stays as it is.
Without a cap nothing changes.
"""

from __future__ import annotations

from typing import Any

from glyph.record import MbppRecord


def cap_of(trace: Any) -> int | None:
    """The rollout's ``max_total_tokens`` as verifiers recorded its agent config (None: no cap)."""
    config = getattr(getattr(trace, "agent", None), "config", None)
    return getattr(config, "max_total_tokens", None)


def over_cap(trace: Any) -> str | None:
    """Why the study's rule fails this rollout, or None: no cap, or within it."""
    cap = cap_of(trace)
    if cap is None:
        return None
    if trace.is_truncated:
        why = trace.stop_condition or "its last reply ran out of tokens"
        return f"truncated ({why}) under a cap of {cap} tokens"
    longest = max((branch.num_total_tokens for branch in trace.branches), default=0)
    if longest > cap:
        return f"{longest} tokens, over the cap of {cap}"
    return None


def enforce(rec: MbppRecord, trace: Any) -> None:
    """Score ``rec`` 0 where the cap fails the rollout (a scored record only)."""
    why = over_cap(trace)
    if why is not None and rec.reward is not None:
        rec.reward = 0.0
        rec.reason = f"failed by the token cap: {why}; " + rec.reason
