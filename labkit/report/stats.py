"""The report's statistics: `RequestStats` (computed once, `labkit.analysis.requests`) as
summary.csv / summary.parquet, and how their cells read in the report's tables.

The figures come from lab.json; a run whose lab.json predates them gets them from its
records, through the same function (`run_stats`). Nothing here computes a percentile.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from labkit.analysis.requests import request_stats
from labkit.figures import Percentiles, Quantile, RequestStats
from labkit.records import LabResults, RequestRecord
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


def _records(run_dir: Path) -> list[RequestRecord]:
    """records.jsonl as records; lines that are not one are left out (the frame's loader
    already names them in the report)."""
    path = run_dir / "records.jsonl"
    out = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        if line.strip():
            try:
                out.append(RequestRecord.from_json_line(line))
            except ValueError:
                continue
    return out


def run_stats(lab: LabResults | None, run_dir: Path) -> list[RequestStats]:
    """The run's request statistics: lab.json's, else computed from records.jsonl."""
    if lab is not None and lab.requests is not None:
        return lab.requests
    return request_stats(_records(run_dir))


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
