"""The cost per successful answer's bootstrap (`ratio_of_sums`, `resampled_ratios`): its
draws follow the paired bootstrap's exact law (every resample of a tiny sample enumerated),
by a multinomial over the distinct rows and by drawing units alike, agree with
scipy.stats.bootstrap's interval within the Monte Carlo error of 999 resamples, and keep a
resample with no success infinite (no upper bound)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats as sps

from labkit.analysis import stats
from labkit.analysis.stats import ratio_of_sums, resampled_ratios

pytestmark = pytest.mark.unit

#: How `resampled_ratios` draws: a multinomial over the distinct rows (`_COUNTS_WHILE` 1:
#: counts whenever K ≤ n), units one by one (a huge `_COUNTS_WHILE`); each with blocks of
#: a few numbers so that a resample's draws span several blocks' worth of resamples.
WAYS = {"counts": 1, "units": 10**9}


def _exact_law(x: list[float], y: list[float]) -> dict[float, float]:
    """Σx*/Σy* over all nⁿ equally likely resamples (inf where Σy* is 0)."""
    n = len(x)
    law: Counter[float] = Counter()
    for pick in itertools.product(range(n), repeat=n):
        num, den = sum(x[i] for i in pick), sum(y[i] for i in pick)
        law[num / den if den > 0 else math.inf] += 1
    return {v: c / n**n for v, c in law.items()}


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([1.0, 1.0, 2.0, 5.0], [1.0, 1.0, 0.0, 1.0]),  # repeated rows, a failed unit
        ([3.0, 1.0, 4.0, 1.0, 5.0], [1.0, 0.0, 1.0, 1.0, 0.0]),  # n = 5, 3125 resamples
    ],
)
def test_the_draws_follow_the_enumerated_bootstrap_law(
    way: str, x: list[float], y: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stats, "_COUNTS_WHILE", WAYS[way])
    monkeypatch.setattr(stats, "_BLOCK_DRAWS", 7)
    law = _exact_law(x, y)
    size = 40_000
    draws = resampled_ratios(np.array(x), np.array(y), size, np.random.default_rng(5))
    # integer sums: each drawn ratio is one of the enumerated values, bit for bit
    seen = Counter(draws.tolist())
    assert set(seen) <= set(law)
    values = sorted(law)
    expected = np.array([law[v] * size for v in values])
    observed = np.array([seen.get(v, 0) for v in values], dtype=float)
    # cells expected under 5 draws pooled, so the chi-square approximation holds
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    result = sps.chisquare(observed, expected)
    assert result.pvalue > 1e-4, (way, result)


def test_counts_and_units_are_the_two_ways_the_law_is_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Which way a sample takes: counts where its rows repeat (K ≤ n/32), units else."""
    calls: list[str] = []
    real_multinomial = np.random.Generator.multinomial

    class Spy:
        def __init__(self, rng: np.random.Generator) -> None:
            self.rng = rng

        def multinomial(self, *args: object, **kw: object) -> np.ndarray:
            calls.append("counts")
            return real_multinomial(self.rng, *args, **kw)  # type: ignore[arg-type]

        def integers(self, *args: object, **kw: object) -> np.ndarray:
            calls.append("units")
            return np.asarray(self.rng.integers(*args, **kw))  # type: ignore[call-overload]

    few = np.array([1.0, 2.0] * 64)
    resampled_ratios(few, np.ones(128), 10, Spy(np.random.default_rng(0)))  # type: ignore[arg-type]
    many = np.arange(128, dtype=float)
    resampled_ratios(many, np.ones(128), 10, Spy(np.random.default_rng(0)))  # type: ignore[arg-type]
    assert calls == ["counts", "units"]


