"""The provider observatory's analysis: a store's probes into rollups, splits and changes.

`compute(probes)` is the one entry point the dashboard and the terminal use; it fills
`labkit.figures.observatory.ObservatoryFigures` from `rollups` (median and p90 with their
intervals per hour of the day, over 72 h and over 14 d), `splits` (each window's mean TTFT in
its parts, by `labkit.analysis.split`'s one definition) and `changes` (one CUSUM-tested shift per
series with the daily pattern taken out, Benjamini–Hochberg across every test; a new fingerprint
or build is an event of its own). Costs and same-model verdicts come from functions given as
`costs` and `verdicts`. What each figure means and how it is computed: docs/observatory.md.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from labkit.analysis.columns import Columns
from labkit.analysis.split import prefills, queues
from labkit.analysis.stats import _number, mean, quantile
from labkit.figures.observatory import (
    ChangeEvent,
    Component,
    CostFigures,
    ObservatoryFigures,
    RollupCell,
    SameModelVerdict,
    SplitCell,
    Window,
)
from labkit.figures.stats import Estimate, Mean

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "METRICS",
    "Detection",
    "change_sentence",
    "changes",
    "compute",
    "measured_mask",
    "probe_times",
    "rollups",
    "splits",
]

#: The metrics rolled up by default (a metric a provider never reports is left out for it).
METRICS: tuple[str, ...] = (
    "client.ttft_ms",
    "client.decode_ms_per_token",
    "client.e2e_ms",
    "provider_timings.queue_ms",
    "provider_timings.prefill_ms",
)
#: The windows ending at the last round, and their lengths.
WINDOWS: dict[Window, timedelta] = {"72h": timedelta(hours=72), "14d": timedelta(days=14)}
#: What each component's series is called where a shift of it is stated.
PART_WORDS: dict[Component, str] = {
    "network_frontend": "the network and front end",
    "queue": "the provider's queue",
    "processing": "the provider's processing (prefill)",
    "decode": "decode",
    "total": "TTFT",
}
#: The column each component's shift is measured on (network and front end: derived).
PART_METRICS: dict[Component, str] = {
    "total": "client.ttft_ms",
    "queue": "provider_timings.queue_ms",
    "processing": "provider_timings.prefill_ms",
    "network_frontend": "client.ttft_ms",
    "decode": "client.decode_ms_per_token",
}


@dataclass(frozen=True)
class Detection:
    """How shifts are found: the false-discovery rate, the smallest shift worth stating
    (both `min_shift_ms` and `min_shift_ratio` of the level before must be exceeded), the
    rounds each side of a change needs, and the bootstrap's resamples and seed."""

    fdr: float = 0.05
    min_shift_ms: float = 10.0
    min_shift_ratio: float = 0.1
    min_rounds: int = 6
    resamples: int = 999
    seed: int = 0


# -- the frame ------------------------------------------------------------------------------


def probe_times(probes: pd.DataFrame) -> np.ndarray:
    """Each probe's time as UTC datetime64: ``round.at`` (on a compressed clock, the
    simulated time), else its ``started_at``."""
    import pandas as pd

    at = probes["round.at"] if "round.at" in probes else pd.Series(pd.NaT, index=probes.index)
    at = pd.to_datetime(at, utc=True, errors="coerce", format="mixed")
    if "started_at" in probes:
        started = pd.to_datetime(probes["started_at"], utc=True, errors="coerce", format="mixed")
        at = at.fillna(started)
    return at.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")


def _measured(probes: pd.DataFrame) -> pd.DataFrame:
    """The probes that measured: no warm-up, no failure, no throttled round."""
    return probes[measured_mask(probes)]


def measured_mask(probes: pd.DataFrame) -> np.ndarray:
    """Which probes measured (True): no warm-up, no failure, no throttled or failed round."""
    keep = np.ones(len(probes), dtype=bool)
    if "ok" in probes:
        keep &= probes["ok"].fillna(False).astype(bool).to_numpy()
    if "warmup" in probes:
        keep &= ~probes["warmup"].fillna(False).astype(bool).to_numpy()
    if "round.status" in probes:
        keep &= ~probes["round.status"].isin(["throttled", "failed"]).to_numpy()
    return keep


def _cols(frame: pd.DataFrame) -> Columns:
    return Columns.of_arrays(len(frame), {c: frame[c].to_numpy() for c in frame.columns})


