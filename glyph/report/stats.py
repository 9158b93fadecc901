"""The report's statistics, each with the interval it is reported with.

* A proportion (pass@1, a REVISE rate, a precision) gets a 95% **Wilson
  score interval** (:func:`wilson`): it stays inside [0, 1] and keeps its
  coverage at 0/n, n/n and small n, where the normal interval does not.
* A statistic that is not a proportion (unbiased pass@k over tasks, a mean
  tool-call count, a paired difference, a mean over seeds) gets a 95%
  **percentile bootstrap** interval from numpy's PCG64 seeded with the
  report's seed (:class:`Bootstrap`): the same input and seed give the same
  interval, on any machine.
* pass@k is Chen et al.'s unbiased estimator (:func:`pass_at_k`), 1 - C(n-c,
  k) / C(n, k) per task, averaged over tasks.
* Paired comparisons use McNemar's **exact** test (:func:`mcnemar_exact`):
  the two-sided binomial test of the discordant pairs at p = 1/2, which is
  valid however few they are.

Numbers here are plain floats; formatting (one decimal for percentages)
belongs to the tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054  # the 97.5th percentile of the standard normal
LEVEL = 0.95


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for ``successes`` out of ``n``; None when n is 0."""
    if n <= 0:
        return None
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Chen et al.'s unbiased pass@k per task from ``n`` samples of which ``c``
    passed (arrays of equal length, every n >= k): 1 - C(n-c, k) / C(n, k),
    computed as a product, which stays exact in floating point for large n."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if np.any(n < k):
        raise ValueError("pass@k needs at least k samples of every task")
    out = np.ones(len(n), dtype=float)
    for t in range(len(n)):
        if n[t] - c[t] >= k:
            i = np.arange(n[t] - c[t] + 1, n[t] + 1, dtype=float)
            out[t] = 1.0 - float(np.prod(1.0 - k / i))
    return out


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs
    (one side passes, the other fails): 2 * P[X <= min(b, c)] for X ~
    Binomial(b + c, 1/2), capped at 1; 1.0 when there is no discordant pair."""
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(b, c) + 1))
    return min(1.0, 2.0 * tail / 2.0**m)


@dataclass(frozen=True)
class Bootstrap:
    """Percentile bootstrap intervals, reproducible from ``seed``."""

    resamples: int = 2000
    seed: int = 0

    def _rng(self, salt: str) -> np.random.Generator:
        # Each statistic gets its own stream (by a stable salt), so adding a
        # table does not move the intervals of the others.
        return np.random.Generator(np.random.PCG64([self.seed, _stable_hash(salt)]))

    def _interval(self, draws: np.ndarray) -> tuple[float, float]:
        lo, hi = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
        return float(lo), float(hi)

    def mean(self, values: np.ndarray, salt: str) -> tuple[float, float] | None:
        """Interval of the mean of ``values`` (resampling the values)."""
        values = np.asarray(values, dtype=float)
        if len(values) == 0:
            return None
        idx = self._rng(salt).integers(0, len(values), size=(self.resamples, len(values)))
        return self._interval(values[idx].mean(axis=1))

    def ratio(
        self, numerators: np.ndarray, denominators: np.ndarray, salt: str
    ) -> tuple[float, float] | None:
        """Interval of mean over groups g of sum(num[g]) / sum(den[g]):
        ``numerators`` and ``denominators`` are (units, groups) arrays; units
        (tasks) are resampled, the same draw for every group (seeds), so
        what the groups share stays paired."""
        num = np.asarray(numerators, dtype=float)
        den = np.asarray(denominators, dtype=float)
        if num.shape[0] == 0:
            return None
        idx = self._rng(salt).integers(0, num.shape[0], size=(self.resamples, num.shape[0]))
        num_draw, den_draw = num[idx].sum(axis=1), den[idx].sum(axis=1)  # (resamples, groups)
        present = den_draw > 0  # a group none of whose units was drawn has no value in that draw
        per_group = np.divide(num_draw, den_draw, out=np.zeros_like(num_draw), where=present)
        counts = present.sum(axis=1)
        draws = per_group.sum(axis=1)[counts > 0] / counts[counts > 0]
        return self._interval(draws) if len(draws) else None


def _stable_hash(text: str) -> int:
    h = 2166136261
    for byte in text.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h
