"""compare's exact bootstrap draws agree with scipy.stats.bootstrap's resampling.

An unpaired quantile's bootstrap distribution is drawn from Beta order statistics (a paired
one: tests/analysis/test_paired_bootstrap.py) and the error rate's from Binomial /
Multinomial counts (labkit/report/compare.py); these tests check that they are the same
distribution as scipy's resample-and-compute bootstrap: exactly against an enumeration for a
tiny sample, and by interval endpoints within Monte Carlo error for moderate n, over several
seeds.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats as sps

from labkit.report.compare import (
    GATE_METRICS,
    Comparison,
    _change_interval,
    _change_statistic,
    _fast_distribution,
    _resampled_quantile,
)

pytestmark = pytest.mark.unit

#: Resamples of the interval under test (compare's default) and of scipy's reference.
B = 2000
B_REF = 40_000
ALPHA = 0.025


def _rank_slack(b: int) -> float:
    """Four standard errors of the empirical ALPHA-quantile's rank among b draws: the
    α-quantile of b draws sits at rank share α ± sqrt(α(1−α)/b) (binomial counting)."""
    return 4.0 * math.sqrt(ALPHA * (1 - ALPHA) / b)


def _within(reference: np.ndarray, value: float, share: float) -> None:
    """`value` lies between the reference distribution's quantiles at share ± the slack of
    both Monte Carlo errors (the interval's B and the reference's B_REF)."""
    slack = _rank_slack(B) + _rank_slack(B_REF)
    lo, hi = np.quantile(reference, [max(0.0, share - slack), min(1.0, share + slack)])
    assert lo <= value <= hi, (share, lo, value, hi)


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_resampled_quantile_matches_the_enumerated_bootstrap(q: float) -> None:
    """n = 4: all 4⁴ resamples enumerated give the exact bootstrap distribution of the
    linear quantile (interpolated at p50: h = 1.5; at p90: h = 2.7); the Beta draws fit
    it by a chi-square goodness-of-fit test."""
    x = np.array([1.0, 2.0, 4.0, 8.0])
    exact = Counter(
        round(float(np.quantile(np.array(r), q)), 9) for r in itertools.product(x, repeat=4)
    )
    draws = _resampled_quantile(x, q, 50_000, np.random.default_rng(3))
    seen = Counter(round(float(v), 9) for v in draws)
    assert set(seen) <= set(exact)
    support = sorted(exact)
    observed = np.array([seen[v] for v in support], dtype=float)
    expected = np.array([exact[v] for v in support], dtype=float) / 4**4 * len(draws)
    assert sps.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["ttft_p50", "ttft_p90"])
def test_unpaired_quantile_interval_agrees_with_scipy(seed: int, name: str) -> None:
    """A lognormal baseline and a shifted run, n = 300 and 250: the fast interval's
    endpoints sit where scipy's bootstrap distribution (40,000 resamples) puts them."""
    metric = GATE_METRICS[name]
    data = np.random.default_rng(100 + seed)
    base = data.lognormal(4.0, 0.4, 300)
    other = data.lognormal(4.1, 0.4, 250)
    low, high, pct_low, pct_high = _change_interval(
        base, other, metric, False, np.random.default_rng(seed), Comparison(resamples=B)
    )
    ref = sps.bootstrap(
        (base, other),
        _change_statistic(metric, 1.0),
        n_resamples=B_REF,
        vectorized=True,
        method="percentile",
        random_state=np.random.default_rng(1000 + seed),
    ).bootstrap_distribution
    _within(ref[0], low, ALPHA)
    _within(ref[0], high, 1 - ALPHA)
    _within(ref[1], pct_low, ALPHA)
    _within(ref[1], pct_high, 1 - ALPHA)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("paired", [False, True])
def test_error_rate_interval_agrees_with_scipy(seed: int, paired: bool) -> None:
    """Failures at 8 % and 12 % (n = 400), paired or not: Binomial / Multinomial counts
    give the interval scipy's resampling gives, and the same spread."""
    metric = GATE_METRICS["error_rate"]
    data = np.random.default_rng(200 + seed)
    base = (data.random(400) < 0.08).astype(float)
    other = (data.random(400) < 0.12).astype(float)
    low, high, _, _ = _change_interval(
        base, other, metric, paired, np.random.default_rng(seed), Comparison(resamples=B)
    )
    ref = sps.bootstrap(
        (base, other),
        _change_statistic(metric, 100.0),
        n_resamples=B_REF,
        vectorized=True,
        paired=paired,
        method="percentile",
        random_state=np.random.default_rng(1000 + seed),
    ).bootstrap_distribution[0]
    _within(ref, low, ALPHA)
    _within(ref, high, 1 - ALPHA)
    drawn = _fast_distribution(base, other, metric, paired, np.random.default_rng(seed), B_REF)
    assert drawn is not None
    spread = np.std((drawn[1] - drawn[0]) * 100.0)
    # The standard deviation of B_REF draws has a relative standard error ≈ 1/sqrt(2·B_REF).
    assert spread == pytest.approx(np.std(ref), rel=8 / math.sqrt(2 * B_REF))


def test_paired_quantiles_are_drawn_exactly_too() -> None:
    """Paired quantiles no longer go to scipy's resampling: both sides have a fast draw,
    and a paired one moves the two quantiles together (x and x + 1: every draw differs
    by exactly 1, as every paired resample does)."""
    x = np.arange(50.0)
    rng = np.random.default_rng(0)
    paired = _fast_distribution(x, x + 1, GATE_METRICS["ttft_p50"], True, rng, 100)
    assert paired is not None
    assert np.allclose(paired[1] - paired[0], 1.0)
    assert _fast_distribution(x, x + 1, GATE_METRICS["ttft_p50"], False, rng, 100) is not None


def test_a_zero_baseline_leaves_the_percent_bounds_undefined() -> None:
    """A baseline without failures: the change in points has its interval, the change in
    percent of zero has none (as with scipy's resampling)."""
    base = np.zeros(200)
    other = (np.arange(200) % 10 == 0).astype(float)
    low, high, pct_low, pct_high = _change_interval(
        base, other, GATE_METRICS["error_rate"], False, np.random.default_rng(0), Comparison()
    )
    assert 0 < low < 10 < high
    assert math.isnan(pct_low) and math.isnan(pct_high)
