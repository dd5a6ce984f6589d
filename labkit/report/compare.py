"""Runs side by side as a regression gate: the change of each metric, with its interval.

The first run is the baseline. For each provider × experiment × model, each gate metric
(`GATE_METRICS`) and each later run, `compare_frames` gives the change and a percentile
bootstrap interval of it, drawn exactly without building resamples (seeded; paired where both
runs hold the same `plan_key`s), and a verdict: ``slower`` / ``faster`` only when the interval
excludes zero; ``no change detected`` means "smaller than this interval", never "no change".
`parse_threshold` reads ``--fail-on`` expressions and `check_thresholds` applies them. The
metrics, the verdicts and how each interval is drawn: docs/compare.md.
"""

from __future__ import annotations

import math
import re
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from labkit.analysis.paired_bootstrap import PairedQuantiles
from labkit.analysis.stats import min_n
from labkit.errors import ConfigError, RunError
from labkit.figures.observatory import CostFigures
from labkit.report.charts import Chart
from labkit.report.cost import (
    COST_REPORT_COLUMNS,
    comparison_cost_section,
    cost_tally,
    tally_figures,
)
from labkit.report.load import (
    RunData,
    ensure_columns,
    load_run,
    repeated_note,
    run_folder,
    run_meta,
    skipped_note,
)
from labkit.report.render import (
    Block,
    Bullets,
    ChartBlock,
    Heading,
    Para,
    Table,
    fmt_num,
    html_page,
    markdown_text,
)
from labkit.report.render import render_markdown as _render_md
from labkit.report.run_charts import distribution_chart
from labkit.report.stats import GROUP_KEYS
from labkit.safefiles import write_new_file
from labkit.scrub import for_people, scrub_frame

__all__ = [
    "COMPARE_COLUMNS",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "GATE_METRICS",
    "WIDE_INTERVAL_PCT",
    "CompareResult",
    "Comparison",
    "GateMetric",
    "GateResult",
    "Threshold",
    "check_thresholds",
    "compare_frames",
    "compare_runs",
    "comparison_markdown",
    "comparison_rows",
    "parse_threshold",
    "repeated_notes",
    "write_comparison",
]

DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
# An interval that includes zero yet spans more than this share of the baseline (in percent)
# is too wide to call "no change detected".
WIDE_INTERVAL_PCT = 40.0
# For the error rate, whose baseline is often 0: an interval wider than this many points.
_WIDE_ERROR_POINTS = 10.0
# Bootstrap resamples are drawn in blocks of at most this many values, to bound memory.
_BLOCK_VALUES = 4_000_000

Direction = Literal["lower", "higher"]


@dataclass(frozen=True)
class GateMetric:
    """One statistic the gate compares: which column, which quantile, which way is better."""

    name: str
    description: str
    column: str | None
    quantile: float | None
    unit: str
    better: Direction

    @property
    def min_samples(self) -> int:
        """Requests each side needs for this statistic to mean something: for a quantile,
        as many as its distribution-free interval needs (`labkit.analysis.stats.min_n`)."""
        if self.quantile is None:
            return 10
        return min_n(self.quantile)

    def verdicts(self) -> tuple[str, str]:
        """The words for (the run is worse, the run is better)."""
        if self.quantile is None:
            return "more errors", "fewer errors"
        return "slower", "faster"


GATE_METRICS: dict[str, GateMetric] = {
    m.name: m
    for m in [
        GateMetric("ttft_p50", "TTFT p50", "client.ttft_ms", 0.5, "ms", "lower"),
        GateMetric("ttft_p90", "TTFT p90", "client.ttft_ms", 0.9, "ms", "lower"),
        GateMetric(
            "decode_p50", "decode ms/token p50", "client.decode_ms_per_token", 0.5, "ms", "lower"
        ),
        GateMetric(
            "decode_p90", "decode ms/token p90", "client.decode_ms_per_token", 0.9, "ms", "lower"
        ),
        GateMetric("e2e_p50", "e2e p50", "client.e2e_ms", 0.5, "ms", "lower"),
        GateMetric("e2e_p90", "e2e p90", "client.e2e_ms", 0.9, "ms", "lower"),
        GateMetric(
            "tokens_per_s_p50",
            "output tokens/s p50",
            "client.output_tokens_per_s",
            0.5,
            "tok/s",
            "higher",
        ),
        GateMetric("error_rate", "error rate", None, None, "pp", "lower"),
    ]
}

COMPARE_COLUMNS: list[str] = [
    *GROUP_KEYS,
    "metric",
    "run",
    "run_dir",
    "paired",
    "n_base",
    "n",
    "base",
    "value",
    "change",
    "change_low",
    "change_high",
    "change_pct",
    "change_pct_low",
    "change_pct_high",
    "verdict",
]

NOT_ENOUGH = "not enough data"
NO_CHANGE = "no change detected"
#: The verdict's start where a run has no value of the metric at all ("not measured by X").
NOT_MEASURED = "not measured"

