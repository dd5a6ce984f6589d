"""The statistics module: the least n each interval needs, the intervals' coverage on seeded
samples, their invariants for any sample, exact shares, and the one rendering rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as sps

from labkit.analysis.stats import (
    describe,
    describe_share,
    fit_prompt_cost,
    median,
    min_n,
    order_statistic_ranks,
    proportion,
    quantile,
    quantiles,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("q", "need"), [(0.5, 6), (0.9, 29), (0.99, 299)])
def test_min_n_is_the_least_n_whose_extremes_bracket_the_quantile(q: float, need: int) -> None:
    assert min_n(q) == need

    def coverage(n: int) -> float:
        return 1 - q**n - (1 - q) ** n

    assert coverage(need) >= 0.95 > coverage(need - 1)


@pytest.mark.parametrize(("q", "need"), [(0.5, 6), (0.9, 29), (0.99, 299)])
def test_a_quantile_has_an_interval_from_min_n_on(q: float, need: int) -> None:
    rng = np.random.default_rng(1)
    short = quantile(rng.exponential(size=need - 1), q)
    assert (short.lo, short.hi, short.supported) == (None, None, False)
    assert short.value is not None and short.n == need - 1 and short.min_n == need
    enough = quantile(rng.exponential(size=need), q)
    assert enough.supported and enough.lo is not None and enough.hi is not None


@pytest.mark.parametrize(("n", "q"), [(6, 0.5), (20, 0.5), (101, 0.5), (29, 0.9), (60, 0.9)])
def test_the_ranks_hold_the_confidence_by_the_binomial(n: int, q: float) -> None:
    low, high = order_statistic_ranks(n, q)
    assert 1 <= low < high <= n
    assert sps.binom.cdf(high - 1, n, q) - sps.binom.cdf(low - 1, n, q) >= 0.95


@pytest.mark.parametrize(
    ("n", "q", "draw"),
    [
        (8, 0.5, "exponential"),
        (30, 0.5, "lognormal"),
        (40, 0.9, "exponential"),
        (300, 0.99, "lognormal"),
    ],
)
def test_intervals_cover_the_true_quantile_at_least_95_percent_of_the_time(
    n: int, q: float, draw: str
) -> None:
    rng = np.random.default_rng(20261201)
    if draw == "exponential":
        truth = float(sps.expon.ppf(q))
        samples = rng.exponential(size=(1000, n))
    else:
        truth = float(sps.lognorm.ppf(q, s=1.0))
        samples = rng.lognormal(sigma=1.0, size=(1000, n))
    hits = 0
    for sample in samples:
        figure = quantile(sample, q)
        assert figure.lo is not None and figure.hi is not None
        hits += figure.lo <= truth <= figure.hi
    # The exact coverage is >= 95%; 1000 draws put the observed share within about 1.4% of it.
    assert hits / 1000 >= 0.93


def test_a_long_sample_s_median_interval_matches_scipy_s_quantile_test() -> None:
    sample = np.random.default_rng(7).lognormal(size=400)
    ours = median(sample)
    scipys = sps.quantile_test(sample, q=float(np.median(sample)), p=0.5).confidence_interval(0.95)
    assert ours.lo is not None and ours.hi is not None
    ordered = np.sort(sample)
    # Narrowest and equal-tailed intervals of a symmetric binomial: at most one rank apart.
    for mine, theirs in ((ours.lo, scipys.low), (ours.hi, scipys.high)):
        assert abs(int(np.searchsorted(ordered, mine)) - int(np.searchsorted(ordered, theirs))) <= 1


@given(
    st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=400),
    st.sampled_from([0.5, 0.9, 0.99, 0.25]),
)
def test_bounds_are_sample_values_around_the_estimate(values: list[float], q: float) -> None:
    figure = quantile(values, q)
    assert figure.n == len(values)
    assert figure.value is not None
    assert figure.value == pytest.approx(float(np.quantile(values, q)))
    if figure.supported:
        assert figure.lo is not None and figure.hi is not None
        assert figure.lo <= figure.value <= figure.hi
        assert figure.lo in values and figure.hi in values
    else:
        assert figure.lo is None and figure.hi is None


def test_no_values_give_no_estimate() -> None:
    figure = median([])
    assert (figure.value, figure.lo, figure.hi, figure.n) == (None, None, None, 0)
    assert describe(figure) == "no requests (n=0)"


def test_quantiles_keeps_the_order_asked() -> None:
    figures = quantiles(range(1, 401), (0.99, 0.5))
    assert [f.q for f in figures] == [0.99, 0.5]
    assert figures[1].value == pytest.approx(200.5)


def test_describe_follows_the_rendering_rule() -> None:
    supported = median([398, 400, 405, 410, 411, 412, 412, 415, 420, 425, 430, 431])
    assert supported.lo == 405 and supported.hi == 425
    assert describe(supported) == "412 ms (95% CI 405–425, n=12)"
    assert describe(median([400, 410, 414, 420])) == "412 ms (n=4; an interval needs 6)"
    assert describe(quantile([1, 2, 3, 4, 5, 6], 0.99)) == "p99 needs ≥ 299 requests (n=6)"
    assert describe(median([12.25] * 6), unit="tok/s") == "12.2 tok/s (95% CI 12.2–12.2, n=6)"


def test_proportion_is_clopper_pearson() -> None:
    share = proportion(180, 192)
    ci = sps.binomtest(180, 192).proportion_ci(method="exact")
    assert share.value == pytest.approx(180 / 192)
    assert (share.lo, share.hi) == pytest.approx((ci.low, ci.high))
    assert describe_share(share) == "94% (95% CI 89–97%, 180 of 192)"
    all_met = proportion(16, 16)
    assert all_met.hi == 1.0 and all_met.lo is not None and all_met.lo < 1
    assert proportion(0, 0).value is None
    with pytest.raises(ValueError, match="0 <= k <= n"):
        proportion(5, 4)


@given(st.integers(min_value=1, max_value=2000), st.data())
def test_a_share_s_interval_holds_its_value(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    share = proportion(k, n)
    assert share.lo is not None and share.hi is not None and share.value is not None
    assert 0 <= share.lo <= share.value <= share.hi <= 1


def test_the_prompt_cost_model_is_chosen_by_the_data() -> None:
    rng = np.random.default_rng(3)
    tokens = np.repeat([16, 256, 1024, 2048, 4096], 4).astype(float)
    noise = rng.normal(0, 10, tokens.size)
    curved = fit_prompt_cost(tokens, 40 + 0.2 * tokens + 5e-5 * tokens**2 + noise)
    assert curved is not None and curved.model == "quadratic"
    assert curved.ms_per_token_squared is not None
    for at, estimate in ((16, curved.marginal_at_min), (4096, curved.marginal_at_max)):
        assert estimate.lo is not None and estimate.hi is not None
        assert estimate.lo <= 0.2 + 2 * 5e-5 * at <= estimate.hi
    straight = fit_prompt_cost(tokens, 40 + 0.2 * tokens + noise)
    assert straight is not None and straight.model == "linear"
    assert straight.curvature_p is not None and straight.curvature_p >= 0.05
    assert straight.intercept_reading == "positive"
    assert fit_prompt_cost([16, 16, 16], [1, 2, 3]) is None


def test_a_generated_token_against_a_prompt_token_is_a_ratio_with_its_interval() -> None:
    from labkit.analysis.stats import ratio_of_costs

    rng = np.random.default_rng(3)
    tokens = [64, 128, 256, 512] * 4
    ttft = [30 + 0.5 * n + rng.normal(0, 2) for n in tokens]  # 0.5 ms a prompt token
    decode = [10 + rng.normal(0, 0.3) for _ in tokens]  # 10 ms a generated token
    r = ratio_of_costs(tokens, ttft, decode)
    assert r is not None and r.lo is not None and r.hi is not None
    assert r.lo < 20 < r.hi and r.value == pytest.approx(20, rel=0.05)
    assert ratio_of_costs(tokens, ttft, decode) == r  # seeded: one run, one interval
    # a prompt that costs nothing to read has no ratio; too few lengths, no interval's end
    assert ratio_of_costs(tokens, [30.0] * len(tokens), decode) is None
    few = ratio_of_costs([16, 16, 128, 128], [10.0, 10.0, 66.0, 66.0], [9.0] * 4)
    assert few is not None and few.value == pytest.approx(18) and few.hi is None
