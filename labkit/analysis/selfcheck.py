"""labkit's check on itself: are the stamps late, by labkit's own doing?

A stamp is late when the bytes it stamps waited for labkit: in the socket while the event loop
was busy elsewhere, or in a queue behind other streams' work. Every record says by how much
(``client.stamp_lateness_ms_*``, ``client.ttft_lateness_ms``): 0 for kernel stamps, so a loop
that was merely busy while the kernel stamped is no flag. A group (a load level) whose stamps are
late enough to matter for what it measures is flagged client-bound (`summarize_lag`), with a
one-line reason (`client_bound_note`) and one line of advice for the run (`client_bound_advice`).
The limits and the rules: docs/experiments.md, "Load levels" (the self-check).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from labkit.figures import RequestStats
from labkit.manifest import HostCPUManifest
from labkit.records import RequestRecord
from labkit.timing import percentile

if TYPE_CHECKING:
    from labkit.analysis.columns import Columns

__all__ = [
    "BUSY",
    "CLIENT_BOUND",
    "CLIENT_BOUND_FIX",
    "CLIENT_BOUND_LAG_MS",
    "CPU_WAITED",
    "CPU_WAITED_NOTE",
    "LATE_STAMP_ITL_SHARE",
    "LATE_STAMP_MS",
    "LATE_TTFT_MS",
    "LATE_TTFT_SHARE",
    "OTHERS_HELD_CPUS",
    "SATURATED_CPU_SHARE",
    "Cause",
    "LagSummary",
    "RecordLateness",
    "client_bound_advice",
    "client_bound_note",
    "client_bound_notes",
    "lags_once",
    "late_stamp_limit_ms",
    "late_ttft_limit_ms",
    "lateness_of",
    "level_lag",
    "level_lag_of",
    "pooled_p99",
    "record_lateness",
    "summarize_lag",
]

#: Median per-stream loop lag above which timings are flagged as labkit's own delay
#: (records without a stamp-lateness estimate only).
CLIENT_BOUND_LAG_MS = 3.0
#: Event stamps late by more than this (99th percentile) are late whatever the stream ...
LATE_STAMP_MS = 2.0
#: ... and on slow streams, by more than this share of the level's median inter-token gap.
LATE_STAMP_ITL_SHARE = 0.1
#: A first-token stamp later than this (or `LATE_TTFT_SHARE` of the median TTFT) is late.
LATE_TTFT_MS = 1.0
LATE_TTFT_SHARE = 0.02
#: Below this share of one CPU, a late loop was waiting for a CPU, not doing labkit's work.
SATURATED_CPU_SHARE = 0.6
#: The flag, as every reason starts: the group's timings include labkit's own delay.
CLIENT_BOUND = "client-bound"
#: Why a group was late (`LagSummary.cause`): labkit's thread busy, or waiting for a CPU.
Cause = Literal["busy", "waited"]
#: A flagged group's cause, said in its reason.
BUSY = "labkit busy"
CPU_WAITED = "labkit waited for a CPU"
#: What to do where labkit itself was busy (`LoadLevel.client_bound_fix`, the run's advice).
CLIENT_BOUND_FIX = (
    "read fewer streams per process (raise the load experiment's `workers`, lower its "
    "concurrency, or run fewer providers at once)"
)
#: A level where labkit waited (`LoadLevel.client_bound_fix`): no fix from the level alone.
CPU_WAITED_NOTE = (
    "labkit's process waited for a CPU rather than being busy (the run's client-bound advice "
    "says what held the CPUs)"
)
#: Other processes using at least this many of the host's CPUs on average over the run are
#: named as what held them.
OTHERS_HELD_CPUS = 0.25


@dataclass(frozen=True, slots=True)
class RecordLateness:
    """One record's stamp lateness, as the level's flag reads it."""

    events: int
    p50: float
    p99: float
    ttft: float | None = None
    max: float | None = None
    #: Every event's estimate, ascending, where the record keeps them (exact pooling).
    values: tuple[float, ...] | None = None

    def share_above(self, value: float) -> float:
        """The share of the record's events estimated later than `value`: counted where the
        record keeps every event's estimate, else linear between its median, 99th percentile
        and maximum (which overstates it when a few gathered reads carry all the lateness)."""
        if self.values:
            return (len(self.values) - bisect.bisect_right(self.values, value)) / len(self.values)
        top = self.max if self.max is not None else self.p99
        if value >= top:
            return 0.0
        if value >= self.p99:
            return 0.01 * (top - value) / (top - self.p99)
        if value >= self.p50:
            return 0.01 + 0.49 * (self.p99 - value) / (self.p99 - self.p50)
        return min(1.0, 0.5 + 0.5 * (self.p50 - value) / max(abs(self.p50), 1e-3))


def record_lateness(record: RequestRecord) -> RecordLateness | None:
    """The record's stamp lateness; None when it has no estimate."""
    c = record.client
    if c.stamp_lateness_ms_p50 is None or c.stamp_lateness_ms_p99 is None:
        return None
    return lateness_of(
        len(c.event_offsets_ms),
        c.stamp_lateness_ms_p50,
        c.stamp_lateness_ms_p99,
        c.ttft_lateness_ms,
        c.stamp_lateness_ms_max,
        c.stamp_lateness_ms,
    )