_Floats = npt.NDArray[np.float64]
_Keys = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Comparison:
    """How the resampling is done: seed, number of resamples, confidence level."""

    seed: int = DEFAULT_SEED
    resamples: int = DEFAULT_RESAMPLES
    confidence: float = DEFAULT_CONFIDENCE

    def __post_init__(self) -> None:
        if self.resamples < 100:
            raise ConfigError(f"resamples must be at least 100 (got {self.resamples})")
        if not 0.5 <= self.confidence < 1.0:
            raise ConfigError(f"confidence must be in [0.5, 1) (got {self.confidence})")


# --- sampling ------------------------------------------------------------------------------


def _key_codes(base: pd.DataFrame, other: pd.DataFrame) -> tuple[_Keys, _Keys]:
    """Each row's plan_key as an integer shared by both frames (−1: none), so matching and
    de-duplicating compare integers, never strings."""
    keys = [ensure_columns(df, ["plan_key"])["plan_key"] for df in (base, other)]
    codes, _ = pd.factorize(pd.concat(keys, ignore_index=True))
    codes = np.asarray(codes, dtype=np.int64)
    return codes[: len(base)], codes[len(base) :]


def _values(df: pd.DataFrame, column: str | None, keys: _Keys) -> pd.DataFrame:
    """The rows behind one column's statistics, with their plan_key code (`_key_codes`) as
    ``plan_key`` and the value as ``v``.

    A latency column (`column` set): successful, non-warm-up requests with a value. The
    error rate (`column` None): every non-warm-up request, ``v`` = 1 for a failure. A
    plan_key seen twice (a retry) keeps its last record.
    """
    df = ensure_columns(df, [column] if column else [])
    attempted = ~df["warmup"].to_numpy(dtype=bool)
    ok = df["ok"].to_numpy(dtype=bool)
    if column is None:
        keep = attempted
        v = (~ok[keep]).astype(float)
    else:
        values = df[column].to_numpy(dtype=float, na_value=np.nan)
        keep = attempted & ok & ~np.isnan(values)
        v = values[keep]
    k = keys[keep]
    keyed = np.flatnonzero(k >= 0)
    # The last row of each key: the first of the reversed rows, back in the rows' order.
    _, first_reversed = np.unique(k[keyed][::-1], return_index=True)
    last = np.sort(keyed[len(keyed) - 1 - first_reversed])
    rows = np.concatenate([last, np.flatnonzero(k < 0)])
    return pd.DataFrame({"plan_key": k[rows], "v": v[rows]})


def _pairs(base: pd.DataFrame, other: pd.DataFrame) -> tuple[_Floats, _Floats] | None:
    """The values of both runs matched by plan_key, when nearly all of them match."""
    b_keys, o_keys = base["plan_key"].to_numpy(), other["plan_key"].to_numpy()
    b_in, o_in = b_keys >= 0, o_keys >= 0
    common, b_at, o_at = np.intersect1d(
        b_keys[b_in], o_keys[o_in], assume_unique=True, return_indices=True
    )
    if len(common) < 0.8 * max(len(base), len(other)) or len(common) == 0:
        return None
    return (
        base["v"].to_numpy(float)[b_in][b_at],
        other["v"].to_numpy(float)[o_in][o_at],
    )


def _stat(values: _Floats, metric: GateMetric) -> float:
    """The statistic of one sample (NaN for an empty one): a quantile's point estimate as
    `labkit.analysis.stats` defines it, or the mean (the error rate)."""
    if not len(values):
        return math.nan
    if metric.quantile is None:
        return float(values.mean())
    # `labkit.analysis.stats.quantile`'s point estimate: numpy's linear interpolation.
    return float(np.quantile(values, metric.quantile))


def _change_statistic(metric: GateMetric, scale: float) -> Callable[..., _Floats]:
    """The run's statistic minus the baseline's (× `scale`) and in percent of the
    baseline's, along `axis` of resampled arrays (the same linear-interpolated quantile)."""

    def of(values: _Floats, axis: int) -> _Floats:
        if metric.quantile is None:
            return np.asarray(values.mean(axis=axis), dtype=float)
        return np.asarray(np.quantile(values, metric.quantile, axis=axis), dtype=float)

    def change(base: _Floats, other: _Floats, axis: int = -1) -> _Floats:
        b, o = of(base, axis), of(other, axis)
        return np.stack([(o - b) * scale, 100.0 * (o / b - 1.0)])

    return change


