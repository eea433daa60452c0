"""Latency of two runs compared as two samples of durations (see ``compare.py``'s doc).

A percentile bootstrap (``RESAMPLES`` resamples of each side, seeded by ``SEED``, so the
same runs give the same answer) gives a 95 % interval of the change of each statistic
(p50, p90, p99, mean), and a two-sided Mann-Whitney U test asks whether one side's calls
tend to be slower at all. A side with fewer than ``MIN_SAMPLES`` durations is not enough
to tell; one with more than ``MAX_BOOTSTRAP`` is subsampled (seeded) for the bootstrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.analysis.gate import LATENCY_METRICS

__all__ = [
    "ALPHA",
    "MAX_BOOTSTRAP",
    "MIN_SAMPLES",
    "RESAMPLES",
    "SEED",
    "LatencyTest",
    "latency_test",
    "latency_tests",
]

ALPHA = 0.05
"""Significance level of the Mann-Whitney U test; the bootstrap interval is 1 - ALPHA."""
RESAMPLES = 2000
MIN_SAMPLES = 5
MAX_BOOTSTRAP = 10_000
SEED = 0


@dataclass
class LatencyTest:
    """Two samples of durations compared on one statistic (a quantile or the mean)."""

    column: str  # p50_ns | p90_ns | p99_ns | mean_ns
    n_base: int
    n_candidate: int
    base: float | None  # the statistic on all of each side's durations
    candidate: float | None
    change_interval: tuple[float, float] | None  # 95 % interval of candidate - base (ns)
    relative_interval: tuple[float, float] | None  # of candidate / base - 1
    p_value: float | None  # Mann-Whitney U, two-sided
    slower: bool = False  # candidate's durations tend to be larger (one-sided p < ALPHA)
    faster: bool = False

    @property
    def enough(self) -> bool:
        return self.n_base >= MIN_SAMPLES and self.n_candidate >= MIN_SAMPLES


def _stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """Every latency statistic of ``x`` along its last axis."""
    qs = [q for q in LATENCY_METRICS.values() if q is not None]
    values = np.quantile(x, qs, axis=-1)
    out = {c: values[qs.index(q)] for c, q in LATENCY_METRICS.items() if q is not None}
    out.update({c: np.mean(x, axis=-1) for c, q in LATENCY_METRICS.items() if q is None})
    return out


def _resampled(x: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every statistic of ``RESAMPLES`` resamples of ``x`` (with replacement), in batches
    of at most two million values; one draw of resamples serves every statistic."""
    n = len(x)
    out = {c: np.empty(RESAMPLES) for c in LATENCY_METRICS}
    batch = max(1, min(RESAMPLES, 2_000_000 // n))
    for start in range(0, RESAMPLES, batch):
        k = min(batch, RESAMPLES - start)
        for c, v in _stats(x[rng.integers(0, n, size=(k, n))]).items():
            out[c][start : start + k] = v
    return out


def latency_tests(base: np.ndarray, candidate: np.ndarray) -> dict[str, LatencyTest]:
    """Compare two samples of durations on each latency statistic (see the module doc):
    one Mann-Whitney U test of the samples, one bootstrap of each side for all of them."""
    from scipy.stats import mannwhitneyu

    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    point_a = {c: float(v) for c, v in _stats(a).items()} if len(a) else {}
    point_b = {c: float(v) for c, v in _stats(b).items()} if len(b) else {}
    tests = {
        c: LatencyTest(c, len(a), len(b), point_a.get(c), point_b.get(c), None, None, None)
        for c in LATENCY_METRICS
    }
    if not (len(a) >= MIN_SAMPLES and len(b) >= MIN_SAMPLES):
        return tests
    if np.all(a == a[0]) and np.all(b == a[0]):
        p_value, slower, faster = 1.0, False, False  # the same constant: nothing differs
    else:
        p_greater = float(mannwhitneyu(b, a, alternative="greater").pvalue)
        p_less = float(mannwhitneyu(b, a, alternative="less").pvalue)
        p_value = min(1.0, 2 * min(p_greater, p_less))
        slower, faster = p_greater < ALPHA, p_less < ALPHA
    rng = np.random.default_rng(SEED)
    a_boot = rng.choice(a, MAX_BOOTSTRAP, replace=False) if len(a) > MAX_BOOTSTRAP else a
    b_boot = rng.choice(b, MAX_BOOTSTRAP, replace=False) if len(b) > MAX_BOOTSTRAP else b
    sa_all, sb_all = _resampled(a_boot, rng), _resampled(b_boot, rng)
    lo, hi = 100 * ALPHA / 2, 100 * (1 - ALPHA / 2)
    for c, test in tests.items():
        sa, sb = sa_all[c], sb_all[c]
        diff = sb - sa
        test.change_interval = (float(np.percentile(diff, lo)), float(np.percentile(diff, hi)))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(sa > 0, sb / sa - 1, np.where(sb > 0, np.inf, 0.0))
        test.relative_interval = (float(np.percentile(rel, lo)), float(np.percentile(rel, hi)))
        test.p_value, test.slower, test.faster = p_value, slower, faster
    return tests


def latency_test(base: np.ndarray, candidate: np.ndarray, column: str) -> LatencyTest:
    """``latency_tests`` of one statistic (``p50_ns``, ``p90_ns``, ``p99_ns``, ``mean_ns``)."""
    return latency_tests(base, candidate)[column]
