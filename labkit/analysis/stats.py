"""The one statistics module: quantiles and shares with their intervals, and how they read.

A quantile's interval is distribution-free: two order statistics of the sample chosen with
the binomial distribution of how many values fall below the true quantile, so it holds for
any latency distribution (long tails, several modes) with no model to trust. A share's
interval is exact (Clopper–Pearson). `describe` is the one rendering rule every table,
answer and summary uses; it never prints a tail percentile that n cannot support.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from labkit.figures import Estimate, Mean, PromptCost, Proportion, Quantile
from labkit.records import RequestRecord
from labkit.timing import percentile

__all__ = [
    "CONFIDENCE",
    "describe",
    "describe_mean",
    "describe_share",
    "fit_prompt_cost",
    "mean",
    "median",
    "median_of",
    "min_n",
    "order_statistic_ranks",
    "p_of",
    "proportion",
    "quantile",
    "quantiles",
    "ratio_of_costs",
    "ratio_of_sums",
    "resampled_ratios",
]

#: The confidence of every interval labkit states.
CONFIDENCE = 0.95


def min_n(q: float, confidence: float = CONFIDENCE) -> int:
    """The least n for which the sample's smallest and largest values bracket the `q`
    quantile with probability `confidence`: 1 − qⁿ − (1 − q)ⁿ ≥ confidence.

    No narrower pair of order statistics can do better, so under this n a quantile has no
    distribution-free interval (median 6, p90 29, p99 299 at 95%).
    """
    if not 0 < q < 1 or not 0 < confidence < 1:
        raise ValueError(f"q and confidence must lie in (0, 1), got {q} and {confidence}")
    n = max(2, math.floor(math.log1p(-confidence) / math.log(max(q, 1 - q))))
    while 1 - q**n - (1 - q) ** n < confidence:
        n += 1
    return n


@functools.lru_cache(maxsize=4096)  # the same n recurs: each metric of a group has it
def order_statistic_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """The 1-based ranks (l, u) of the narrowest interval [x₍ₗ₎, x₍ᵤ₎] of n sorted values
    that holds the `q` quantile with probability ≥ `confidence`; ValueError below `min_n`.

    The count K of values below the quantile is Binomial(n, q), and x₍ₗ₎ ≤ ξ ≤ x₍ᵤ₎ exactly
    when l ≤ K ≤ u − 1; the ranks are the K values of highest probability (the binomial
    is unimodal, so they are consecutive) until they hold `confidence`. K = 0 and K = n
    would put a bound outside the sample and are never taken.
    """
    if n < min_n(q, confidence):
        raise ValueError(f"{n} values give no {confidence:.0%} interval for the {q} quantile")
    from scipy import stats as sps  # scipy.stats takes a second to import: only when used

    # The binomial's mass lies within a few standard deviations of nq: the pmf is taken
    # over 40 of them (all of 0..n when n is small), far past any confidence's reach.
    spread = 40 * math.sqrt(n * q * (1 - q)) + 2
    first = max(0, math.floor(n * q - spread))
    last = min(n, math.ceil(n * q + spread))
    window = sps.binom.pmf(np.arange(first, last + 1), n, q)

    def pmf_at(k: int) -> float:
        return float(window[k - first]) if first <= k <= last else 0.0

    a = b = int(np.clip(first + int(np.argmax(window)), 1, n - 1))
    mass = pmf_at(a)
    while mass < confidence:
        left = pmf_at(a - 1) if a > 1 else -1.0
        right = pmf_at(b + 1) if b < n - 1 else -1.0
        if left >= right:
            a -= 1
            mass += left
        else:
            b += 1
            mass += right
    return a, b + 1


def quantile(values: Iterable[float], q: float, confidence: float = CONFIDENCE) -> Quantile:
    """The `q` quantile (0 < q < 1) of `values` with its distribution-free interval.

    The point estimate is numpy's linear interpolation; the bounds are order statistics
    (`order_statistic_ranks`), widened where needed to hold the point estimate (which only
    raises their coverage), and None when n < `min_n`.
    """
    xs = np.sort(
        np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    )
    return _quantile_of_sorted(xs, q, confidence)


def _quantile_of_sorted(xs: np.ndarray, q: float, confidence: float) -> Quantile:
    """`quantile` of values sorted already (several quantiles of them sort them once)."""
    n = int(xs.size)
    need = min_n(q, confidence)
    if n == 0:
        return Quantile(q=q, n=0, confidence=confidence, min_n=need)
    value = float(np.quantile(xs, q))
    lo = hi = None
    if n >= need:
        low_rank, high_rank = order_statistic_ranks(n, q, confidence)
        lo = min(float(xs[low_rank - 1]), value)
        hi = max(float(xs[high_rank - 1]), value)
    return Quantile(q=q, value=value, lo=lo, hi=hi, n=n, confidence=confidence, min_n=need)


def median(values: Iterable[float], confidence: float = CONFIDENCE) -> Quantile:
    """The median of `values` with its distribution-free interval."""
    return quantile(values, 0.5, confidence)


def quantiles(
    values: Iterable[float], qs: Sequence[float] = (0.5, 0.9, 0.99), confidence: float = CONFIDENCE
) -> list[Quantile]:
    """Several quantiles of the same values (p50, p90, p99 by default), in the order of `qs`."""
    xs = np.sort(
        np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    )
    return [_quantile_of_sorted(xs, q, confidence) for q in qs]


def mean(values: Iterable[float], confidence: float = CONFIDENCE) -> Mean:
    """The mean of `values` with its t-interval (scipy.stats.t over the standard error);
    no interval under 2 values, none wider than the values' spread when all are equal, and
    none below 0 for values that cannot be (a skewed sample of durations can reach below it,
    which no mean of them can)."""
    xs = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    n = int(xs.size)
    if n == 0:
        return Mean(n=0, confidence=confidence)
    value = float(xs.mean())
    if n < 2:
        return Mean(value=value, n=n, confidence=confidence)
    if float(xs.max()) == float(xs.min()):  # every value equal (a queue 0 by construction)
        return Mean(value=value, lo=value, hi=value, n=n, confidence=confidence)
    from scipy import stats as sps

    lo, hi = sps.t.interval(confidence, n - 1, loc=value, scale=float(sps.sem(xs)))
    if float(xs.min()) >= 0:  # a duration's mean is not negative: the bound stops at 0
        lo = max(float(lo), 0.0)
    return Mean(value=value, lo=float(lo), hi=float(hi), n=n, confidence=confidence)


def ratio_of_costs(
    tokens: Sequence[float],
    ttft_ms: Sequence[float],
    decode_ms_per_token: Sequence[float],
    confidence: float = CONFIDENCE,
) -> Estimate | None:
    """Median decode ms per generated token over the TTFT line's ms per prompt token, with a
    percentile bootstrap interval over the requests (scipy.stats.bootstrap, seeded, so one run
    states one interval); None under 3 requests, 2 distinct lengths, or a slope ≤ 0.

    A resample whose line does not rise (a prompt token that costs nothing) has no finite
    ratio: it counts as infinite, so where enough resamples do, the interval has no upper
    bound (`hi` None) rather than a made-up one.
    """
    x, y, d = (np.asarray(v, dtype=float) for v in (tokens, ttft_ms, decode_ms_per_token))
    if x.size < 3 or np.unique(x).size < 2:
        return None

    def ratio(idx: np.ndarray) -> float:
        xs = x[idx]
        if np.unique(xs).size < 2:
            return math.inf
        slope = float(np.polyfit(xs, y[idx], 1)[0])
        return float(np.median(d[idx])) / slope if slope > 0 else math.inf

    value = ratio(np.arange(x.size))
    if not math.isfinite(value):
        return None
    return _percentile_bootstrap((np.arange(x.size),), ratio, value, confidence, paired=False)


def ratio_of_sums(
    numerator: Sequence[float] | np.ndarray,
    denominator: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
) -> Estimate | None:
    """Σ numerator / Σ denominator over paired units (a cost per successful answer: each
    unit's cost over its successes), with a percentile bootstrap interval over the units
    (`resampled_ratios`: the paired bootstrap's distribution drawn exactly, seeded, 999
    resamples); None where the denominator sums to 0.

    A resample with no success has no finite ratio: it counts as infinite, so where enough
    resamples do, the interval has no upper bound (`hi` None).
    """
    x = np.asarray(numerator, dtype=float)
    y = np.asarray(denominator, dtype=float)
    if x.size == 0 or float(y.sum()) <= 0:
        return None
    value = float(x.sum() / y.sum())
    if x.size < 2:
        return Estimate(value=value)
    draws = resampled_ratios(x, y, _RESAMPLES, np.random.default_rng(0))
    return _percentile_estimate(draws, value, confidence)


#: The resamples of every bootstrap interval this module states.
_RESAMPLES = 999
#: The most random numbers one block of resamples draws at once (int64: 32 MiB).
_BLOCK_DRAWS = 1 << 22
#: Distinct rows per unit above which a resample draws units, not a multinomial's counts:
#: a multinomial over K rows costs K binomial draws, n uniform indices cost n (and the
#: latter are ~10x cheaper each), so counts win while K ≤ n/32.
_COUNTS_WHILE = 32


def resampled_ratios(
    numerator: np.ndarray, denominator: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """`size` draws of the paired bootstrap distribution of Σx*/Σy* (x the numerator, y the
    denominator, units resampled with replacement), exactly; ``inf`` where Σy* ≤ 0.

    A resample of n units is a multinomial over them: the K distinct (x, y) rows, taken
    with their counts c, are drawn Multinomial(n, c/n) times each, and Σx* = counts · x,
    Σy* = counts · y. So the law is the same as resampling the n units one by one, at
    O(K) a resample instead of O(n) (costs are token counts × prices: K is small at
    scale). Where K is near n (over n/32) the units are drawn one by one instead, which is
    then cheaper (and draws what scipy.stats.bootstrap drew from the same generator).
    Either way the draws go in blocks of at most `_BLOCK_DRAWS` numbers (or one resample's
    n), so memory stays bounded; time grows as size × K (counts) or size × n (units).
    """
    x = np.asarray(numerator, dtype=float)
    y = np.asarray(denominator, dtype=float)
    n = int(x.size)
    rows, counts = np.unique(np.column_stack([x, y]), axis=0, return_counts=True)
    k = int(counts.size)
    out = np.empty(size, dtype=float)
    by_counts = k * _COUNTS_WHILE <= n
    block = max(1, _BLOCK_DRAWS // (k if by_counts else n))
    for start in range(0, size, block):
        stop = min(size, start + block)
        if by_counts:
            drawn = rng.multinomial(n, counts / n, size=stop - start).astype(float)
            num, den = drawn @ rows[:, 0], drawn @ rows[:, 1]
        else:
            picks = rng.integers(0, n, size=(stop - start, n))
            num, den = x[picks].sum(axis=1), y[picks].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[start:stop] = np.where(den > 0, num / np.where(den > 0, den, 1.0), math.inf)
    return out


def _percentile_estimate(draws: np.ndarray, value: float, confidence: float) -> Estimate:
    """`value` with the percentile interval of a bootstrap distribution: its order
    statistics at (1 ± confidence)/2 (``inverted_cdf``, never interpolated, so an infinite
    resample stays one), an infinite bound None (no such bound)."""
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(draws, [tail, 100 - tail], method="inverted_cdf")
    return Estimate(
        value=value,
        lo=float(lo) if math.isfinite(lo) else None,
        hi=float(hi) if math.isfinite(hi) else None,
    )


def _percentile_bootstrap(
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., float],
    value: float,
    confidence: float,
    *,
    paired: bool,
) -> Estimate:
    """`value` with the percentile interval of `statistic` over 999 seeded resamples of
    `data` (scipy.stats.bootstrap, so one run states one interval). An infinite resample (a
    ratio whose denominator vanished) stays one: the bounds are order statistics of the
    resamples, never interpolated, and an infinite bound is None (no such bound)."""
    import warnings

    from scipy import stats as sps

    with warnings.catch_warnings():
        # every resample the same (data on one exact line): the interval is that one value
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        result = sps.bootstrap(
            data,
            statistic,
            paired=paired,
            vectorized=False,
            n_resamples=_RESAMPLES,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(0),
        )
    return _percentile_estimate(result.bootstrap_distribution, value, confidence)


def proportion(k: int, n: int, confidence: float = CONFIDENCE) -> Proportion:
    """The share k/n with its exact (Clopper–Pearson) interval; no value when n == 0."""
    if not 0 <= k <= n:
        raise ValueError(f"a share needs 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Proportion(k=0, n=0, confidence=confidence)
    from scipy import stats as sps

    ci = sps.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return Proportion(
        k=k, n=n, value=k / n, lo=float(ci.low), hi=float(ci.high), confidence=confidence
    )


#: The F-test's p-value below which the quadratic term is kept.
CURVATURE_P = 0.05


def fit_prompt_cost(tokens: Sequence[float], ms: Sequence[float]) -> PromptCost | None:
    """A latency against prompt tokens: a straight line, or a line with a quadratic term
    when the data need it (F-test p < `CURVATURE_P`), by ordinary least squares.

    None under 3 requests or 2 distinct lengths. The quadratic is tried only with 3
    distinct lengths and 4 requests (otherwise it fits exactly, and no test exists), and
    not when the line itself fits exactly.
    """
    x = np.asarray(tokens, dtype=float)
    y = np.asarray(ms, dtype=float)
    if x.size < 3 or np.unique(x).size < 2:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):  # an exact fit: zero residuals
        return _fit_prompt_cost(x, y)


def _fit_prompt_cost(x: np.ndarray, y: np.ndarray) -> PromptCost:
    import statsmodels.api as sm  # imports pandas: only where a fit is made

    line = sm.OLS(y, np.column_stack([np.ones_like(x), x])).fit()
    chosen, p_value = line, None
    exact = line.ssr <= 1e-12 * max(float(line.centered_tss), 1e-300)
    if np.unique(x).size >= 3 and x.size >= 4 and not exact:
        curve = sm.OLS(y, np.column_stack([np.ones_like(x), x, x**2])).fit()
        _, p, _ = curve.compare_f_test(line)
        p_value = float(p)
        if p_value < CURVATURE_P:
            chosen = curve
    quadratic = chosen is not line
    bounds = chosen.conf_int(alpha=1 - CONFIDENCE)

    def coefficient(i: int) -> Estimate:
        return Estimate(
            value=float(chosen.params[i]), lo=float(bounds[i][0]), hi=float(bounds[i][1])
        )

    def marginal(at: float) -> Estimate:
        # d(ms)/d(tokens) at `at`: b1 (+ 2·b2·at), with its interval from the coefficients'
        # covariance (statsmodels' t-test of that combination).
        contrast = np.array([[0.0, 1.0, 2 * at]]) if quadratic else np.array([[0.0, 1.0]])
        test = chosen.t_test(contrast)
        (lo, hi), *_ = test.conf_int(alpha=1 - CONFIDENCE)
        return Estimate(value=float(np.ravel(test.effect)[0]), lo=float(lo), hi=float(hi))

    return PromptCost(
        model="quadratic" if quadratic else "linear",
        n=int(x.size),
        min_tokens=float(x.min()),
        max_tokens=float(x.max()),
        intercept_ms=coefficient(0),
        ms_per_token=coefficient(1),
        ms_per_token_squared=coefficient(2) if quadratic else None,
        curvature_p=p_value,
        r2=float(chosen.rsquared),
        marginal_at_min=marginal(float(x.min())),
        marginal_at_max=marginal(float(x.max())),
    )


def _number(x: float) -> str:
    """A measured value as tables print it: three significant figures, at least units."""
    magnitude = abs(x)
    if magnitude >= 100 or x == 0:
        return f"{x:,.0f}"
    if magnitude >= 10:
        return f"{x:.1f}"
    if magnitude >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def _name(q: float) -> str:
    return "median" if q == 0.5 else f"p{q * 100:g}"


def describe(figure: Quantile, unit: str = "ms") -> str:
    """The quantile as every renderer shows it (the one rendering rule).

    - supported: ``412 ms (95% CI 398–430, n=12)``;
    - a median with too few values: ``412 ms (n=4; an interval needs 6)``;
    - any other quantile with too few: ``p99 needs ≥ 299 requests (n=6)``, never the
      largest value in its place;
    - no values: ``no requests (n=0)``.
    """
    suffix = f" {unit}" if unit else ""
    if figure.value is None:
        return "no requests (n=0)"
    if figure.lo is not None and figure.hi is not None:
        return (
            f"{_number(figure.value)}{suffix} ({figure.confidence:.0%} CI "
            f"{_number(figure.lo)}–{_number(figure.hi)}, n={figure.n})"
        )
    if figure.q == 0.5:
        return f"{_number(figure.value)}{suffix} (n={figure.n}; an interval needs {figure.min_n})"
    return f"{_name(figure.q)} needs ≥ {figure.min_n} requests (n={figure.n})"


def describe_mean(figure: Mean, unit: str = "ms") -> str:
    """A mean as every renderer shows it: ``12.3 ms (95% CI 11.8–12.9, n=6)``; ``12.3 ms
    (n=1; an interval needs 2)``; ``no requests (n=0)``."""
    suffix = f" {unit}" if unit else ""
    if figure.value is None:
        return "no requests (n=0)"
    if figure.lo is None or figure.hi is None:
        return f"{_number(figure.value)}{suffix} (n={figure.n}; an interval needs 2)"
    if figure.lo == figure.hi == figure.value:
        return f"{_number(figure.value)}{suffix} (all {figure.n} the same)"
    return (
        f"{_number(figure.value)}{suffix} ({figure.confidence:.0%} CI "
        f"{_number(figure.lo)}–{_number(figure.hi)}, n={figure.n})"
    )


def describe_share(figure: Proportion) -> str:
    """A share as every renderer shows it: ``94% (95% CI 88–98%, 180 of 192)``."""
    if figure.value is None or figure.lo is None or figure.hi is None:
        return "no requests (n=0)"
    return (
        f"{figure.value:.0%} ({figure.confidence:.0%} CI {figure.lo * 100:.0f}–"
        f"{figure.hi * 100:.0f}%, {figure.k} of {figure.n})"
    )


def p_of(
    records: Iterable[RequestRecord], get: Callable[[RequestRecord], float | int | None], q: float
) -> float | None:
    """Percentile `q` of a field over records, nulls skipped; None when nothing remains."""
    values = sorted(float(v) for v in (get(r) for r in records) if v is not None)
    return percentile(values, q) if values else None


def median_of(
    records: Iterable[RequestRecord], get: Callable[[RequestRecord], float | int | None]
) -> float | None:
    """Median of a field over records, nulls skipped."""
    return p_of(records, get, 50)