def _resampled_quantile(values: _Floats, q: float, size: int, rng: np.random.Generator) -> _Floats:
    """`size` draws of the bootstrap distribution of ``np.quantile(resample, q)`` (linear
    interpolation) of `values`, exactly, without building a resample.

    A bootstrap resample is n draws F⁻¹(U) from the sample's empirical distribution, U
    uniform; F⁻¹ is monotone, so its i-th smallest value is F⁻¹ of the i-th smallest of n
    uniforms. The linear quantile at h = (n−1)q needs the order statistics j+1 and j+2
    (j = ⌊h⌋): U₍ⱼ₊₁₎ ~ Beta(j+1, n−j), and given it, U₍ⱼ₊₂₎ is the least of the n−j−1
    uniforms above it: U₍ⱼ₊₁₎ + (1−U₍ⱼ₊₁₎)·Beta(1, n−j−1). Two Beta draws per resample.
    """
    x = np.sort(values)
    n = len(x)

    def at(u: _Floats) -> _Floats:
        rank = np.clip(np.ceil(n * u).astype(np.int64) - 1, 0, n - 1)
        return np.asarray(x[rank], dtype=float)

    h = (n - 1) * q
    j = math.floor(h)
    g = h - j
    u1 = rng.beta(j + 1, n - j, size)
    low = at(u1)
    if g == 0.0 or j + 1 >= n:
        return low
    u2 = u1 + (1.0 - u1) * rng.beta(1, n - j - 1, size)
    return low + g * (at(u2) - low)


def _binary(values: _Floats) -> bool:
    return bool(np.isin(values, (0.0, 1.0)).all())


def _fast_distribution(
    base: _Floats,
    other: _Floats,
    metric: GateMetric,
    paired: bool,
    rng: np.random.Generator,
    size: int,
    prepared: PairedQuantiles | None = None,
) -> tuple[_Floats, _Floats] | None:
    """The bootstrap distributions of (baseline's statistic, run's statistic), drawn exactly
    without materialising resamples, or None where no exact shortcut applies (a mean of
    values other than 0/1).

    Unpaired quantile: `_resampled_quantile` for each run; paired: both quantiles of a
    resample of the pairs at once (`PairedQuantiles`, O(log n) a draw). Error rate
    (a mean of 0/1): a resample's failures are Binomial(n, p) unpaired; paired, the four
    (baseline, run) outcomes of a resampled pair are Multinomial(n, their shares).
    """
    if metric.quantile is not None:
        if paired:
            prepared = prepared or PairedQuantiles(base, other)
            return prepared.draws(metric.quantile, size, rng)
        return (
            _resampled_quantile(base, metric.quantile, size, rng),
            _resampled_quantile(other, metric.quantile, size, rng),
        )
    if not (_binary(base) and _binary(other)):
        return None
    if not paired:
        b = rng.binomial(len(base), base.mean(), size) / len(base)
        o = rng.binomial(len(other), other.mean(), size) / len(other)
        return b.astype(float), o.astype(float)
    n = len(base)
    cells = (base * 2 + other).astype(np.int64)  # 0: ok/ok, 1: ok/fail, 2: fail/ok, 3: both
    counts = rng.multinomial(n, np.bincount(cells, minlength=4) / n, size)
    b = (counts[:, 2] + counts[:, 3]) / n
    o = (counts[:, 1] + counts[:, 3]) / n
    return b.astype(float), o.astype(float)