def lateness_of(
    events: int,
    p50: float,
    p99: float,
    ttft: float | None,
    most: float | None,
    per_event: Sequence[float] | None,
) -> RecordLateness:
    """A `RecordLateness` from a record's fields (from a record, or a row of the records
    frame): each event's estimate kept sorted where the record has them."""
    values = tuple(sorted(per_event)) if per_event else None
    return RecordLateness(len(values) if values else events, p50, p99, ttft, most, values)


def late_stamp_limit_ms(itl_ms_p50: float | None) -> float:
    """The event-stamp lateness (p99) that distorts a level whose median gap is given."""
    return max(LATE_STAMP_MS, LATE_STAMP_ITL_SHARE * (itl_ms_p50 or 0.0))


def late_ttft_limit_ms(ttft_ms_p50: float | None) -> float:
    """The first-token stamp lateness (p99) that distorts a level whose median TTFT is given."""
    return max(LATE_TTFT_MS, LATE_TTFT_SHARE * (ttft_ms_p50 or 0.0))


def pooled_p99(records: Sequence[RecordLateness], share: float = 0.01) -> float:
    """The 99th percentile over all the records' events: exact where every record keeps its
    events' estimates (`RecordLateness.values`), else the value that 1% (`share`) of the
    events are estimated to exceed, from each record's median, 99th percentile and maximum."""
    if all(r.values for r in records):
        # sorted at once in C: the same floats in the order `sorted` gives; read as Python
        # floats through a memoryview, none converted but the two interpolated
        pooled = np.sort(np.concatenate([np.asarray(r.values, dtype=float) for r in records]))
        return percentile(pooled.data, 100.0 * (1.0 - share))
    total = sum(r.events for r in records)
    lo = min(r.p50 for r in records)
    hi = max(r.max if r.max is not None else r.p99 for r in records)
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if sum(r.events * r.share_above(mid) for r in records) > share * total:
            lo = mid
        else:
            hi = mid
    return hi


def _weighted_median(pairs: list[tuple[float, int]]) -> float:
    pairs.sort()
    half = sum(w for _, w in pairs) / 2.0
    seen = 0
    for value, weight in pairs:
        seen += weight
        if seen >= half:
            return value
    return pairs[-1][0]


@dataclass(frozen=True, slots=True)
class LagSummary:
    """A group's stamp lateness and loop lag, the flag, and how busy labkit's thread was.

    `late_p50`/`late_p99`: over the group's output events (the records' medians weighted by
    their events; `pooled_p99`); `ttft_late_p99` over its first tokens. `n`, `p50`, `max`: the
    records' ``loop_lag_ms``.
    """

    n: int
    p50: float | None
    max: float | None
    client_bound: bool
    cpu_share: float | None = None
    late_p50: float | None = None
    late_p99: float | None = None
    ttft_late_p99: float | None = None
    late_limit_ms: float | None = None
    ttft_limit_ms: float | None = None

    @property
    def cause(self) -> Cause | None:
        """`waited` where labkit's thread used under `SATURATED_CPU_SHARE` of a CPU (it was
        late waiting for one), `busy` where more; None where its CPU time is unknown."""
        if self.cpu_share is None:
            return None
        return "waited" if self.cpu_share < SATURATED_CPU_SHARE else "busy"

    @property
    def fix(self) -> str:
        """What the level alone says to do: more processes when labkit was busy; where it
        waited for a CPU, that the run's advice says what held the CPUs."""
        return CPU_WAITED_NOTE if self.cause == "waited" else CLIENT_BOUND_FIX


