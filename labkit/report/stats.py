"""The report's statistics: `RequestStats` (computed once, `labkit.analysis.requests`) as
summary.csv / summary.parquet, and how their cells read in the report's tables.

The figures come from lab.json; a run whose lab.json predates them gets them from its
records frame, through the same function (`run_stats`). Nothing here computes a percentile.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from labkit.analysis.columns import Columns
from labkit.analysis.requests import request_stats_of
from labkit.figures import Percentiles, Quantile, RequestStats
from labkit.records import LabResults
from labkit.report.load import RunData, load_client_array, load_run
from labkit.wording import CLIENT_BOUND_MARK, group_label

__all__ = [
    "GROUP_KEYS",
    "METRICS",
    "included",
    "run_stats",
    "stats_frame",
    "where",
]

#: The columns that name a group of records (a row of the statistics).
GROUP_KEYS: list[str] = ["provider", "experiment", "model"]

#: The metrics with percentiles: short name → the record column they are of.
METRICS: dict[str, str] = {
    "ttft_ms": "client.ttft_ms",
    "decode_ms_per_token": "client.decode_ms_per_token",
    "e2e_ms": "client.e2e_ms",
    "output_tokens_per_s": "client.output_tokens_per_s",
}


def included(df: pd.DataFrame) -> pd.Series:
    """Mask of the frame's rows that enter latency statistics: not warm-up, no error."""
    return df["ok"].astype(bool) & ~df["warmup"].astype(bool)


#: What the statistics read off a record's per-event arrays, for the records with a stamp
#: lateness estimate only: read back from records.jsonl (the frame leaves arrays out).
_READ_BACK: dict[str, tuple[str, Callable[[list[float]], Any]]] = {
    "client.stamp_lateness_ms": ("stamp_lateness_ms", lambda values: values),
    "client.n_events": ("event_offsets_ms", len),
}


def _columns(run: RunData) -> Columns:
    """The run's records frame as columns (each converted when first asked for), and what
    the statistics read off per-event arrays (`_READ_BACK`)."""
    df = run.records
    read_back: dict[str, np.ndarray] = {}
    if "client.stamp_lateness_ms_p50" in df.columns:
        has = df["client.stamp_lateness_ms_p50"].notna().to_numpy()
        if has.any():
            rows = df[has]
            for name, (array, value) in _READ_BACK.items():
                if name in df.columns:
                    continue
                found = load_client_array(rows, array)
                kept = np.full(len(df), None, dtype=object)
                for position, record_id in zip(
                    np.flatnonzero(has), rows["record_id"].to_numpy(), strict=True
                ):
                    values = found.get(str(record_id))
                    kept[position] = None if values is None else value(values)
                read_back[name] = kept

    def column(name: str) -> np.ndarray | None:
        if name in read_back:
            return read_back[name]
        if name not in df.columns:
            return None
        values = df[name]
        if values.dtype.kind in "fbiu":
            return values.to_numpy()
        # Text as one string object per distinct value (a run has few: providers, models),
        # coded by Arrow where the column is Arrow's, without a Python string per row.
        if values.dtype == object:
            codes, uniques = pd.factorize(values)
            distinct = np.array([*uniques.tolist(), None], dtype=object)
            picked: np.ndarray = distinct[codes]
            return picked
        coded = pc.dictionary_encode(pa.chunked_array(pa.array(values.array))).combine_chunks()
        words = coded.dictionary.to_pylist()
        distinct = np.array([*words, None], dtype=object)
        picked = distinct[pc.fill_null(coded.indices, len(words)).to_numpy()]
        return picked

    return Columns(len(df), column)


def run_stats(lab: LabResults | None, run: RunData | Path) -> list[RequestStats]:
    """The run's request statistics: lab.json's, else computed from its records (read
    once, as columns; `run` a loaded run or its folder) by the same function the runner
    uses."""
    if lab is not None and lab.requests is not None:
        return lab.requests
    return request_stats_of(_columns(run if isinstance(run, RunData) else load_run(run)))


def where(s: RequestStats) -> str:
    """The group's label (`group_label`), marked where client-bound."""
    return group_label(s) + (f" {CLIENT_BOUND_MARK}" if s.client_bound else "")


def stats_frame(stats: list[RequestStats]) -> pd.DataFrame:
    """summary.csv / summary.parquet: one row per group, every percentile with its interval."""
    rows = []
    for s in stats:
        attempted = s.records - s.warmup_excluded
        row: dict[str, object] = {
            "provider": s.provider,
            "experiment": s.experiment,
            "model": s.model,
            "client_path": s.client_path,
            "records": s.records,
            "warmup_excluded": s.warmup_excluded,
            "errors": s.errors,
            "error_rate": s.errors / attempted if attempted else None,
            "error_kinds": ", ".join(f"{k}: {v}" for k, v in sorted(s.error_kinds.items())),
            "n": s.n,
            "client_bound": s.client_bound,
        }
        for metric in METRICS:
            percentiles = getattr(s, metric)
            assert isinstance(percentiles, Percentiles)
            row[f"{metric}.n"] = percentiles.p50.n
            for name in ("p50", "p90", "p99"):
                q = getattr(percentiles, name)
                assert isinstance(q, Quantile)
                row[f"{metric}.{name}"] = q.value
                row[f"{metric}.{name}_lo"] = q.lo
                row[f"{metric}.{name}_hi"] = q.hi
        rows.append(row)
    return pd.DataFrame(rows)