def _change_interval(
    base: _Floats,
    other: _Floats,
    metric: GateMetric,
    paired: bool,
    rng: np.random.Generator,
    how: Comparison,
    prepared: PairedQuantiles | None = None,
) -> tuple[float, float, float, float]:
    """The percentile bootstrap interval of the change and of the change in percent:
    (low, high, pct_low, pct_high); pairs resampled together when `paired`. A bound is NaN
    where over a tenth of the resampled changes are not finite (a zero baseline).

    The bootstrap distribution is drawn exactly by `_fast_distribution` where it can be
    (O(resamples), whatever n); otherwise (a mean of values other than 0/1: no gate metric
    today) by `scipy.stats.bootstrap`.
    Either way the interval is the distribution's linear quantiles at (1 ± confidence)/2,
    as scipy's percentile method takes them.
    """
    scale = 100.0 if metric.quantile is None else 1.0  # error rate: percentage points
    alpha = (1.0 - how.confidence) / 2.0
    fast = _fast_distribution(base, other, metric, paired, rng, how.resamples, prepared)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        if fast is not None:
            b, o = fast
            dist = np.stack([(o - b) * scale, 100.0 * (o / b - 1.0)])
            lows, highs = np.quantile(dist, [alpha, 1.0 - alpha], axis=-1)
        else:
            width = max(len(base), len(other), 1)
            # A zero baseline makes the percent change infinite or NaN in some resamples:
            # scipy says so (numpy's warnings, its DegenerateDataWarning); those bounds
            # become NaN below.
            from scipy import stats as sps  # scipy.stats takes half a second: only when used

            warnings.simplefilter("ignore", sps.DegenerateDataWarning)
            result = sps.bootstrap(
                (base, other),
                _change_statistic(metric, scale),
                n_resamples=how.resamples,
                batch=max(1, _BLOCK_VALUES // width),
                vectorized=True,
                paired=paired,
                confidence_level=how.confidence,
                method="percentile",
                random_state=rng,
            )
            dist = result.bootstrap_distribution
            lows, highs = result.confidence_interval.low, result.confidence_interval.high
    finite = np.isfinite(dist).mean(axis=-1)

    def bound(v: float, i: int) -> float:
        return float(v) if finite[i] >= 0.9 and math.isfinite(v) else math.nan

    return bound(lows[0], 0), bound(highs[0], 0), bound(lows[1], 1), bound(highs[1], 1)


def _seed_for(seed: int, key: Sequence[object]) -> np.random.Generator:
    """A generator per comparison, so each one's interval does not depend on the others."""
    digest = zlib.crc32("\x1f".join(str(k) for k in key).encode("utf-8"))
    return np.random.default_rng([seed, digest])


def _compare_column(
    base: pd.DataFrame,
    other: pd.DataFrame,
    metrics: Sequence[GateMetric],
    how: Comparison,
    key: Sequence[object],
) -> list[dict[str, object]]:
    """The rows of the metrics of one column: values, change, interval, verdict.

    Their resamples come from one generator seeded by `key`, drawn by each metric in turn.
    """
    pairs = _pairs(base, other)
    paired = pairs is not None
    b_vals, o_vals = (
        pairs if pairs is not None else (base["v"].to_numpy(float), other["v"].to_numpy(float))
    )
    rng = _seed_for(how.seed, key)
    # The paired quantiles of one column (p50, p90) share the pairs' sorting.
    quantiles = any(
        m.quantile is not None and min(len(b_vals), len(o_vals)) >= max(m.min_samples, 2)
        for m in metrics
    )
    prepared = PairedQuantiles(b_vals, o_vals) if paired and quantiles else None
    rows = []
    for metric in metrics:
        base_v, value = _stat(b_vals, metric), _stat(o_vals, metric)
        scale = 100.0 if metric.quantile is None else 1.0  # error rate: percentage points
        low = high = pct_low = pct_high = math.nan
        enough = min(len(b_vals), len(o_vals)) >= metric.min_samples
        if enough:
            low, high, pct_low, pct_high = _change_interval(
                b_vals, o_vals, metric, paired, rng, how, prepared
            )
            if not base_v:
                pct_low = pct_high = math.nan
        rows.append(
            {
                "metric": metric.name,
                "paired": paired,
                "n_base": len(b_vals),
                "n": len(o_vals),
                "base": base_v,
                "value": value,
                "change": (value - base_v) * scale,
                "change_low": low,
                "change_high": high,
                "change_pct": 100.0 * (value - base_v) / base_v if base_v else math.nan,
                "change_pct_low": pct_low,
                "change_pct_high": pct_high,
                "verdict": _verdict(metric, enough, low, high, pct_low, pct_high),
            }
        )
    return rows


def _verdict(
    metric: GateMetric, enough: bool, low: float, high: float, pct_low: float, pct_high: float
) -> str:
    if not enough or math.isnan(low) or math.isnan(high):
        return NOT_ENOUGH
    worse, better = metric.verdicts()
    if low > 0 or high < 0:
        up = low > 0
        return worse if up == (metric.better == "lower") else better
    if metric.quantile is None:
        wide = high - low > _WIDE_ERROR_POINTS
    else:
        wide = math.isnan(pct_low) or pct_high - pct_low > WIDE_INTERVAL_PCT
    return NOT_ENOUGH if wide else NO_CHANGE


# --- comparing -----------------------------------------------------------------------------


def _labels(runs: Sequence[RunData]) -> list[str]:
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):
        labels = [r.run_dir.name for r in runs]
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}:{lab}" for i, lab in enumerate(labels)]
    return labels


def _groups(df: pd.DataFrame) -> dict[tuple[object, ...], pd.DataFrame]:
    if df.empty:
        return {}
    return {
        (key if isinstance(key, tuple) else (key,)): sub
        for key, sub in df.groupby(GROUP_KEYS, dropna=False, sort=True)
    }


