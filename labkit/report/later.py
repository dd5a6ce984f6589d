"""The report's section on what providers said about each response after the run
(``provider-stats-<provider>.jsonl``, `labkit.provider_stats`), joined to the records by
`record_id`: the router's upstream provider, its latency and generation time, the cost,
beside labkit's own TTFT and end-to-end time of the same requests."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from labkit.provider_stats import read_later_stats
from labkit.report.load import RunData
from labkit.report.render import Block, Heading, Para, Table, fmt_num

__all__ = ["later_stats_frame", "later_stats_section"]

_COLUMNS = ["latency_ms", "generation_time_ms", "total_cost", "upstream_provider", "error"]


def later_stats_frame(run: RunData) -> pd.DataFrame:
    """The records that have stats fetched after the run, with those stats as `later.*`
    columns (an empty frame when no provider kept any)."""
    df = run.records
    if df.empty or "provider" not in df.columns:
        return pd.DataFrame()
    rows = []
    for provider in sorted({str(p) for p in df["provider"].dropna().unique()}):
        for record_id, stats in read_later_stats(run.run_dir, provider).items():
            row = {"record_id": record_id}
            row.update({f"later.{c}": getattr(stats, c) for c in _COLUMNS})
            rows.append(row)
    if not rows:
        return pd.DataFrame()
    return df.merge(pd.DataFrame(rows), on="record_id", how="inner")


def _p50(values: pd.Series) -> float | None:
    clean = pd.to_numeric(values, errors="coerce").dropna()
    return float(np.percentile(clean, 50)) if len(clean) else None


def later_stats_section(run: RunData, joined: pd.DataFrame | None = None) -> list[Block]:
    """A table per provider × experiment with stats fetched after the run (none: empty);
    `joined`: `later_stats_frame` of the run, when computed already (part by part)."""
    if joined is None:
        joined = later_stats_frame(run)
    if joined.empty:
        return []
    cells = []
    for (provider, experiment), rows in joined.groupby(["provider", "experiment"], sort=True):
        ok = rows[rows["later.error"].isna()]
        upstream = Counter(str(u) for u in ok["later.upstream_provider"].dropna())
        cost = pd.to_numeric(ok["later.total_cost"], errors="coerce").dropna()
        cells.append(
            [
                str(provider),
                str(experiment),
                fmt_num(len(ok), 0),
                fmt_num(len(rows) - len(ok), 0),
                ", ".join(f"{k}×{v}" for k, v in upstream.most_common()) or "—",
                fmt_num(_p50(ok["later.latency_ms"])),
                fmt_num(_p50(ok["client.e2e_ms"])),
                fmt_num(_p50(ok["later.generation_time_ms"])),
                fmt_num(_p50(ok["client.ttft_ms"])),
                fmt_num(float(cost.sum()) if len(cost) else None, 6),
            ]
        )
    labels = ["provider", "experiment", "fetched", "missing", "upstream"]
    labels += ["provider latency p50", "labkit e2e p50", "generation time p50"]
    labels += ["labkit TTFT p50", "cost"]
    return [
        Heading("Fetched after the run"),
        Para(
            "What the provider said about each response when asked after the run (OpenRouter: "
            "GET /api/v1/generation, seconds after each stream), joined to the records by "
            "record_id: who served it upstream, the provider's total latency beside labkit's "
            "end-to-end time of the same requests, its generation time, labkit's TTFT (ms, "
            "medians), and the total cost. Not measured by labkit: as reported.",
            "note",
        ),
        Table(labels, cells, {2, 3, 5, 6, 7, 8, 9}),
    ]
