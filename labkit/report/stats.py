"""Latency statistics per provider × experiment × model, with exclusions counted.

Rules (from docs/measurement.md): warm-up requests are stored but never in statistics;
failed requests are excluded from latency statistics and counted in error rates. Every
group keeps its counts even when nothing is left to take percentiles of.

Percentiles use linear interpolation between order statistics (numpy's default), so the
p50 of 1..100 is 50.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from labkit.report.load import ensure_columns

__all__ = ["GROUP_KEYS", "METRICS", "QUANTILES", "included", "summarize"]

GROUP_KEYS: list[str] = ["provider", "experiment", "model"]

# Short name used in the summary's column names → the record column it is computed from.
METRICS: dict[str, str] = {
    "ttft_ms": "client.ttft_ms",
    "decode_ms_per_token": "client.decode_ms_per_token",
    "e2e_ms": "client.e2e_ms",
    "output_tokens_per_s": "client.output_tokens_per_s",
}

QUANTILES: dict[str, float] = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_AGGS: list[Any] = ["mean", "min", "max"]


def included(df: pd.DataFrame) -> pd.Series:
    """Mask of the rows that enter latency statistics: not warm-up, no error."""
    return df["ok"].astype(bool) & ~df["warmup"].astype(bool)


def _error_kinds(df: pd.DataFrame, keys: list[str]) -> pd.Series:
    failed = df[~df["ok"].astype(bool) & ~df["warmup"].astype(bool)]
    if failed.empty:
        return pd.Series(dtype=object)
    kinds = failed["error.kind"].astype(object).where(failed["error.kind"].notna(), "unknown")
    counts = failed.assign(_kind=kinds).groupby([*keys, "_kind"], dropna=False).size()
    out: dict[tuple[object, ...], str] = {}
    for idx, count in counts.items():
        assert isinstance(idx, tuple)
        group, kind = idx[:-1], idx[-1]
        text = f"{kind}: {int(count)}"
        out[group] = f"{out[group]}, {text}" if group in out else text
    index = pd.MultiIndex.from_tuples(list(out), names=keys)
    return pd.Series(list(out.values()), index=index, dtype=object)


def summarize(df: pd.DataFrame, keys: Sequence[str] = GROUP_KEYS) -> pd.DataFrame:
    """Statistics per `keys` group (default provider × experiment × model).

    Columns: ``records`` (all rows), ``warmup_excluded``, ``errors`` (failed, not warm-up),
    ``error_rate`` (errors / non-warm-up requests), ``error_kinds`` (``"timeout: 2, ..."``),
    ``n`` (rows in the statistics), then for each metric in `METRICS`:
    ``<metric>.n``, ``.p50``, ``.p90``, ``.p99``, ``.mean``, ``.min``, ``.max``.
    A group where nothing succeeded has ``n == 0`` and NaN statistics.
    """
    keys = list(keys)
    df = ensure_columns(df, list(METRICS.values()))
    cols = [*keys, "records", "warmup_excluded", "errors", "error_rate", "error_kinds", "n"]
    for m in METRICS:
        cols += [f"{m}.n"] + [f"{m}.{q}" for q in QUANTILES] + [f"{m}.{a}" for a in _AGGS]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in keys else float) for c in cols})

    warm = df["warmup"].astype(bool)
    ok = df["ok"].astype(bool)
    base = df[keys].assign(
        _warm=warm, _err=~ok & ~warm, _inc=ok & ~warm, _one=np.ones(len(df), dtype=np.int64)
    )
    grouped = base.groupby(keys, dropna=False, sort=True)
    counts = pd.DataFrame(
        {
            "records": grouped["_one"].sum(),
            "warmup_excluded": grouped["_warm"].sum(),
            "errors": grouped["_err"].sum(),
            "n": grouped["_inc"].sum(),
        }
    )
    attempted = counts["records"] - counts["warmup_excluded"]
    counts["error_rate"] = (counts["errors"] / attempted.where(attempted > 0)).astype(float)
    counts["error_kinds"] = _error_kinds(df, keys).reindex(counts.index).fillna("")

    inc = df.loc[included(df), [*keys, *METRICS.values()]]
    g = inc.groupby(keys, dropna=False, sort=True)
    parts: list[pd.DataFrame] = [counts]
    for m, col in METRICS.items():
        stats = pd.DataFrame(index=counts.index)
        stats[f"{m}.n"] = g[col].count().reindex(counts.index).fillna(0)
        if len(inc):
            qs = g[col].quantile(np.array(list(QUANTILES.values()))).unstack()
            for name, q in QUANTILES.items():
                stats[f"{m}.{name}"] = qs[q].reindex(counts.index) if q in qs else np.nan
            agg = g[col].agg(_AGGS)
            for a in _AGGS:
                stats[f"{m}.{a}"] = agg[a].reindex(counts.index)
        else:
            for name in [*QUANTILES, *_AGGS]:
                stats[f"{m}.{name}"] = np.nan
        parts.append(stats)
    out = pd.concat(parts, axis=1).reset_index()
    for c in ("records", "warmup_excluded", "errors", "n", *(f"{m}.n" for m in METRICS)):
        out[c] = out[c].astype(np.int64)
    return out[cols]