def compare_frames(
    frames: Sequence[tuple[str, str, pd.DataFrame]],
    metrics: Sequence[str] | None = None,
    how: Comparison | None = None,
) -> pd.DataFrame:
    """Compare record frames given as (label, run_dir, frame); the first is the baseline.

    One row per provider × experiment × model × metric × later run, for every group of the
    baseline (a group missing from a later run gets ``n == 0`` and ``not enough data``).
    Columns: `COMPARE_COLUMNS`. ``change`` is the run minus the baseline in the metric's
    unit (percentage points for the error rate), ``change_pct`` in percent of the baseline;
    ``*_low``/``*_high`` bound the bootstrap interval.
    """
    how = how or Comparison()
    names = list(metrics) if metrics is not None else list(GATE_METRICS)
    if len(frames) < 2:
        raise RunError("compare needs at least two runs")
    base_label, _, base_df = frames[0]
    base_groups = _groups(base_df)
    rows: list[dict[str, object]] = []
    by_column: dict[str | None, list[GateMetric]] = {}
    for name in names:
        by_column.setdefault(GATE_METRICS[name].column, []).append(GATE_METRICS[name])
    order = {name: i for i, name in enumerate(names)}
    for label, run_dir, df in frames[1:]:
        groups = _groups(df)
        for key, base_sub in base_groups.items():
            other_sub = groups.get(key, df.iloc[0:0])
            base_keys, other_keys = _key_codes(base_sub, other_sub)
            group_rows: list[dict[str, object]] = []
            for column, metrics_here in by_column.items():
                column_rows = _compare_column(
                    _values(base_sub, column, base_keys),
                    _values(other_sub, column, other_keys) if len(other_sub) else _empty_values(),
                    metrics_here,
                    how,
                    (*key, column, label),
                )
                missing = _not_measured([(base_label, base_sub), (label, other_sub)], column)
                for row in column_rows if missing else []:
                    row["verdict"] = f"{NOT_MEASURED} by {', '.join(missing)}"
                group_rows += column_rows
            group_rows.sort(key=lambda r: order[str(r["metric"])])
            for row in group_rows:
                row.update(dict(zip(GROUP_KEYS, key, strict=True)), run=label, run_dir=run_dir)
            rows += group_rows
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def _not_measured(sides: Sequence[tuple[str, pd.DataFrame]], column: str | None) -> list[str]:
    """The runs (labels) that hold records of a group yet no value at all in `column`: a
    client that does not measure it (an imported peer's run), not a lack of data."""
    if column is None:
        return []
    return [
        label
        for label, df in sides
        if len(df) and (column not in df.columns or not df[column].notna().any())
    ]


def _empty_values() -> pd.DataFrame:
    return pd.DataFrame({"plan_key": pd.Series(dtype=np.int64), "v": pd.Series(dtype=float)})


def read_columns() -> frozenset[str]:
    """The records' columns a comparison reads (with each record's identity and tags): a
    run is read with these only (a large one from its columnar sidecar)."""
    metrics = {m.column for m in GATE_METRICS.values() if m.column is not None}
    return frozenset({*GROUP_KEYS, "plan_key", *metrics, *COST_REPORT_COLUMNS})


#: The columns a comparison reads for its cost section only.
_COST_ONLY = COST_REPORT_COLUMNS - {"provider", "model", "ok", "warmup"}

#: A run's cost figures as `_load` read them from its sidecar (None: from its frame).
_Costs = list[CostFigures] | None


def _load(
    run_dirs: Sequence[Path | str], costs: bool = False
) -> tuple[list[RunData], list[str], list[_Costs]]:
    """The runs, their labels, and (`costs`) the cost figures of each run read from its
    sidecar, priced as its parts were read (`_load_compared`)."""
    if len(run_dirs) < 2:
        raise RunError("compare needs at least two run folders")
    loaded = [_load_compared(p, costs) for p in run_dirs]
    runs = [run for run, _ in loaded]
    return runs, _labels(runs), [figures for _, figures in loaded]


def _give_back() -> None:
    """Hand the memory freed while reading a run back to the system (Arrow's pool, the C
    heap), so the next run's reading does not stack on it."""
    import pyarrow as pa

    from labkit.report import load

    pa.default_memory_pool().release_unused()
    load._give_back()


def _load_compared(path: Path | str, costs: bool = False) -> tuple[RunData, _Costs]:
    """`load_run` with `read_columns`, a large run read from its columnar sidecar a
    provider × experiment part at a time (each part's memory given back before the next),
    without holding the whole run's columns twice while they become the frame. The rows
    come part after part, each part's in the order of its lines: a group's retries keep
    their order, and nothing compare writes depends on the order of the parts.

    From a sidecar, a priced run's parts are priced as they are read (`costs`: its cost
    figures returned, `labkit.report.cost.cost_tally`) and its frame keeps none of the
    columns only the cost section reads: two large priced runs are never held with them."""
    from labkit.report import columnar

    run_dir = run_folder(path)
    try:
        side = columnar.sidecar(run_dir)
    except OSError:
        side = None
    if side is None or not side.groups:
        return load_run(run_dir, read_columns()), None
    problems = skipped_note(dict(side.skipped))
    if side.repeated:
        problems.append(repeated_note(side.repeated, side.repeated_requests))
    manifest, lab = run_meta(run_dir, problems)
    meta = RunData(run_dir, pd.DataFrame(), manifest, lab)
    tally = cost_tally(meta) if costs else None
    try:
        parts = []
        for _, part in side.frames(2, read_columns()):
            if tally is not None:
                tally.add(part, part["file_offset"].to_numpy())
            parts.append(part.drop(columns=[c for c in _COST_ONLY if c in part.columns]))
            del part
    except OSError as exc:
        if tally is not None:
            tally.close()  # its files, now
        raise RunError(f"cannot read {side.run_dir / columnar.SIDECAR_DIR}: {exc}") from exc
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    del parts
    _give_back()
    figures = tally_figures(tally, meta, side) if costs else None
    del tally
    if len(frame) and frame["run_id"].isna().all():
        frame["run_id"] = str(manifest.get("run_id", run_dir.name))
    run = RunData(run_dir, frame, manifest, lab, len(side.skipped), problems, side.repeated)
    return run, figures