def _groups(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    if frame.empty:
        return []
    return [
        (str(p), str(m), g)
        for (p, m), g in frame.groupby(["provider", "model"], sort=True, dropna=False)
    ]


def _utc(t: np.datetime64) -> datetime:
    return datetime.fromtimestamp(float(t.astype("datetime64[ns]").astype(np.int64)) / 1e9, UTC)


def _estimate(m: Mean) -> Estimate | None:
    return None if m.value is None else Estimate(value=m.value, lo=m.lo, hi=m.hi)


def _parts(cols: Columns) -> dict[Component, np.ndarray]:
    """Each probe's TTFT and its parts (NaN where a part is not reported), and decode."""
    ttft = cols.num("client.ttft_ms")
    queue = queues(cols)[0]
    prefill = prefills(cols)[0]
    return {
        "total": ttft,
        "queue": queue,
        "processing": prefill,
        "network_frontend": ttft - queue - prefill,
        "decode": cols.num("client.decode_ms_per_token"),
    }


# -- rollups and splits ---------------------------------------------------------------------


def _windows(times: np.ndarray) -> list[tuple[Window, int | None, np.ndarray]]:
    """(window, hour, mask) for the 24 hours of the day and the windows ending at the last
    probe."""
    out: list[tuple[Window, int | None, np.ndarray]] = []
    if times.size == 0:
        return out
    hours = (times.astype("datetime64[h]").astype(np.int64) % 24).astype(int)
    for hour in range(24):
        out.append(("hour_of_day", hour, hours == hour))
    last = times.max()
    for window, length in WINDOWS.items():
        out.append((window, None, times > last - np.timedelta64(length)))
    return out


def rollups(probes: pd.DataFrame, metrics: Sequence[str] = METRICS) -> list[RollupCell]:
    """Median and p90 of each metric per provider × model at each hour of the day (UTC) and
    over the last 72 hours and 14 days, with their intervals; hours without probes and
    metrics a provider never reports are left out."""
    out: list[RollupCell] = []
    for provider, model, group in _groups(_measured(probes)):
        times = probe_times(group)
        cols = _cols(group)
        for metric in metrics:
            values = cols.num(metric)
            if np.isnan(values).all():
                continue
            for window, hour, mask in _windows(times):
                keep = mask & ~np.isnan(values)
                if not keep.any():
                    continue
                chosen = values[keep]
                out.append(
                    RollupCell(
                        provider=provider,
                        model=model,
                        metric=metric,
                        window=window,
                        hour=hour,
                        start=_utc(times[keep].min()),
                        end=_utc(times[keep].max()),
                        median=quantile(chosen, 0.5),
                        p90=quantile(chosen, 0.9),
                    )
                )
    return out


def _split_cell(
    provider: str, model: str, window: Window, hour: int | None, parts: dict[Component, np.ndarray]
) -> SplitCell | None:
    ttft = parts["total"]
    has = ~np.isnan(ttft)
    if not has.any():
        return None
    queue, processing = parts["queue"], parts["processing"]
    has_queue = bool((has & ~np.isnan(queue)).any())
    has_processing = bool((has & ~np.isnan(processing)).any())
    rows = has.copy()
    if has_queue:
        rows &= ~np.isnan(queue)
    if has_processing:
        rows &= ~np.isnan(processing)
    separable: list[Component] = ["total"]
    cell: dict[str, Any] = {}
    if has_queue and has_processing:  # the rest is network and front end: the parts add up
        cell["network_frontend_ms"] = _estimate(mean(parts["network_frontend"][rows]))
        separable.append("network_frontend")
    if has_queue:
        cell["queue_ms"] = _estimate(mean(queue[rows]))
        separable.append("queue")
    if has_processing:
        cell["processing_ms"] = _estimate(mean(processing[rows]))
        separable.append("processing")
    decode = parts["decode"][~np.isnan(parts["decode"])]
    if decode.size:
        cell["decode_ms_per_token"] = _estimate(mean(decode))
        separable.append("decode")
    total = _estimate(mean(ttft[rows]))
    if total is None:
        return None
    return SplitCell(
        provider=provider,
        model=model,
        window=window,
        hour=hour,
        n=int(rows.sum()),
        total_ms=total,
        separable=separable,
        **cell,
    )


def splits(probes: pd.DataFrame) -> list[SplitCell]:
    """Each provider × model's mean TTFT split into its parts, per hour of the day and over
    the last 72 hours and 14 days (`labkit.analysis.split`: the queue and the prefill as the
    provider reports them, network and front end the rest, labkit's own time included)."""
    out: list[SplitCell] = []
    for provider, model, group in _groups(_measured(probes)):
        times = probe_times(group)
        parts = _parts(_cols(group))
        for window, hour, mask in _windows(times):
            if not mask.any():
                continue
            cell = _split_cell(
                provider, model, window, hour, {k: v[mask] for k, v in parts.items()}
            )
            if cell is not None:
                out.append(cell)
    return out


# -- changes -----------------------------------------------------------------------------------


@dataclass
class _Shift:
    provider: str
    model: str
    component: Component
    p: float
    at: datetime
    at_lo: datetime
    at_hi: datetime
    before: float
    after: float
    delta: Estimate


def _round_series(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The median of `values` per round (its time), in time order; rounds with none left out."""
    keep = ~np.isnan(values)
    if not keep.any():
        return np.array([], dtype="datetime64[ns]"), np.array([])
    at, inverse = np.unique(times[keep], return_inverse=True)
    chosen = values[keep]
    medians = np.array([np.median(chosen[inverse == i]) for i in range(at.size)])
    return at, medians


def _deseasoned(at: np.ndarray, y: np.ndarray, edge: int, with_step: bool = True) -> np.ndarray:
    """`y` less each hour of the day's mean, the hour effects fitted together with one step
    (least squares, by alternating the two fits), so that a step part-way through a day is
    not taken for a daily pattern (`with_step` False: the hour effects alone, as the test
    under no change has them); where the rounds span under two days, when a daily
    pattern cannot be told from a step, `y` less its mean."""
    span = (at.max() - at.min()) / np.timedelta64(1, "h") if at.size else 0.0
    if span < 48:
        flat: np.ndarray = y - y.mean()
        return flat
    hours = (at.astype("datetime64[h]").astype(np.int64) % 24).astype(int)
    counts = np.bincount(hours, minlength=24)
    seen = counts > 0

    def effects(values: np.ndarray) -> np.ndarray:
        sums = np.bincount(hours, weights=values, minlength=24)
        out = np.zeros(24)
        out[seen] = sums[seen] / counts[seen]
        return out

    step = np.zeros(y.size)
    if not with_step:
        alone: np.ndarray = y - effects(y)[hours]
        return alone
    for _ in range(4):
        r = y - effects(y - step)[hours]
        tau = int(_best_split(r, edge))
        step = np.where(np.arange(y.size) < tau, 0.0, r[tau:].mean() - r[:tau].mean())
    result: np.ndarray = y - effects(y - step)[hours]
    return result


def _best_split(r: np.ndarray, edge: int) -> np.ndarray:
    """The least-squares single change point of each row of `r` (the first index after it),
    at least `edge` from either end."""
    n = r.shape[-1]
    k = np.arange(1, n)
    csum = np.cumsum(r - r.mean(axis=-1, keepdims=True), axis=-1)[..., :-1]
    gain = csum**2 / (k * (n - k))
    gain[..., : edge - 1] = -np.inf
    gain[..., n - edge :] = -np.inf
    return np.argmax(gain, axis=-1) + 1  # type: ignore[no-any-return]


def _shift(
    provider: str,
    model: str,
    component: Component,
    times: np.ndarray,
    values: np.ndarray,
    how: Detection,
) -> _Shift | None:
    """The one most likely shift of a component's per-round medians, tested (CUSUM against
    the Kolmogorov distribution) and placed in time (least squares, residual bootstrap)."""
    from scipy import stats as sps

    at, y = _round_series(times, values)
    n = y.size
    if n < 2 * how.min_rounds:
        return None
    r = _deseasoned(at, y, how.min_rounds)
    tau = int(_best_split(r, how.min_rounds))
    fitted = np.where(np.arange(n) < tau, r[:tau].mean(), r[tau:].mean())
    residual = r - fitted
    # the noise: the least-squares estimate under the model with the step (so the step does
    # not inflate it), its degrees of freedom less the hour effects and the step
    daily = (at.max() - at.min()) / np.timedelta64(1, "h") >= 48
    fitted_terms = 2 + (24 if daily else 0)
    sigma = math.sqrt(float(np.sum(residual**2)) / max(n - fitted_terms, 1)) or 1e-9
    null = _deseasoned(at, y, how.min_rounds, with_step=False)  # the hour effects alone
    statistic = float(np.abs(np.cumsum(null - null.mean())).max()) / (sigma * math.sqrt(n))
    p = float(sps.kstwobign.sf(statistic))
    rng = np.random.default_rng(how.seed)
    draws = fitted + rng.choice(residual, size=(how.resamples, n), replace=True)
    taus = _best_split(draws, how.min_rounds)
    tau_lo, tau_hi = (int(v) for v in np.percentile(taus, [2.5, 97.5], method="inverted_cdf"))
    tau_lo, tau_hi = min(tau_lo, tau), max(tau_hi, tau)
    # the size: the probes' median after the change less before it, with its interval
    cut = at[tau - 1] + (at[tau] - at[tau - 1]) / 2
    keep = ~np.isnan(values)
    before, after = values[keep & (times < cut)], values[keep & (times >= cut)]
    b, a = float(np.median(before)), float(np.median(after))

    def difference(x: np.ndarray, z: np.ndarray, axis: int = -1) -> Any:
        return np.median(z, axis=axis) - np.median(x, axis=axis)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        boot = sps.bootstrap(
            (before, after),
            difference,
            n_resamples=how.resamples,
            method="percentile",
            rng=np.random.default_rng(how.seed),
        )
    lo, hi = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
    delta = Estimate(
        value=a - b, lo=lo if math.isfinite(lo) else None, hi=hi if math.isfinite(hi) else None
    )
    return _Shift(
        provider=provider,
        model=model,
        component=component,
        p=p,
        at=_utc(cut),
        at_lo=_utc(at[tau_lo - 1]),
        at_hi=_utc(at[tau_hi]),
        before=b,
        after=a,
        delta=delta,
    )


def _worth_stating(s: _Shift, how: Detection) -> bool:
    """An interval clear of 0 and a shift larger than both of `how`'s thresholds."""
    lo, hi = s.delta.lo, s.delta.hi
    clear = lo is not None and hi is not None and (lo > 0 or hi < 0)
    size = abs(s.delta.value)
    return clear and size >= how.min_shift_ms and size >= how.min_shift_ratio * abs(s.before)


def _when(t: datetime) -> str:
    return t.strftime("%a %d %b %H:%M UTC")


def change_sentence(
    provider: str,
    component: Component,
    metric_words: str,
    delta: Estimate,
    at: datetime,
    at_lo: datetime | None,
    at_hi: datetime | None,
    named: Component | None = None,
    not_separable: str | None = None,
) -> str:
    """One finding in the house style: ``TTFT p50 on groq rose 180 ms (95% CI 150–210) since
    Tue 03 Mar 14:00 UTC (between … and …): the provider's queue, not the network and front
    end.``"""
    verb = "rose" if delta.value > 0 else "fell"
    size = f"{_number(abs(delta.value))} ms"
    interval = (
        f" (95% CI {_number(abs(delta.lo))}–{_number(abs(delta.hi))})"
        if delta.lo is not None and delta.hi is not None
        else ""
    )
    if delta.value < 0 and delta.lo is not None and delta.hi is not None:
        interval = f" (95% CI {_number(abs(delta.hi))}–{_number(abs(delta.lo))})"
    between = f" (between {_when(at_lo)} and {_when(at_hi)})" if at_lo and at_hi else ""
    text = f"{metric_words} on {provider} {verb} {size}{interval} since {_when(at)}{between}"
    if component == "total" and named is not None and named != "total":
        others = [PART_WORDS[c] for c in ("queue", "processing", "network_frontend") if c != named]
        return f"{text}: {PART_WORDS[named]}, not {' or '.join(others)}."
    if component == "total":
        reason = not_separable or "no single part of it moved detectably"
        return f"{text}: which part moved is not separable ({reason})."
    return f"{text}."


def _event(s: _Shift, q: float, named: Component | None, not_separable: str | None) -> ChangeEvent:
    component: Component = named if s.component == "total" and named is not None else s.component
    words = {
        "total": "TTFT p50",
        "queue": "The provider's queue p50",
        "processing": "The provider's processing (prefill) p50",
        "network_frontend": "Network and front end p50",
        "decode": "Decode per token p50",
    }[s.component]
    return ChangeEvent(
        provider=s.provider,
        model=s.model,
        kind="shift",
        metric=PART_METRICS[s.component],
        statistic="p50",
        component=component,
        at=s.at,
        at_lo=s.at_lo,
        at_hi=s.at_hi,
        before=s.before,
        after=s.after,
        delta=s.delta,
        q_value=q,
        sentence=change_sentence(
            s.provider, s.component, words, s.delta, s.at, s.at_lo, s.at_hi, named, not_separable
        ),
    )


def _text_events(
    provider: str, model: str, times: np.ndarray, group: pd.DataFrame
) -> list[ChangeEvent]:
    """A new ``system_fingerprint`` or ``server_build`` (one not seen before) as an event."""
    out: list[ChangeEvent] = []
    order = np.argsort(times, kind="stable")
    texts: list[tuple[str, Literal["fingerprint", "build"], str]] = [
        ("system_fingerprint", "fingerprint", "system_fingerprint"),
        ("server_build", "build", "server build"),
    ]
    for column, kind, words in texts:
        if column not in group:
            continue
        values = group[column].to_numpy()[order]
        at = times[order]
        seen: set[str] = set()
        last: tuple[str, np.datetime64] | None = None
        for value, t in zip(values, at, strict=True):
            if not isinstance(value, str) or not value:
                continue
            if last is not None and value != last[0] and value not in seen:
                when = _utc(t)
                out.append(
                    ChangeEvent(
                        provider=provider,
                        model=model,
                        kind=kind,
                        at=when,
                        at_lo=_utc(last[1]),
                        at_hi=when,
                        old_value=last[0],
                        new_value=value,
                        sentence=f"{provider}'s {words} changed from {last[0]} to {value} "
                        f"between {_when(_utc(last[1]))} and {_when(when)}.",
                    )
                )
            seen.add(value)
            last = (value, t)
    return out


def changes(probes: pd.DataFrame, how: Detection | None = None) -> list[ChangeEvent]:
    """The shifts the probes show (named by the part that moved) and the fingerprint and
    build changes, in time order (see the module; docs/observatory.md)."""
    from scipy.stats import false_discovery_control

    how = how or Detection()
    shifts: list[_Shift] = []
    text_events: list[ChangeEvent] = []
    unseparable: dict[tuple[str, str], str | None] = {}
    for provider, model, group in _groups(_measured(probes)):
        times = probe_times(group)
        parts = _parts(_cols(group))
        has_queue = bool((~np.isnan(parts["queue"])).any())
        has_processing = bool((~np.isnan(parts["processing"])).any())
        missing = [w for w, has in (("queue", has_queue), ("prefill", has_processing)) if not has]
        unseparable[(provider, model)] = (
            f"the provider reports no {' or '.join(missing)} time" if missing else None
        )
        for component, values in parts.items():
            if np.isnan(values).all():
                continue
            shift = _shift(provider, model, component, times, values, how)
            if shift is not None:
                shifts.append(shift)
        text_events += _text_events(provider, model, times, group)
    if not shifts:
        return sorted(text_events, key=lambda e: e.at)
    qs = false_discovery_control([s.p for s in shifts], method="bh")
    found = [(s, float(q)) for s, q in zip(shifts, qs, strict=True) if q < how.fdr]
    found = [(s, q) for s, q in found if _worth_stating(s, how)]
    events: list[ChangeEvent] = []
    absorbed: set[int] = set()
    for i, (s, q) in enumerate(found):
        if s.component != "total":
            continue
        named: Component | None = None
        best = math.inf
        for j, (part, _) in enumerate(found):
            same = (part.provider, part.model) == (s.provider, s.model)
            if not same or part.component in ("total", "decode"):
                continue
            overlap = part.at_lo <= s.at_hi and s.at_lo <= part.at_hi
            gap = abs(part.delta.value - s.delta.value)
            if overlap and gap < best:
                named, best = part.component, gap
                absorbed.add(j)
        events.append(_event(s, q, named, unseparable[(s.provider, s.model)]))
        absorbed.add(i)
    for j, (s, q) in enumerate(found):
        if j not in absorbed:
            events.append(_event(s, q, None, None))
    return sorted(events + text_events, key=lambda e: e.at)


def compute(
    probes: pd.DataFrame,
    *,
    store: str = "",
    metrics: Sequence[str] = METRICS,
    detection: Detection | None = None,
    costs: Callable[[pd.DataFrame], list[CostFigures]] | None = None,
    verdicts: Callable[[pd.DataFrame], list[SameModelVerdict]] | None = None,
    computed_at: datetime | None = None,
) -> ObservatoryFigures:
    """Everything the dashboard and the terminal show, from a store's probes frame
    (`labkit.store.Store.probes`): rollups, splits and changes; `costs` and `verdicts`
    (the price table's and the same-model probes' functions) fill the rest when given."""
    times = probe_times(probes) if len(probes) else np.array([], dtype="datetime64[ns]")
    times = times[~np.isnat(times)]
    rounds = 0
    if "round.index" in probes and "round.watch_id" in probes:
        rounds = int(probes[["round.watch_id", "round.index"]].dropna().drop_duplicates().shape[0])
    elif times.size:
        rounds = int(np.unique(times).size)
    return ObservatoryFigures(
        store=store,
        computed_at=computed_at or datetime.now(UTC),
        first_round=_utc(times.min()) if times.size else None,
        last_round=_utc(times.max()) if times.size else None,
        rounds=rounds,
        rollups=rollups(probes, metrics),
        splits=splits(probes),
        changes=changes(probes, detection),
        costs=costs(probes) if costs is not None else [],
        verdicts=verdicts(probes) if verdicts is not None else [],
    )