def _scipy_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The interval as labkit stated it before: scipy.stats.bootstrap, paired, 999
    resamples, percentile endpoints taken as order statistics (inverted_cdf)."""

    def ratio(xs: np.ndarray, ys: np.ndarray) -> float:
        den = float(ys.sum())
        return float(xs.sum()) / den if den > 0 else math.inf

    result = sps.bootstrap(
        (x, y),
        ratio,
        paired=True,
        vectorized=False,
        n_resamples=999,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    lo, hi = np.percentile(result.bootstrap_distribution, [2.5, 97.5], method="inverted_cdf")
    return float(lo), float(hi)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_interval_agrees_with_scipys_within_the_monte_carlo_error(seed: int) -> None:
    """A few distinct costs (token counts × prices) over 400 units: the counts way. Each
    endpoint is the 25th (975th) of 999 draws, so its place F(endpoint) in the bootstrap
    distribution is Beta(25, 975) (Beta(975, 25)): sd ≈ 0.0049, a difference of two
    independent ones sd ≈ 0.0070. F is read off 200,000 reference draws (its own error
    ≈ 0.00035). The bound: 5 sd of the difference."""
    rng = np.random.default_rng(seed)
    n = 400
    x = rng.choice([0.0021, 0.0035, 0.0042, 0.0107], size=n)
    y = (rng.random(n) < 0.85).astype(float)
    ours = ratio_of_sums(x, y)
    assert ours is not None and ours.lo is not None and ours.hi is not None
    assert ours.value == pytest.approx(x.sum() / y.sum())
    lo, hi = _scipy_interval(x, y)
    reference = np.sort(resampled_ratios(x, y, 200_000, np.random.default_rng(100 + seed)))

    def place(v: float) -> float:
        return float(np.searchsorted(reference, v, side="right")) / reference.size

    sd_diff = math.sqrt(2 * 0.025 * 0.975 / 1000)
    assert abs(place(ours.lo) - place(lo)) <= 5 * sd_diff
    assert abs(place(ours.hi) - place(hi)) <= 5 * sd_diff
    beta_lo = sps.beta(25, 975).interval(0.9999)
    beta_hi = sps.beta(975, 25).interval(0.9999)
    assert beta_lo[0] - 0.002 <= place(ours.lo) <= beta_lo[1] + 0.002
    assert beta_hi[0] - 0.002 <= place(ours.hi) <= beta_hi[1] + 0.002


def test_units_way_draws_what_scipy_drew() -> None:
    """Near-distinct rows are drawn unit by unit from the same seeded generator as
    scipy.stats.bootstrap drew its indices: the same interval."""
    rng = np.random.default_rng(9)
    x = rng.gamma(2.0, 0.001, 300)
    y = (rng.random(300) < 0.8).astype(float)
    ours = ratio_of_sums(x, y)
    assert ours is not None and ours.lo is not None and ours.hi is not None
    lo, hi = _scipy_interval(x, y)
    assert ours.lo == pytest.approx(lo, rel=1e-12)
    assert ours.hi == pytest.approx(hi, rel=1e-12)


@pytest.mark.parametrize("units", [2, 64])
def test_a_resample_with_no_success_leaves_no_upper_bound(units: int) -> None:
    """One success among `units` (the units way at 2, the counts way at 64): over 2.5 % of
    resamples miss it, so the interval has no upper bound, as before."""
    x = [1.0] * units
    y = [1.0] + [0.0] * (units - 1)
    r = ratio_of_sums(x, y)
    assert r is not None and r.value == pytest.approx(units)
    assert r.hi is None and r.lo is not None and r.lo > 0
    assert ratio_of_sums([1.0, 2.0], [0.0, 1.0]) == ratio_of_sums([1.0, 2.0], [0.0, 1.0])
    assert ratio_of_sums([1.0, 2.0], [0.0, 0.0]) is None


def test_one_run_states_one_interval() -> None:
    rng = np.random.default_rng(4)
    x = rng.choice([1.0, 2.0, 3.0], 5000)
    y = (rng.random(5000) < 0.9).astype(float)
    first = ratio_of_sums(x, y)
    assert first is not None and first.lo is not None and first.hi is not None
    assert first.lo < first.value < first.hi
    assert ratio_of_sums(x.tolist(), y.tolist()) == first