def summarize_lag(
    lags: Iterable[float],
    cpu_shares: Iterable[float] = (),
    lateness: Iterable[RecordLateness] = (),
    *,
    itl_ms_p50: float | None = None,
    ttft_ms_p50: float | None = None,
) -> LagSummary:
    """The flag from a group's per-record stamp lateness (else its ``loop_lag_ms``), with
    labkit's CPU shares. Flagged where the 99th percentile over its output events is above
    `late_stamp_limit_ms` of `itl_ms_p50`, or that of its first-token lateness above
    `late_ttft_limit_ms` of `ttft_ms_p50`; records without the estimate (older runs, a loop
    without `labkit.wire.loopclock`) where the median stream's ``loop_lag_ms`` is above
    `CLIENT_BOUND_LAG_MS`."""
    ordered = sorted(lags)
    shares = sorted(cpu_shares)
    share = percentile(shares, 50) if shares else None
    lag_p50 = percentile(ordered, 50) if ordered else None
    lag_max = ordered[-1] if ordered else None
    late = [r for r in lateness if r.events]
    if late:
        p50 = _weighted_median([(r.p50, r.events) for r in late])
        p99 = pooled_p99(late)
        firsts = sorted(r.ttft for r in late if r.ttft is not None)
        ttft_p99 = percentile(firsts, 99) if firsts else None
        limit, ttft_limit = late_stamp_limit_ms(itl_ms_p50), late_ttft_limit_ms(ttft_ms_p50)
        bound = p99 > limit or (ttft_p99 is not None and ttft_p99 > ttft_limit)
        return LagSummary(
            len(ordered), lag_p50, lag_max, bound, share, p50, p99, ttft_p99, limit, ttft_limit
        )
    if not ordered:
        return LagSummary(0, None, None, False, share)
    assert lag_p50 is not None
    return LagSummary(len(ordered), lag_p50, lag_max, lag_p50 > CLIENT_BOUND_LAG_MS, share)


#: Inside `lags_once`: each group's `LagSummary` by its records' ids, in their order.
_LAGS: ContextVar[dict[tuple[str, ...], LagSummary] | None] = ContextVar(
    "labkit_lags_once", default=None
)


@contextmanager
def lags_once() -> Iterator[None]:
    """Within this block a group of records' lag (`level_lag`, `level_lag_of`) is computed
    once: an analysis of a run asks it of the same groups more than once (the load table's
    level, an experiment's client-bound check, the run's request table), ~14 µs a record
    each time. A group is the same where its records' ids come in the same order."""
    token = _LAGS.set({})
    try:
        yield
    finally:
        _LAGS.reset(token)


def level_lag(records: Iterable[RequestRecord]) -> LagSummary:
    """`level_lag_of` a group of records."""
    from labkit.analysis.columns import Columns

    recs = list(records)
    key = tuple(r.record_id for r in recs) if _LAGS.get() is not None else None
    return _once(key, lambda: _level_lag_of(Columns.of_records(recs)))


def _once(key: tuple[str, ...] | None, compute: Callable[[], LagSummary]) -> LagSummary:
    """The group's lag known inside `lags_once` (computed there the first time), else
    computed; `key`: its records' ids in order (None: not to be kept)."""
    known = _LAGS.get()
    if known is None or key is None:
        return compute()
    lag = known.get(key)
    if lag is None:
        lag = known[key] = compute()
    return lag


def _sorted_present(values: Any) -> list[float]:
    present: list[float] = np.sort(values[~np.isnan(values)].astype(float)).tolist()
    return present


def level_lag_of(cols: Columns) -> LagSummary:
    """The stamp lateness and loop lag of a group of records, as columns.

    `cpu_share` is the median over streams of labkit's thread CPU time during the stream
    (`app.cpu_ms`, which covers every stream the thread read meanwhile) over the stream's
    wall time: near 1, labkit itself was the bottleneck.
    """
    key: tuple[str, ...] | None = None
    if _LAGS.get() is not None:
        ids = cols.text("record_id").tolist()
        # columns without the records' ids (a frame that lacks them): not kept
        key = None if any(i is None for i in ids) else tuple(ids)
    return _once(key, lambda: _level_lag_of(cols))