def compare_runs(
    run_dirs: Sequence[Path | str],
    metrics: Sequence[str] | None = None,
    how: Comparison | None = None,
) -> pd.DataFrame:
    """`compare_frames` on run folders (the first is the baseline); columns `COMPARE_COLUMNS`."""
    runs, labels, _ = _load(run_dirs)
    return compare_frames(
        [(lab, str(r.run_dir), r.records) for lab, r in zip(labels, runs, strict=True)],
        metrics,
        how,
    )


# --- thresholds ----------------------------------------------------------------------------

_THRESHOLD = re.compile(
    r"^\s*(?P<metric>[A-Za-z0-9_]+)\s*(?P<op>[<>])\s*(?P<value>[+-]?\d+(?:\.\d+)?)\s*"
    r"(?P<unit>%|ms|pp|tok/s)?\s*$"
)


@dataclass(frozen=True)
class Threshold:
    """One ``--fail-on`` limit: fail when `metric`'s change is beyond `limit` `unit`."""

    text: str
    metric: str
    op: Literal["<", ">"]
    limit: float
    relative: bool

    def crossed(self, change: float) -> bool:
        """Whether a change (in percent when `relative`) is beyond the limit."""
        return change > self.limit if self.op == ">" else change < self.limit


def parse_threshold(text: str) -> Threshold:
    """Read ``METRIC>+N%``, ``METRIC>+Nms``, ``tokens_per_s_p50<-N%``, ``error_rate>+Npp``.

    Raises `ConfigError` naming what is wrong with a malformed expression.
    """
    match = _THRESHOLD.match(text)
    names = ", ".join(GATE_METRICS)
    if match is None:
        raise ConfigError(
            f"--fail-on {text!r} is not METRIC>CHANGE or METRIC<CHANGE with a unit, "
            f"e.g. 'ttft_p50>+10%', 'e2e_p90>+50ms', 'error_rate>+1pp' (metrics: {names})"
        )
    name, unit = match["metric"].lower(), match["unit"]
    metric = GATE_METRICS.get(name)
    if metric is None:
        raise ConfigError(f"--fail-on {text!r}: unknown metric {name!r} (metrics: {names})")
    if unit is None:
        raise ConfigError(
            f"--fail-on {text!r}: give the change a unit: '%' (of the baseline) or {metric.unit!r}"
        )
    if metric.quantile is None and unit != "pp":
        raise ConfigError(
            f"--fail-on {text!r}: the error rate's change is in percentage points, "
            "e.g. 'error_rate>+1pp'"
        )
    if unit not in ("%", metric.unit):
        raise ConfigError(
            f"--fail-on {text!r}: {name} changes in '%' or {metric.unit!r}, not {unit!r}"
        )
    op: Literal["<", ">"] = ">" if match["op"] == ">" else "<"
    return Threshold(text.strip(), name, op, float(match["value"]), unit == "%")


@dataclass(frozen=True)
class GateResult:
    """What the thresholds found: the failures, and what could not be checked."""

    failures: list[str]
    unchecked: list[str]
    checked: int

    @property
    def passed(self) -> bool:
        """True when no threshold failed."""
        return not self.failures


def _where(row: Any) -> str:
    return f"{row['provider']} · {row['experiment']} · {row['model']} ({row['run']})"


def check_thresholds(table: pd.DataFrame, thresholds: Sequence[Threshold]) -> GateResult:
    """Apply `thresholds` to a comparison table (from `compare_frames`).

    A threshold fails on a row when the change is detected (the verdict is not "no change
    detected" or "not enough data") and its estimate crosses the limit. A row without enough
    data is listed as unchecked; a threshold that no row could check is itself a failure, so
    a gate cannot pass on an empty or too-small run.
    """
    failures: list[str] = []
    unchecked: list[str] = []
    checked = 0
    for threshold in thresholds:
        rows = table[table["metric"] == threshold.metric]
        checked_here = 0
        for _, row in rows.iterrows():
            change = float(row["change_pct" if threshold.relative else "change"])
            if row["verdict"] == NOT_ENOUGH or math.isnan(change):
                unchecked.append(f"{threshold.text}: {_where(row)}: {row['verdict']}")
                continue
            checked_here += 1
            if row["verdict"] != NO_CHANGE and threshold.crossed(change):
                failures.append(f"{threshold.text}: {_where(row)}: {_change_text(row)}")
        if not checked_here:
            failures.append(f"{threshold.text}: no comparison had enough data to check it")
        checked += checked_here
    return GateResult(failures, unchecked, checked)


@dataclass(frozen=True)
class CompareResult:
    """What `write_comparison` produced: its folder, the table, the gate, the summary."""

    folder: Path
    table: pd.DataFrame
    gate: GateResult | None
    labels: list[str]
    markdown: str
    #: One line per run folder whose records.jsonl repeats records (each counted once).
    notes: list[str] = field(default_factory=list)


