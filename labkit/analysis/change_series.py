"""The time series the dashboard draws each change on: a changed metric's median per
stretch of time (a day over a long watch, an hour over a short one), with its interval.

`labkit.analysis.observatory.compute` finds the changes; this gives each one's context, so
the page shows the metric before and after the change point, not only the two levels.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from labkit.analysis.observatory import measured_mask, probe_times
from labkit.analysis.stats import median
from labkit.figures.observatory import ChangeEvent, SeriesPoint

__all__ = ["change_series", "stretch_of"]


def stretch_of(span: pd.Timedelta) -> str:
    """The stretch a series is cut into: a day over three days or more, an hour over six
    hours or more, else ten minutes (a pandas frequency)."""
    if span >= pd.Timedelta(days=3):
        return "1D"
    if span >= pd.Timedelta(hours=6):
        return "1h"
    return "10min"


def change_series(probes: pd.DataFrame, changes: Sequence[ChangeEvent]) -> list[SeriesPoint]:
    """For each shift's provider × model × metric, the metric's median per stretch of time
    (`stretch_of` the watch's span) over the measured probes, with its 95 % interval."""
    wanted = sorted(
        {(c.provider, c.model, c.metric) for c in changes if c.kind == "shift" and c.metric}
    )
    if not wanted or probes.empty:
        return []
    times = pd.Series(probe_times(probes), index=probes.index)
    keep = measured_mask(probes) & times.notna().to_numpy()
    frame = probes[keep]
    times = times[keep]
    if frame.empty:
        return []
    freq = stretch_of(times.max() - times.min())
    buckets = times.dt.floor(freq)
    out: list[SeriesPoint] = []
    for provider, model, metric in wanted:
        if metric not in frame:
            continue
        mine = (frame["provider"] == provider) & (frame["model"] == model)
        values = pd.to_numeric(frame.loc[mine, metric], errors="coerce")
        for _, group in values.groupby(buckets[mine], sort=True):
            xs = group.dropna().to_numpy(float)
            if xs.size == 0:
                continue
            at = times[group.index]
            out.append(
                SeriesPoint(
                    provider=provider,
                    model=model,
                    metric=metric,
                    start=at.min().tz_localize("UTC").to_pydatetime(),
                    end=at.max().tz_localize("UTC").to_pydatetime(),
                    median=median(xs),
                )
            )
    return out
