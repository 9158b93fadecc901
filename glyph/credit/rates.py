"""Pass rates per step, when every snapshot is continued several times (forks).

From snapshot ``k`` the continuation runs ``n`` forks, ``passes`` of which
succeed. The pass rate ``passes / n`` gets a 95% Wilson score interval
(``glyph.report.stats.wilson``, the one in glyph). The threshold verdict asks
for the earliest step from which the rate *stays* below ``threshold`` (at
that snapshot and every later one: the same "from here on" reading as
``earliest_unreachable``), and states its uncertainty as a range of steps
the intervals are consistent with:

* ``earliest_below``: from the point estimates, ``passes / n < threshold``;
* ``earliest_below_certain``: from the intervals' upper bounds: from this
  step on, every interval lies wholly below the threshold;
* ``earliest_below_possible``: from their lower bounds: from this step on,
  every interval reaches below the threshold.

Since ``lo <= rate <= hi``, ``possible <= below <= certain`` whenever they
exist; ``None`` means "no such step": the rate (or the bound) at the last
snapshot is at or above the threshold. The intervals are pointwise (each
snapshot's own 95%), not simultaneous over all snapshots. See docs/credit.md.

:func:`original_fields` gives the same numbers under the original
flywheel's credit report's names (``checkpoints`` of ``checkpoint``,
``forks``, ``pass``, ``passRate``; ``pivot``, ``located``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from glyph.report.stats import LEVEL, wilson

DEFAULT_THRESHOLD = 0.5
"""The pass rate a step's continuation must stay at or above: success more likely than not."""


@dataclass(frozen=True)
class Rate:
    """One snapshot's forks: how many ran, how many passed, the rate and its interval."""

    forks: int
    passes: int
    pass_rate: float
    wilson_lo: float
    wilson_hi: float
    outcomes: dict[str, int]  # each fork's outcome (PASS, BUDGET_EXHAUSTED, ...), counted


def rate_of(outcomes: Sequence[str], passed: Sequence[bool]) -> Rate:
    """The rate of one snapshot's forks (``passed[i]``: fork i succeeded)."""
    n, k = len(passed), sum(bool(p) for p in passed)
    if n == 0:
        raise ValueError("a snapshot's pass rate needs at least one fork")
    lo, hi = wilson(k, n)
    return Rate(n, k, k / n, lo, hi, dict(sorted(Counter(outcomes).items())))


def earliest_staying(flags: Sequence[bool]) -> int | None:
    """The first k with ``flags[k:]`` all True; None if the last is False (or there is none)."""
    if not flags or not flags[-1]:
        return None
    k = len(flags) - 1
    while k > 0 and flags[k - 1]:
        k -= 1
    return k


@dataclass(frozen=True)
class ThresholdVerdict:
    threshold: float
    level: float  # the intervals' confidence level, each snapshot's own
    earliest_below: int | None
    earliest_below_certain: int | None
    earliest_below_possible: int | None


def threshold_verdict(rates: Sequence[Rate], threshold: float = DEFAULT_THRESHOLD) -> ThresholdVerdict:
    """The earliest step whose rate stays below ``threshold``, and the range the intervals allow."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"the threshold is a pass rate in (0, 1], not {threshold}")
    return ThresholdVerdict(
        threshold, LEVEL,
        earliest_staying([r.pass_rate < threshold for r in rates]),
        earliest_staying([r.wilson_hi < threshold for r in rates]),
        earliest_staying([r.wilson_lo < threshold for r in rates]))


def describe(v: ThresholdVerdict, forks: int, step_names: Sequence[str]) -> str:
    """The verdict in words. ``step_names[k]``: how to name step k (k >= 1) where it is the verdict."""
    t = f"{100 * v.threshold:g}%"

    def name(k: int) -> str:
        return "the start" if k == 0 else f"step {k}"

    if v.earliest_below_possible is None:
        span = "no step: every interval at the end lies at or above it"
    elif v.earliest_below_certain is None:
        span = (f"from {name(v.earliest_below_possible)} to none (the interval at the end still reaches "
                f"{t} or more)")
    elif v.earliest_below_possible == v.earliest_below_certain:
        span = f"only {name(v.earliest_below_certain)}"
    else:
        span = f"from {name(v.earliest_below_possible)} to {name(v.earliest_below_certain)}"
    ranges = f"the 95% Wilson intervals of {forks} fork(s) per step allow {span}"
    k = v.earliest_below
    if k is None:
        return f"the pass rate at the end is at or above the threshold {t}: no step took it below; {ranges}"
    certain = ("certain: every interval from there on lies below the threshold"
               if v.earliest_below_certain == k else "likely, not certain")
    if k == 0:
        return f"below the threshold {t} from the start (no step is to blame; {certain}); {ranges}"
    return (f"{step_names[k]} is the earliest step from which the pass rate stays below {t} ({certain}); "
            f"{ranges}")


def original_fields(rates: Sequence[Rate]) -> dict:
    """The original flywheel's credit-report fields that correspond: ``forks``,
    ``checkpoints`` (``checkpoint`` k = the state after k steps, ``forks``,
    ``pass``, ``passRate``), ``pivot`` (the checkpoint after the largest
    drop in pass rate between consecutive checkpoints, the first on a tie;
    None when the rate never drops, where the original names checkpoint 1)
    and ``located`` (``pivot - 1``: the 0-based index of the step that
    caused the drop, as the original counts; glyph's step ``pivot``)."""
    forks = sorted({r.forks for r in rates})
    pivot, drop = None, 0.0
    for k in range(1, len(rates)):
        d = rates[k - 1].pass_rate - rates[k].pass_rate
        if d > drop:
            pivot, drop = k, d
    return {"experiment": "credit-assignment",
            "forks": forks[0] if len(forks) == 1 else forks,
            "checkpoints": [{"checkpoint": k, "forks": r.forks, "pass": r.passes, "passRate": r.pass_rate}
                            for k, r in enumerate(rates)],
            "pivot": pivot, "located": None if pivot is None else pivot - 1}