def _level_lag_of(cols: Columns) -> LagSummary:
    """`level_lag_of`, computed."""
    itl = _sorted_present(cols.num("client.itl_ms_p50"))
    ttft = _sorted_present(cols.num("client.ttft_ms"))
    cpu, e2e = cols.num("app.cpu_ms"), cols.num("client.e2e_ms")
    busy = ~np.isnan(cpu) & ~np.isnan(e2e) & (e2e != 0)
    p50, p99 = cols.num("client.stamp_lateness_ms_p50"), cols.num("client.stamp_lateness_ms_p99")
    estimated = np.flatnonzero(~np.isnan(p50) & ~np.isnan(p99))
    events, first = cols.num("client.n_events"), cols.num("client.ttft_lateness_ms")
    most = cols.num("client.stamp_lateness_ms_max")
    per_event = cols.objects("client.stamp_lateness_ms")
    lateness = [
        lateness_of(
            0 if np.isnan(events[i]) else int(events[i]),
            float(p50[i]),
            float(p99[i]),
            None if np.isnan(first[i]) else float(first[i]),
            None if np.isnan(most[i]) else float(most[i]),
            per_event[i],
        )
        for i in estimated
    ]
    return summarize_lag(
        _sorted_present(cols.num("client.loop_lag_ms")),
        (cpu[busy] / e2e[busy]).tolist(),
        lateness,
        itl_ms_p50=percentile(itl, 50) if itl else None,
        ttft_ms_p50=percentile(ttft, 50) if ttft else None,
    )


def client_bound_note(where: str, lag: LagSummary) -> str:
    """`where: client-bound: stamps late p99 3.3 ms (limit 2.0), labkit waited for a CPU`:
    what was late beyond its limit and the cause, in one short line (what to do is the
    run's `client_bound_advice`)."""
    late: list[str] = []
    if lag.late_p99 is not None and lag.late_limit_ms is not None:
        if lag.late_p99 > lag.late_limit_ms:
            late.append(f"stamps late p99 {lag.late_p99:.1f} ms (limit {lag.late_limit_ms:.1f})")
        ttft, limit = lag.ttft_late_p99, lag.ttft_limit_ms
        if ttft is not None and limit is not None and ttft > limit:
            head = "first tokens" if late else "first tokens late p99"
            late.append(f"{head} {ttft:.1f} ms (limit {limit:.1f})")
    elif lag.p50 is not None:
        late.append(
            f"event loop late {lag.p50:.1f} ms in the median stream (limit "
            f"{CLIENT_BOUND_LAG_MS:.1f})"
        )
    if lag.cause == "waited":
        late.append(CPU_WAITED)
    elif lag.cause == "busy" and lag.cpu_share is not None:
        late.append(f"{BUSY} {lag.cpu_share:.0%} of one CPU")
    return f"{where}: {CLIENT_BOUND}: {', '.join(late)}"


def client_bound_notes(records: Iterable[RequestRecord]) -> list[str]:
    """One line per provider × experiment (× load level) that was client-bound (warm-ups,
    which stats leave out, are left out here too)."""
    groups: dict[tuple[str, str, str], list[RequestRecord]] = {}
    for r in records:
        if r.warmup:
            continue
        level = str(r.tags.get("level", ""))
        groups.setdefault((r.provider, r.experiment, level), []).append(r)
    notes = []
    for (provider, experiment, level), recs in groups.items():
        lag = level_lag(recs)
        if lag.client_bound:
            where = f"{provider} · {experiment}" + (f" · {level}" if level else "")
            notes.append(client_bound_note(where, lag))
    return notes


