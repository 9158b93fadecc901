"""The two gates that decide whether a candidate lesson is kept.

A lesson is credited only when its held-out gain clears the noise of the
measurement. Two ways to say what that noise is:

* ``band`` (the default): ``1.96 * sqrt(0.25 / (n_holdout * K))``, the 95%
  half-width of one pass rate measured from ``n_holdout * K`` rollouts at the
  worst-case Bernoulli variance (p = 0.5). It assumes every rollout is an
  independent Bernoulli draw with no task effects, and it is applied as a
  one-sided threshold on the gain of one comparison: keep if
  ``rate(with) - rate(accepted level) > band``. It is the published
  baseline's rule, and it is conservative in p but not in task structure.
* ``paired``: per holdout task, the pass rate with the candidate minus the
  pass rate at the accepted level (each over that task's scored rollouts),
  a t interval over tasks on the mean difference; keep if its lower 95%
  bound is above 0. It assumes the tasks are exchangeable draws from a
  population of tasks and accounts for per-task difficulty (each task is
  its own control); it needs enough tasks for the t interval to mean
  something (with fewer than 2 it never keeps).
* ``aa``: the measured noise floor. The sealed holdout is re-rolled R times
  with no lesson (an A/A test: the same policy against itself); the
  holdout rate of each re-roll is recorded, and the A/A band is the 95%
  quantile of ``|rate_i - rate_j|`` over all R(R-1)/2 pairs of re-rolls
  (:func:`aa_band`); keep if ``gain > aa band``. It assumes only that the
  re-rolls are exchangeable with the comparison a round makes (same
  agent, same holdout, same K), so it measures whatever correlation the
  rollouts have (per-task effects, a deterministic server, a cache)
  instead of assuming none. It costs R holdout passes, and its quantile
  is itself an estimate from R re-rolls (the pairs share re-rolls, so
  they are not independent; docs/flywheel.md gives its spread by R).

Besides the formula band, :func:`two_rate_band` is the half-width for the
difference of two independent rates (``sqrt(2)`` times the formula band),
which is what a gain is; under the formula's own assumptions (independent
Bernoulli rollouts, p = 0.5) the A/A band converges to it.

Guarantees: pure functions of their inputs, no randomness; the t quantile
is exact for integer degrees of freedom (Abramowitz & Stegun 26.7.3-4,
inverted by bisection), so no scipy is needed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

Gate = Literal["band", "paired", "aa"]
GATES: tuple[str, ...] = ("band", "paired", "aa")
DECISION_OF: dict[str, str] = {"band": "formula", "paired": "paired", "aa": "aa"}
"""Each ``--gate`` value's key among :func:`decisions` (``run.json``'s ``gated_by``)."""
DEFAULT: Gate = "band"
"""The original flywheel's rule (abhid1234/flywheel ``integrations/daytona/learn/rl-loop.mjs:57``, the
band, and ``:101``, ``gain > band``): the default, so that a run reproduces the original's."""
RECOMMENDED: Gate = "aa"
WHY_RECOMMENDED = (
    "glyph recommends --gate aa: the original calls its band the A/A noise floor (rl-loop.mjs:56); "
    "measuring it sees what the formula assumes away (a task's rollouts that agree, rates far from "
    "p = 0.5). Read the paired interval beside it: it asks whether the gain carries over to other "
    "tasks, which no band does.")
"""Why (``docs/flywheel.md`` measures each on glyph's data)."""
ASSUMES: dict[str, tuple[str, str]] = {
    "formula": ("gain > 1.96*sqrt(0.25/N), N the scored candidate rollouts",
                "every rollout an independent Bernoulli draw at p = 0.5, no task effects; one rate's "
                "half-width held against a difference of two rates (sqrt(2) too narrow even then)"),
    "two_rate": ("gain > sqrt(2) x formula",
                 "independent Bernoulli rollouts at p = 0.5, no task effects: the half-width of a "
                 "difference of two independent rates"),
    "paired": ("per-task differences, 95% t interval over tasks, lower bound > 0",
               "tasks exchangeable draws from a population of tasks, each its own control (clustering "
               "by task counted); a near-normal mean; little power when a lesson moves few tasks"),
    "aa": ("gain > 95% quantile of |difference| between no-lesson re-rolls",
           "only that the re-rolls are like a round's comparison (same agent, holdout, K): measured, so "
           "it sees correlated rollouts and rates far from 0.5; measured at the no-lesson level"),
}
"""Each gate's rule and what it assumes, as the curve page and ``glyph flywheel run`` print them."""
Z95 = 1.96
AA_QUANTILE = 0.95