# --- output --------------------------------------------------------------------------------


def _signed(v: object, digits: int | None = None, suffix: str = "") -> str:
    text = fmt_num(v, digits)
    if text == "—":
        return text
    return ("+" + text if not text.startswith("-") else text) + suffix


def _change_text(row: Any) -> str:
    """``+30.1 ms [+28.0, +32.2] (+60.2% [+55.9%, +64.4%])``."""
    unit = GATE_METRICS[str(row["metric"])].unit
    text = f"{_signed(row['change'])} {unit} [{_signed(row['change_low'])}, "
    text += f"{_signed(row['change_high'])}]"
    if not math.isnan(float(row["change_pct"])):
        text += (
            f" ({_signed(row['change_pct'], 1, '%')} [{_signed(row['change_pct_low'], 1, '%')}, "
        )
        text += f"{_signed(row['change_pct_high'], 1, '%')}])"
    return text


def comparison_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Column labels and formatted cells of a comparison table (shared by md, html, CLI)."""
    cols = ["provider", "experiment", "model", "metric", "run", "n", "baseline", "run value"]
    cols += ["change [interval]", "verdict"]
    rows = []
    for _, r in table.iterrows():
        metric = GATE_METRICS[str(r["metric"])]
        scale = 100.0 if metric.quantile is None else 1.0
        unit = "%" if metric.quantile is None else f" {metric.unit}"
        pairing = " paired" if r["paired"] else ""
        rows.append(
            [
                str(r["provider"]),
                str(r["experiment"]),
                str(r["model"]),
                metric.description,
                str(r["run"]),
                f"{int(r['n_base'])} → {int(r['n'])}{pairing}",
                fmt_num(float(r["base"]) * scale) + unit,
                fmt_num(float(r["value"]) * scale) + unit,
                _change_text(r),
                str(r["verdict"]),
            ]
        )
    return cols, rows


_STATUS_ICON = {"slower": "🔴", "more errors": "🔴", "faster": "🟢", "fewer errors": "🟢"}


def _summary_blocks(
    table: pd.DataFrame,
    labels: Sequence[str],
    gate: GateResult | None,
    thresholds: Sequence[Threshold],
    how: Comparison,
) -> list[Block]:
    blocks: list[Block] = [Heading("labkit compare: " + " vs ".join(labels), 2)]
    if gate is not None:
        if gate.passed:
            blocks.append(
                Para(
                    f"✅ Gate passed: {', '.join(t.text for t in thresholds)} "
                    f"({gate.checked} comparison(s) checked)."
                )
            )
        else:
            blocks.append(Para(f"❌ Gate failed: {len(gate.failures)} threshold(s) crossed."))
            blocks.append(Bullets(gate.failures, "warn"))
        if gate.unchecked:
            blocks.append(Para("Not checked (too little data):", "note"))
            blocks.append(Bullets(gate.unchecked, "note"))
    unmeasured = table["verdict"].astype(str).str.startswith(NOT_MEASURED)
    if unmeasured.any():
        blocks.append(Para("Could not compare (a run did not measure it):", "note"))
        blocks.append(
            Bullets(
                [
                    f"{GATE_METRICS[str(r['metric'])].description}: {_where(r)}: {r['verdict']}"
                    for _, r in table[unmeasured].iterrows()
                ],
                "note",
            )
        )
    detected = table[~table["verdict"].isin([NO_CHANGE, NOT_ENOUGH]) & ~unmeasured]
    if len(detected):
        blocks.append(
            Bullets(
                [
                    f"{_STATUS_ICON.get(str(r['verdict']), '')} "
                    f"{GATE_METRICS[str(r['metric'])].description} {r['verdict']}: "
                    f"{_where(r)}: {_change_text(r)}"
                    for _, r in detected.iterrows()
                ]
            )
        )
    blocks.append(
        Para(
            f"Baseline: {labels[0]}. Change = run − baseline with its {how.confidence:.0%} "
            f"bootstrap interval ({how.resamples} resamples, seed {how.seed}; paired by "
            "planned request where both runs hold the same ones). A verdict is given only "
            "when the interval excludes zero; 'no change detected' means any change is "
            "smaller than the interval; 'not enough data': too few requests, or an interval "
            "too wide to tell. Error rate in percentage points.",
            "note",
        )
    )
    if table.empty:
        blocks.append(Para("The baseline holds no records: nothing to compare.", "warn"))
    else:
        cols, rows = comparison_rows(table)
        blocks.append(Table(cols, rows, {5, 6, 7, 8}))
    return blocks


def comparison_markdown(
    table: pd.DataFrame,
    labels: Sequence[str],
    gate: GateResult | None = None,
    thresholds: Sequence[Threshold] = (),
    how: Comparison | None = None,
) -> str:
    """The comparison as GitHub-flavoured Markdown, fit for a CI job summary (no images)."""
    blocks = _summary_blocks(table, labels, gate, thresholds, how or Comparison())
    out = [text for text in map(markdown_text, blocks) if text is not None]
    return for_people("\n\n".join(out)) + "\n"


_MAX_FIGURES = 12
#: The columns `distribution_chart` draws.
_CHARTED = ["client.ttft_ms", "client.decode_ms_per_token", "client.e2e_ms"]
_NO_ROWS = pd.DataFrame({c: pd.Series(dtype=float) for c in _CHARTED})


def _charted_groups(records: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """The measured rows' charted columns per (provider, experiment), taken by position
    from the frame's own arrays: a copy of the whole frame per run, or a mask over a
    million strings per figure, would cost memory and seconds."""
    if not len(records):
        return {}
    records = ensure_columns(records, ["provider", "experiment", *_CHARTED])
    ok = records["ok"].to_numpy(dtype=bool) & ~records["warmup"].to_numpy(dtype=bool)
    values = {c: records[c].to_numpy(dtype=float, na_value=np.nan) for c in _CHARTED}
    groups = records.groupby(["provider", "experiment"], sort=False, dropna=False).indices
    out: dict[tuple[str, str], pd.DataFrame] = {}
    for key, rows in groups.items():
        provider, experiment = key if isinstance(key, tuple) else (key, None)
        kept = rows[ok[rows]]
        if len(kept):
            out[(str(provider), str(experiment))] = pd.DataFrame(
                {c: v[kept] for c, v in values.items()}
            )
    return out


def _distribution_charts(runs: Sequence[RunData], labels: Sequence[str]) -> list[Chart]:
    """Per provider × experiment: each run's TTFT, decode and e2e distributions overlaid."""
    by_run = [_charted_groups(run.records) for run in runs]
    keys = sorted({key for groups in by_run for key in groups})
    charts = []
    for provider, experiment in keys[:_MAX_FIGURES]:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{provider}-{experiment}")
        chart = distribution_chart(
            [
                (label, groups.get((provider, experiment), _NO_ROWS))
                for label, groups in zip(labels, by_run, strict=True)
            ],
            f"distribution-{safe}",
            f"{provider} · {experiment}: cumulative distributions of successful, non-warm-up "
            "requests, one series per run, one point per request: a curve further right is "
            "slower.",
        )
        charts += [chart] if chart else []
    return charts