def client_bound_advice(
    groups: Iterable[RequestStats], manifest: Mapping[str, Any] | None
) -> str | None:
    """One line of advice for a run whose `groups` include flagged ones, chosen from what is
    true: where labkit was busy, more processes and fewer streams each; where it waited for
    a CPU, what held the CPUs (`manifest`, the run's manifest.json: a managed server whose
    threads leave labkit no core, else other processes' CPU time during the run); None where
    nothing was flagged or no flagged group's cause is known (a lab.json from before the
    causes were kept: its reasons carry their own fix)."""
    causes = {c for g in groups if g.client_bound for c in g.client_bound_causes}
    if not causes:
        return None
    parts = []
    if "busy" in causes:
        parts.append(f"labkit was busy reading streams: {CLIENT_BOUND_FIX}")
    if "waited" in causes:
        parts.append(_waited_advice(manifest or {}))
    return f"the flagged timings include labkit's own delay; {'; '.join(parts)}."


def _server_threads(manifest: Mapping[str, Any]) -> dict[str, int]:
    """The CPU threads of each managed server the run started on this host (by provider):
    those whose manifest entry says its `threads` and runs on the CPU."""
    threads: dict[str, int] = {}
    providers = manifest.get("providers")
    for pid, entry in providers.items() if isinstance(providers, Mapping) else ():
        server = entry.get("server") if isinstance(entry, Mapping) else None
        if not isinstance(server, Mapping) or server.get("backend") not in ("cpu", None):
            continue
        n = server.get("threads")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            threads[str(pid)] = n
    return threads


def _host_cpu(manifest: Mapping[str, Any]) -> HostCPUManifest | None:
    raw = manifest.get("host_cpu")
    try:
        return HostCPUManifest.model_validate(raw) if raw is not None else None
    except ValueError:
        return None


def _cpus(manifest: Mapping[str, Any], measured: HostCPUManifest | None) -> int | None:
    if measured is not None and measured.cpus:
        return measured.cpus
    host = manifest.get("host")
    n = host.get("cpu_count") if isinstance(host, Mapping) else None
    return n if isinstance(n, int) and n > 0 else None


def _waited_advice(manifest: Mapping[str, Any]) -> str:
    """What held the CPUs labkit waited for, and what to do: never lower threads already 1."""
    servers = _server_threads(manifest)
    measured = _host_cpu(manifest)
    cpus = _cpus(manifest, measured)
    total = sum(servers.values())
    if cpus is not None and servers and total >= cpus:
        if cpus == 1:
            return (
                f"{CPU_WAITED}: this host has 1 CPU, which the managed server's thread shares "
                "with labkit; run the server on another machine"
            )
        if len(servers) == 1:
            ((pid, n),) = servers.items()
            return (
                f"{CPU_WAITED}: the managed server of '{pid}' ran {n} threads on this host's "
                f"{cpus} CPUs, leaving labkit no core; set its `threads:` to {cpus - 1}"
            )
        each = ", ".join(f"'{p}' {n}" for p, n in servers.items())
        return (
            f"{CPU_WAITED}: the managed servers ran {total} threads ({each}) on this host's "
            f"{cpus} CPUs, leaving labkit no core; give them fewer than {cpus} `threads:` in all"
        )
    of_cpus = f" of its {cpus} CPUs" if cpus is not None else ""
    if measured is not None and measured.wall_s > 0:
        others = measured.others_cpu_s / measured.wall_s
        own = measured.labkit_cpu_s / measured.wall_s
        used = f"labkit and the servers it started {own:.1f}"
        if others >= OTHERS_HELD_CPUS:
            return (
                f"{CPU_WAITED}: other processes on this host used {others:.1f}{of_cpus} on "
                f"average during the run ({used}); measure when the host is quieter, or from "
                "another machine"
            )
        crowded = [(p, n) for p, n in servers.items() if n > 1]
        if crowded:
            fix = f"give the managed server of '{crowded[0][0]}' fewer `threads:` (it ran "
            fix += f"{crowded[0][1]}), or run it on another machine"
        elif servers:
            fix = "run the server on another machine"
        else:
            fix = "measure from a machine with more CPUs"
        return (
            f"{CPU_WAITED}, while other processes used {others:.1f}{of_cpus} on average "
            f"during the run ({used}); {fix}"
        )
    if servers and cpus is not None:
        return (
            f"{CPU_WAITED}, although the managed servers' {total} threads left "
            f"{cpus - total}{of_cpus} free: other processes on this host held them; look at "
            "what else ran there, or measure from another machine"
        )
    return (
        f"{CPU_WAITED}: other work on this host held the CPUs; look at what else ran there, "
        "or measure from another machine"
    )