def band(n_holdout: int, K: int) -> float:
    """The noise band as a fraction: ``1.96 * sqrt(0.25 / (n_holdout * K))``."""
    return band_for(n_holdout * K)


def band_for(n_rollouts: int) -> float:
    """The band for a rate measured from ``n_rollouts`` scored rollouts (equal
    to :func:`band` when none is excluded); ``inf`` for none."""
    return Z95 * math.sqrt(0.25 / n_rollouts) if n_rollouts > 0 else math.inf


def two_rate_band(n_rollouts: int) -> float:
    """The 95% half-width of the difference of two independent rates, each from
    ``n_rollouts`` Bernoulli(0.5) rollouts: ``sqrt(2) * band_for(n_rollouts)``."""
    return math.sqrt(2) * band_for(n_rollouts)


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` by linear interpolation between order
    statistics (numpy's default, "linear"); ``nan`` for no values."""
    v = sorted(xs)
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


@dataclass(frozen=True)
class AABand:
    """The A/A measurement: the holdout rate of each no-lesson re-roll, and the
    95% quantile of the absolute differences between every pair of re-rolls."""

    rates: tuple[float, ...]
    band: float
    """``quantile(|rate_i - rate_j| over i < j, 0.95)`` (``inf`` with fewer than 2 re-rolls)."""
    mean_abs: float
    sd_rate: float

    @property
    def pairs(self) -> int:
        return len(self.rates) * (len(self.rates) - 1) // 2

    def to_json(self) -> dict:
        pp = lambda x: None if not math.isfinite(x) else round(100 * x, 4)  # noqa: E731
        return {"runs": len(self.rates), "pairs": self.pairs, "quantile": AA_QUANTILE, "band_pp": pp(self.band),
                "mean_abs_diff_pp": pp(self.mean_abs), "sd_rate_pp": pp(self.sd_rate),
                "normal_two_rate_pp": pp(Z95 * math.sqrt(2) * self.sd_rate),
                "abs_diff_quantiles_pp": {str(q): pp(quantile(self.differences(), q)) for q in (0.5, 0.9, 0.95, 0.99)},
                "rates": [round(r, 6) for r in self.rates]}

    def differences(self) -> list[float]:
        """``|rate_i - rate_j|`` over every pair ``i < j``."""
        return [abs(a - b) for i, a in enumerate(self.rates) for b in self.rates[i + 1:]]


def aa_band(rates: Sequence[float]) -> AABand:
    """The A/A band from the holdout rates of R no-lesson re-rolls.

    ``normal_two_rate_pp`` in :meth:`AABand.to_json` is the same spread
    assuming normal differences (``1.96 * sqrt(2) * sd(rates)``): a smoother
    estimate to read beside the empirical quantile, not the gate."""
    rates = tuple(rates)
    diffs = AABand(rates, math.inf, math.nan, math.nan).differences()
    if not diffs:
        return AABand(rates, math.inf, math.nan, math.nan)
    sd = statistics.stdev(rates)
    return AABand(rates, quantile(diffs, AA_QUANTILE), math.fsum(diffs) / len(diffs), sd)


def t_cdf_two_sided(t: float, df: int) -> float:
    """``P(|T| < t)`` for Student's t with integer ``df`` (A&S 26.7.3-4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:
        term = total = 1.0
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term = total = math.cos(theta)
    for j in range(1, (df - 1) // 2):
        term *= c2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + s * total)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``df`` degrees of freedom."""
    if not 0.5 < p < 1:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    target, lo, hi = 2 * p - 1, 0.0, 1.0
    while t_cdf_two_sided(hi, df) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf_two_sided(mid, df) < target else (lo, mid)
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


@dataclass(frozen=True)
class Paired:
    """The paired comparison over tasks, as fractions (``*_pp`` in :meth:`to_json`)."""

    mean: float
    lo: float
    hi: float
    n_tasks: int

    @property
    def keep(self) -> bool:
        return self.n_tasks >= 2 and self.lo > 0

    def to_json(self) -> dict:
        pp = lambda x: None if not math.isfinite(x) else round(100 * x, 4)  # noqa: E731
        return {"mean_pp": pp(self.mean), "lo_pp": pp(self.lo), "hi_pp": pp(self.hi), "n_tasks": self.n_tasks}


def paired(with_rates: Mapping[str, float], without_rates: Mapping[str, float]) -> Paired:
    """The 95% t interval on the mean per-task difference ``with - without``
    over the tasks present in both mappings (a task whose rollouts were all
    excluded on either side is left out by the caller's mappings)."""
    common = sorted(set(with_rates) & set(without_rates))
    diffs = [with_rates[t] - without_rates[t] for t in common]
    n = len(diffs)
    if n == 0:
        return Paired(math.nan, -math.inf, math.inf, 0)
    mean = math.fsum(diffs) / n
    if n < 2:
        return Paired(mean, -math.inf, math.inf, n)
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return Paired(mean, mean - half, mean + half, n)


def decide(gate: Gate, gain: float, band_value: float, paired_result: Paired, aa: AABand | None = None) -> bool:
    """Keep the candidate? ``band``: gain > band; ``paired``: lower bound > 0;
    ``aa``: gain > the A/A band (``aa`` must be given)."""
    if gate == "band":
        return math.isfinite(gain) and gain > band_value
    if gate == "paired":
        return paired_result.keep
    if gate == "aa":
        if aa is None:
            raise ValueError("gate 'aa' needs the A/A measurement")
        return math.isfinite(gain) and gain > aa.band
    raise ValueError(f"unknown gate {gate!r} (expected one of {', '.join(GATES)})")


def decisions(gain: float | None, formula: float | None, paired_result: Paired | None,
              aa: AABand | None) -> dict[str, dict | None]:
    """Every gate's verdict on one candidate, side by side (pp, as ``run.json``
    holds them): ``formula`` (gain > ``formula``), ``two_rate`` (gain >
    sqrt(2) x it), ``paired`` (its interval, ``keep``) and ``aa`` (gain > the
    A/A band); None for a gate that cannot be computed (no per-task rates, no
    A/A measurement)."""
    finite = gain is not None and math.isfinite(gain)
    pp = lambda x: None if x is None or not math.isfinite(x) else round(100 * x, 4)  # noqa: E731

    def band_gate(width: float | None) -> dict | None:
        return None if width is None else {"band_pp": pp(width), "keep": finite and gain > width}

    return {"formula": band_gate(formula),
            "two_rate": band_gate(None if formula is None else math.sqrt(2) * formula),
            "paired": (None if paired_result is None
                       else paired_result.to_json() | {"keep": paired_result.keep}),
            "aa": band_gate(None if aa is None else aa.band)}


def agree(gates: dict[str, dict | None]) -> bool:
    """Whether every computed gate of :func:`decisions` says the same."""
    return len({d["keep"] for d in gates.values() if d is not None}) <= 1


def includes_zero(paired_json: dict | None) -> bool | None:
    """Whether a paired interval (``Paired.to_json``: ``lo_pp``/``hi_pp``, None for an infinite bound)
    includes 0; None where there is no paired comparison."""
    if not paired_json or paired_json.get("mean_pp") is None:
        return None
    lo, hi = paired_json["lo_pp"], paired_json["hi_pp"]
    return (lo is None or lo <= 0) and (hi is None or hi >= 0)


def lesson_fields(decisions: dict | None, gate: str) -> dict:
    """A lesson's gate fields in ``run.json``: every gate's verdict (``gate.decisions``), the one
    that decided (``gated_by``), whether they agree, and whether the paired interval includes 0."""
    if decisions is None:
        return {"gates": None, "gated_by": DECISION_OF[gate], "gates_agree": None,
                "paired_includes_zero": None}
    return {"gates": decisions, "gated_by": DECISION_OF[gate], "gates_agree": agree(decisions),
            "paired_includes_zero": includes_zero(decisions["paired"])}


def verdicts(decisions: dict) -> dict:
    """A curve point's ``decisions``: each gate's keep (None where it was not computed)."""
    return {name: None if d is None else d["keep"] for name, d in decisions.items()}
