"""The paired bootstrap of two quantiles, drawn exactly in O(log n) per resample.

A paired bootstrap resample draws n of the n pairs (bᵢ, oᵢ) with replacement and takes the
linear-interpolated q-quantile (``np.quantile``'s default) of its b's and of its o's.
`paired_quantile_draws` draws (Q_b, Q_o) from exactly that joint distribution without building a
resample: O(n log n) once (sorting, a wavelet matrix), then O(log n) per resample whatever n,
where resampling costs O(n). Why it is exact (Beta order statistics, Binomial counts down a
wavelet matrix of the o-ranks in b-order): docs/compare.md, "How the interval is computed".
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

_Floats = npt.NDArray[np.float64]
_Ints = npt.NDArray[np.int64]


class _WaveletMatrix:
    """A wavelet matrix over a permutation of 0..n−1: for any position range and level,
    how many of its elements have a 0 bit there, in O(1) (prefix counts per level)."""

    def __init__(self, seq: _Ints) -> None:
        n = len(seq)
        self.bits = max(1, (n - 1).bit_length())
        self.zeros: list[npt.NDArray[np.int32]] = []
        self.total_zeros: list[int] = []
        cur = seq
        for level in range(self.bits):
            bit = (cur >> (self.bits - 1 - level)) & 1
            is_zero = bit == 0
            # int32 counts (n < 2³¹): a level of a 10⁶-pair group is 4 MB, not 8.
            prefix = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(is_zero, out=prefix[1:])
            self.zeros.append(prefix)
            self.total_zeros.append(int(prefix[-1]))
            cur = np.concatenate([cur[is_zero], cur[~is_zero]])


def _split(
    count: _Ints, left: _Ints, size: _Ints, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """How many of `count` draws, uniform over `size` items, land on the `left` of them."""
    p = np.divide(left, size, out=np.zeros(len(size)), where=size > 0)
    return rng.binomial(count, np.clip(p, 0.0, 1.0)).astype(np.int64)


class _Path:
    """One descent through the matrix: the draws of each b-range inside the current node,
    the range's positions at the current level, the fixed pairs still inside, the target
    rank within the node and the o-rank prefix of the node."""

    def __init__(
        self, target: _Ints, lows: tuple[_Ints, _Ints], highs: tuple[_Ints, _Ints], counts: _Ints
    ) -> None:
        self.lo = [lows[0].copy(), lows[1].copy()]
        self.hi = [highs[0].copy(), highs[1].copy()]
        self.count = [counts[0].copy(), counts[1].copy()]
        self.inside = [np.ones(len(target), dtype=bool), np.ones(len(target), dtype=bool)]
        self.target = target.copy()
        self.prefix = np.zeros(len(target), dtype=np.int64)

    def splits(
        self, wm: _WaveletMatrix, level: int, rng: np.random.Generator
    ) -> tuple[list[_Ints], list[_Ints]]:
        """Each range's draws that fall in the node's lower half, and its pairs there."""
        zeros = wm.zeros[level]
        pairs_left = [zeros[self.hi[i]] - zeros[self.lo[i]] for i in (0, 1)]
        drawn_left = [
            _split(self.count[i], pairs_left[i], self.hi[i] - self.lo[i], rng) for i in (0, 1)
        ]
        return drawn_left, pairs_left

    def step(
        self,
        wm: _WaveletMatrix,
        level: int,
        drawn_left: list[_Ints],
        fixed: tuple[_Ints, _Ints],
        weight: tuple[_Ints, _Ints],
    ) -> npt.NDArray[np.bool_]:
        """Go to the half that holds the target rank; return where it went left."""
        shift = wm.bits - 1 - level
        fixed_zero = [((fixed[i] >> shift) & 1) == 0 for i in (0, 1)]
        left = drawn_left[0] + drawn_left[1]
        for i in (0, 1):
            left = left + np.where(self.inside[i] & fixed_zero[i], weight[i], 0)
        go_left = self.target < left
        zeros, total = wm.zeros[level], wm.total_zeros[level]
        for i in (0, 1):
            z_lo, z_hi = zeros[self.lo[i]], zeros[self.hi[i]]
            self.lo[i] = np.where(go_left, z_lo, total + self.lo[i] - z_lo)
            self.hi[i] = np.where(go_left, z_hi, total + self.hi[i] - z_hi)
            self.count[i] = np.where(go_left, drawn_left[i], self.count[i] - drawn_left[i])
            self.inside[i] &= fixed_zero[i] == go_left
        self.target = np.where(go_left, self.target, self.target - left)
        self.prefix = self.prefix * 2 + (~go_left)
        return go_left


def _pick(u: _Floats, n: int) -> _Ints:
    """The b-rank a uniform picks: ⌈n·u⌉ − 1, within 0..n−1."""
    return np.clip(np.ceil(n * u).astype(np.int64) - 1, 0, n - 1)


def paired_quantile_draws(
    base: _Floats, other: _Floats, q: float, size: int, rng: np.random.Generator
) -> tuple[_Floats, _Floats]:
    """`size` draws of the paired bootstrap distribution of (``np.quantile(b*, q)``,
    ``np.quantile(o*, q)``), (b*, o*) a resample of the pairs (`base`[i], `other`[i]).

    Exact (docs/compare.md, "How the interval is computed"): O(n log n) to prepare, O(log n)
    per draw. Needs 0 ≤ q < 1 and at least two pairs. Several quantiles of the same pairs:
    `PairedQuantiles`, prepared once.
    """
    return PairedQuantiles(base, other).draws(q, size, rng)


class PairedQuantiles:
    """Pairs prepared once (sorted, their o-ranks in a wavelet matrix) for the draws of
    several quantiles (`draws`): the same draws as `paired_quantile_draws` gives."""

    def __init__(self, base: _Floats, other: _Floats) -> None:
        b = np.asarray(base, dtype=float)
        o = np.asarray(other, dtype=float)
        n = len(b)
        if n != len(o) or n < 2:
            raise ValueError("paired_quantile_draws needs two samples of one length ≥ 2")
        by_b = np.lexsort((o, b))  # by b, ties by o: the draws ignore the pairs' order
        self.n = n
        self.b_sorted = b[by_b]
        o_by_b = o[by_b]
        by_o = np.argsort(o_by_b, kind="stable")
        self.o_sorted = o_by_b[by_o]
        self.o_rank = np.empty(n, dtype=np.int64)
        self.o_rank[by_o] = np.arange(n, dtype=np.int64)
        self.wm = _WaveletMatrix(self.o_rank)

    def draws(self, q: float, size: int, rng: np.random.Generator) -> tuple[_Floats, _Floats]:
        """`size` draws of (baseline's q-quantile, run's q-quantile) of a resample of the
        pairs (`paired_quantile_draws`); 0 ≤ q < 1."""
        if not 0.0 <= q < 1.0:
            raise ValueError("paired_quantile_draws needs 0 ≤ q < 1")
        n, b_sorted, o_sorted, o_rank, wm = (
            self.n,
            self.b_sorted,
            self.o_sorted,
            self.o_rank,
            self.wm,
        )
        return _draw(n, b_sorted, o_sorted, o_rank, wm, q, size, rng)


def _draw(
    n: int,
    b_sorted: _Floats,
    o_sorted: _Floats,
    o_rank: _Ints,
    wm: _WaveletMatrix,
    q: float,
    size: int,
    rng: np.random.Generator,
) -> tuple[_Floats, _Floats]:
    """The draws of `PairedQuantiles.draws` (why they are exact: docs/compare.md)."""
    h = (n - 1) * q
    j = math.floor(h)
    g = h - j
    # The two order statistics of the resample's uniforms, and the b-ranks they pick.
    u1 = rng.beta(j + 1, n - j, size)
    u2 = u1 + (1.0 - u1) * rng.beta(1, n - j - 1, size)
    k1, k2 = _pick(u1, n), _pick(u2, n)
    q_base = b_sorted[k1] + g * (b_sorted[k2] - b_sorted[k1])
    # j uniforms below u1: the cut pair k1 takes its share, the rest fall on b-ranks [0, k1).
    cut1 = np.clip(np.divide(u1 - k1 / n, u1, out=np.ones(size), where=u1 > 0), 0.0, 1.0)
    lower = np.where(k1 > 0, j - rng.binomial(j, cut1), 0).astype(np.int64)
    # n − j − 2 uniforms above u2: the cut pair k2 its share, the rest b-ranks [k2+1, n).
    m = n - j - 2
    above = np.maximum(1.0 - u2, 0.0)
    cut2 = np.clip(np.divide((k2 + 1) / n - u2, above, out=np.ones(size), where=above > 0), 0, 1)
    upper = np.where(k2 < n - 1, m - rng.binomial(m, cut2), 0).astype(np.int64)
    weight = (1 + (j - lower), 1 + (m - upper))  # pair k1's draws, pair k2's draws
    fixed = (o_rank[k1], o_rank[k2])

    zero = np.zeros(size, dtype=np.int64)
    lows = (zero, k2 + 1)
    highs = (k1, np.full(size, n, dtype=np.int64))
    counts = np.stack([lower, upper])
    first = _Path(np.full(size, j, dtype=np.int64), lows, highs, counts)
    second = _Path(np.full(size, j + 1, dtype=np.int64), lows, highs, counts)
    together = np.ones(size, dtype=bool)
    for level in range(wm.bits):
        drawn_first, _ = first.splits(wm, level, rng)
        drawn_second, _ = second.splits(wm, level, rng)
        # While both paths are in one node, they share its draws: one resample, one split.
        drawn_second = [np.where(together, drawn_first[i], drawn_second[i]) for i in (0, 1)]
        went_first = first.step(wm, level, drawn_first, fixed, weight)
        went_second = second.step(wm, level, drawn_second, fixed, weight)
        together &= went_first == went_second
    low = o_sorted[np.minimum(first.prefix, n - 1)]
    high = o_sorted[np.minimum(second.prefix, n - 1)]
    q_other = low + g * (high - low)
    return np.asarray(q_base, dtype=float), np.asarray(q_other, dtype=float)
