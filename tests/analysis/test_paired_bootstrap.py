"""The exact paired quantile bootstrap is the paired bootstrap (scipy's resampling).

`labkit.analysis.paired_bootstrap.paired_quantile_draws` draws (Q_b, Q_o) of a resample of
pairs without building it. Checked three ways: against the enumeration of every resample
of a tiny sample (the exact joint distribution, ties included); against
`scipy.stats.bootstrap(paired=True, method="percentile")` at n = 20,000 correlated pairs,
several seeds, by interval endpoints within Monte Carlo error; and by what an interval must
do: cover a shift planted in the population, span 0 where there is none.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats as sps

from labkit.analysis.paired_bootstrap import paired_quantile_draws
from labkit.report.compare import GATE_METRICS, Comparison, _change_interval

pytestmark = pytest.mark.unit

#: Resamples of the interval under test (compare's default) and of scipy's reference.
B = 2000
B_REF = 10_000
ALPHA = 0.025


def _rank_slack(b: int) -> float:
    """Four standard errors of the empirical ALPHA-quantile's rank share among b draws:
    sqrt(α(1−α)/b) (binomial counting)."""
    return 4.0 * math.sqrt(ALPHA * (1 - ALPHA) / b)


def _within(reference: np.ndarray, value: float, share: float) -> None:
    """`value` lies between the reference distribution's quantiles at share ± the slack of
    both Monte Carlo errors (the interval's B draws and the reference's B_REF)."""
    slack = _rank_slack(B) + _rank_slack(B_REF)
    lo, hi = np.quantile(reference, [max(0.0, share - slack), min(1.0, share + slack)])
    assert lo <= value <= hi, (share, lo, value, hi)


def _enumerated(b: np.ndarray, o: np.ndarray, q: float) -> Counter[tuple[float, float]]:
    """The exact paired bootstrap distribution: every one of the nⁿ resamples of the pairs."""
    exact: Counter[tuple[float, float]] = Counter()
    for idx in itertools.product(range(len(b)), repeat=len(b)):
        pick = list(idx)
        key = (round(float(np.quantile(b[pick], q)), 9), round(float(np.quantile(o[pick], q)), 9))
        exact[key] += 1
    return exact


@pytest.mark.parametrize(
    ("b", "o", "q"),
    [
        ([6.8, 1.7, 3.4, 5.1], [4.4, 2.85, 1.7, 5.55], 0.5),
        ([6.8, 1.7, 3.4, 5.1], [4.4, 2.85, 1.7, 5.55], 0.9),
        ([2.0, 1.0, 2.0, 3.0, 1.0], [5.0, 5.0, 1.0, 2.0, 5.0], 0.5),  # ties on both sides
        ([2.0, 1.0, 2.0, 3.0, 1.0], [5.0, 5.0, 1.0, 2.0, 5.0], 0.9),
        ([1.0, 4.0, 2.0, 8.0, 5.0], [3.0, 1.0, 9.0, 2.0, 7.0], 0.3),
    ],
)
def test_draws_follow_the_enumerated_joint_distribution(
    b: list[float], o: list[float], q: float
) -> None:
    """Tiny samples: the draws' joint (Q_b, Q_o) fits the distribution of all nⁿ resamples
    by a chi-square test (level 1e-4: a correct sampler fails it once in 10,000 seeds), and
    never leaves its support."""
    x, y = np.array(b), np.array(o)
    exact = _enumerated(x, y, q)
    qb, qo = paired_quantile_draws(x, y, q, 100_000, np.random.default_rng(3))
    seen = Counter(zip(np.round(qb, 9).tolist(), np.round(qo, 9).tolist(), strict=True))
    assert set(seen) <= set(exact)
    support = sorted(exact)
    observed = np.array([seen[v] for v in support], dtype=float)
    expected = np.array([exact[v] for v in support], dtype=float) / len(x) ** len(x) * len(qb)
    assert sps.chisquare(observed, expected).pvalue > 1e-4


def _correlated_pairs(n: int, seed: int, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """n pairs with lognormal TTFT-like marginals (the same for both, the run's moved by
    `shift` ms), correlated 0.8 on the log scale: the same prompts measured twice."""
    data = np.random.default_rng(seed)
    z = data.standard_normal(n)
    z2 = 0.8 * z + 0.6 * data.standard_normal(n)
    return np.exp(4.0 + 0.4 * z), np.exp(4.0 + 0.4 * z2) + shift


def _both_changes(base: np.ndarray, other: np.ndarray, axis: int = -1) -> np.ndarray:
    """p50 and p90 changes (ms, %), stacked: one scipy bootstrap call serves both metrics."""
    out = []
    for q in (0.5, 0.9):
        b = np.quantile(base, q, axis=axis)
        o = np.quantile(other, q, axis=axis)
        out += [o - b, 100.0 * (o / b - 1.0)]
    return np.stack(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interval_agrees_with_scipys_paired_bootstrap(seed: int) -> None:
    """n = 20,000 correlated pairs: compare's paired interval of p50 and p90 (ms and %)
    has its endpoints where scipy's paired percentile bootstrap (10,000 resamples) puts
    them, and the same spread; the unpaired interval of the same data is far wider."""
    base, other = _correlated_pairs(20_000, 300 + seed, shift=2.0)
    ref = sps.bootstrap(
        (base, other),
        _both_changes,
        n_resamples=B_REF,
        batch=200,
        vectorized=True,
        paired=True,
        method="percentile",
        random_state=np.random.default_rng(1000 + seed),
    ).bootstrap_distribution
    for i, name in enumerate(["ttft_p50", "ttft_p90"]):
        metric = GATE_METRICS[name]
        low, high, pct_low, pct_high = _change_interval(
            base, other, metric, True, np.random.default_rng(seed), Comparison(resamples=B)
        )
        _within(ref[2 * i], low, ALPHA)
        _within(ref[2 * i], high, 1 - ALPHA)
        _within(ref[2 * i + 1], pct_low, ALPHA)
        _within(ref[2 * i + 1], pct_high, 1 - ALPHA)
        q = metric.quantile or 0.0
        qb, qo = paired_quantile_draws(base, other, q, B_REF, np.random.default_rng(seed))
        # The standard deviation of B_REF draws has a relative standard error ≈ 1/sqrt(2·B_REF),
        # and so has the reference's: 4 standard errors of their difference.
        rel = 4 * math.sqrt(2 / (2 * B_REF))
        assert np.std(qo - qb) == pytest.approx(np.std(ref[2 * i]), rel=rel)
        u_low, u_high, _, _ = _change_interval(
            base, other, metric, False, np.random.default_rng(seed), Comparison(resamples=B)
        )
        assert high - low < 0.8 * (u_high - u_low)


def _covered(shift: float, seeds: range, name: str) -> list[tuple[float, float]]:
    intervals = []
    for seed in seeds:
        base, other = _correlated_pairs(5000, 500 + seed, shift)
        low, high, _, _ = _change_interval(
            base, other, GATE_METRICS[name], True, np.random.default_rng(seed), Comparison()
        )
        intervals.append((low, high))
    return intervals


@pytest.mark.parametrize("name", ["ttft_p50", "ttft_p90"])
def test_a_planted_shift_is_covered_and_no_shift_spans_zero(name: str) -> None:
    """20 seeds of 5,000 pairs: a 95 % interval covers the planted 8 ms shift of the
    quantile in at least 16 (Binomial(20, 0.95) gives ≤ 15 with probability 0.3 %) and
    excludes 0 in all (the p90 interval's half-width is about 2 ms here, so 8 ms is four
    of them); with no shift it spans 0 in at least 16."""
    shifted = _covered(8.0, range(20), name)
    assert sum(lo <= 8.0 <= hi for lo, hi in shifted) >= 16
    assert all(lo > 0 for lo, _ in shifted)
    same = _covered(0.0, range(20), name)
    assert sum(lo <= 0.0 <= hi for lo, hi in same) >= 16


def test_same_seed_same_draws_and_bad_input_is_refused() -> None:
    """Seeded: the same generator state gives the same draws; a length mismatch, a
    single pair or q = 1 is one clear error."""
    base, other = _correlated_pairs(1000, 9)
    one = paired_quantile_draws(base, other, 0.9, 500, np.random.default_rng(4))
    two = paired_quantile_draws(base, other, 0.9, 500, np.random.default_rng(4))
    assert np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1])
    for b, o, q in [(base, other[:-1], 0.5), (base[:1], other[:1], 0.5), (base, other, 1.0)]:
        with pytest.raises(ValueError, match="paired_quantile_draws needs"):
            paired_quantile_draws(b, o, q, 10, np.random.default_rng(0))