def write_comparison(
    run_dirs: Sequence[Path | str],
    out: Path | None = None,
    thresholds: Sequence[Threshold] = (),
    how: Comparison | None = None,
) -> CompareResult:
    """Write compare.md, compare.html (distributions overlaid) and compare.csv.

    The default folder is ``compare-<first>-vs-<last>`` next to the first run.
    """
    how = how or Comparison()
    runs, labels, costs = _load(run_dirs, costs=True)
    table = compare_frames(
        [(lab, str(r.run_dir), r.records) for lab, r in zip(labels, runs, strict=True)],
        how=how,
    )
    gate = check_thresholds(table, thresholds) if thresholds else None
    folder = out or runs[0].run_dir.parent / (
        f"compare-{runs[0].run_dir.name}-vs-{runs[-1].run_dir.name}"
    )
    title = "labkit comparison: " + " vs ".join(labels)
    summary = _summary_blocks(table, labels, gate, thresholds, how)
    figures: list[Block] = comparison_cost_section(runs, labels, costs)  # where priced
    figures += [Heading("Distributions", 2)]
    figures += [ChartBlock(c) for c in _distribution_charts(runs, labels)]
    notes = repeated_notes(runs, labels)
    sources = Para(
        "Runs: "
        + ", ".join(f"{lab} ({r.run_dir})" for lab, r in zip(labels, runs, strict=True))
        + "".join(f". {note}" for note in notes),
        "note",
    )
    del runs  # the records are drawn: their memory goes back before the figures render
    _give_back()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_new_file(  # never through a link (`write_new_file`)
            folder / "compare.md",
            for_people(_render_md([*summary, sources, *figures], folder, "compare_files")),
        )
        write_new_file(folder / "compare.html", html_page([*summary, sources, *figures], title))
        write_new_file(folder / "compare.csv", scrub_frame(table).to_csv(index=False))
    except OSError as exc:
        raise RunError(f"cannot write the comparison into {folder}: {exc}") from exc
    markdown = comparison_markdown(table, labels, gate, thresholds, how)
    return CompareResult(folder, table, gate, labels, markdown, notes)


def repeated_notes(runs: Sequence[RunData], labels: Sequence[str]) -> list[str]:
    """One line per run whose records.jsonl repeats records (`RunData.repeated_records`):
    they were counted once, and the reader is told so."""
    return [
        f"{lab}: {r.repeated_records} line(s) of records.jsonl repeat a record already read "
        "(the same record_id); each record is counted once"
        for lab, r in zip(labels, runs, strict=True)
        if r.repeated_records
    ]
