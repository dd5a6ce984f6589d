"""labkit's check on itself: was the event loop free to read the streams on time?

Every record carries ``client.loop_lag_ms``: how late labkit's event loop ran while that
stream was read (`labkit.recorder.LoopLagMonitor`; the 99th percentile of the probe's samples
over the stream). A stream's bytes wait in the socket for as long as the loop is busy
elsewhere, so a late loop means late stamps: TTFT and inter-token times that measure labkit
rather than the provider. A group of records whose median stream saw the loop more than
`CLIENT_BOUND_LAG_MS` late is flagged client-bound.

The flag errs on the side of raising: under 100 samples a stream's figure is its worst
sample, and with many streams in flight every stream overlaps the same worst pause.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from labkit.records import RequestRecord
from labkit.timing import percentile

__all__ = [
    "CLIENT_BOUND",
    "CLIENT_BOUND_FIX",
    "CLIENT_BOUND_LAG_MS",
    "CPU_STARVED_FIX",
    "SATURATED_CPU_SHARE",
    "LagSummary",
    "client_bound_note",
    "client_bound_notes",
    "level_lag",
    "summarize_lag",
]

#: Median per-stream loop lag above which timings are flagged as labkit's own delay.
CLIENT_BOUND_LAG_MS = 3.0
#: Below this share of one CPU, a late loop was waiting for a CPU, not doing labkit's work.
SATURATED_CPU_SHARE = 0.6
CLIENT_BOUND = "client-bound: timings include labkit's own delay"
CLIENT_BOUND_FIX = (
    "read fewer streams per process (raise the load experiment's `workers`, lower its "
    "concurrency, or run fewer providers at once)"
)
CPU_STARVED_FIX = (
    "labkit's process was waiting for a CPU rather than busy, so another process (a local "
    "llama-server using every core?) holds the CPUs; leave labkit a core (e.g. llama.cpp "
    "`threads:` below the core count) or run the server on another machine"
)


@dataclass(frozen=True, slots=True)
class LagSummary:
    """Loop lag over a group of records, and how busy labkit's own thread was."""

    n: int
    p50: float | None
    max: float | None
    client_bound: bool
    cpu_share: float | None = None

    @property
    def fix(self) -> str:
        """What to do about it: more processes when labkit was busy, else free a CPU."""
        if self.cpu_share is not None and self.cpu_share < SATURATED_CPU_SHARE:
            return CPU_STARVED_FIX
        return CLIENT_BOUND_FIX


def summarize_lag(lags: Iterable[float], cpu_shares: Iterable[float] = ()) -> LagSummary:
    """The flag from a group's per-record ``loop_lag_ms`` and labkit's CPU shares."""
    ordered = sorted(lags)
    if not ordered:
        return LagSummary(0, None, None, False)
    p50 = percentile(ordered, 50)
    shares = sorted(cpu_shares)
    share = percentile(shares, 50) if shares else None
    return LagSummary(len(ordered), p50, ordered[-1], p50 > CLIENT_BOUND_LAG_MS, share)


def level_lag(records: Iterable[RequestRecord]) -> LagSummary:
    """The loop lag of a group of records.

    `cpu_share` is the median over streams of labkit's thread CPU time during the stream
    (`app.cpu_ms`, which covers every stream the thread read meanwhile) over the stream's
    wall time: near 1, labkit itself was the bottleneck.
    """
    recs = list(records)
    return summarize_lag(
        (r.client.loop_lag_ms for r in recs if r.client.loop_lag_ms is not None),
        (
            r.app.cpu_ms / r.client.e2e_ms
            for r in recs
            if r.app.cpu_ms is not None and r.client.e2e_ms
        ),
    )


def client_bound_note(where: str, lag: LagSummary) -> str:
    """The sentence that flags a client-bound group, with its fix."""
    busy = f", labkit busy {lag.cpu_share:.0%} of one CPU" if lag.cpu_share is not None else ""
    return (
        f"{where}: {CLIENT_BOUND} (median stream saw the event loop {lag.p50:.1f} ms late, "
        f"worst {lag.max:.1f} ms{busy}); {lag.fix}."
    )


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
