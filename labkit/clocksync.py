"""One clock across hosts: the offset of a remote clock to the driver's, as NTP estimates it.

A record's `t_start_mono_ns` is `time.perf_counter_ns()` of the process that measured it:
on one host every process shares that clock, across hosts each has its own origin and rate.
Before a level and again after it the driver exchanges stamps with each remote actor and
keeps the exchange with the shortest round trip (`offset_from_exchanges`); `driver_start_ns`
puts a record's `t_start` on the driver's clock. Definitions and bounds: docs/measurement.md,
"One clock across hosts". A leaf beside `labkit.records`: it imports the records and nothing
of HTTP, Ray or the runner.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from labkit.filenames import safe_filename
from labkit.records import RecordClock, RequestRecord

__all__ = [
    "COARSE_CLOCK_SHARE",
    "ClockOffset",
    "HostClock",
    "clock_log_name",
    "clock_note",
    "clock_uncertainty_ns",
    "driver_start_ns",
    "host_clock_uncertainty_ns",
    "level_clock",
    "measure_offset",
    "offset_from_exchanges",
    "read_clock_log",
    "record_clock",
    "write_clock_log",
]


#: A level says its clock is coarse when its hosts' offset uncertainty is above this share of
#: its median TTFT (the finest thing a level measures across hosts).
COARSE_CLOCK_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """A remote clock's offset to the driver's, from the best of `samples` exchanges."""

    #: Add to a time read on the remote clock to get the driver's clock.
    offset_ns: int
    #: Half the round trip of the sample used: the true offset is within ± this (NTP's bound).
    uncertainty_ns: int
    #: The round trip of the sample used (driver clock).
    rtt_ns: int
    #: How many exchanges the estimate was chosen from.
    samples: int


def offset_from_exchanges(exchanges: Sequence[tuple[int, int, int]]) -> ClockOffset:
    """The offset from `(t_send_driver, t_remote, t_recv_driver)` exchanges: the sample with
    the shortest round trip, its remote read taken at the driver's midpoint.

    The remote read happened somewhere in ``[t_send, t_recv]``, so ``t_remote`` maps to
    ``(t_send + t_recv) / 2`` give or take half the round trip, whatever the split of the
    delays between the two directions; the shortest round trip is the tightest bound (NTP's
    clock filter keeps it too).

    Raises ValueError when there is no exchange or one whose answer came before its question.
    """
    if not exchanges:
        raise ValueError("no clock exchange to estimate an offset from")
    best: tuple[int, int, int] | None = None
    for send, remote, recv in exchanges:
        if recv < send:
            raise ValueError(f"clock exchange received before it was sent: {send} > {recv}")
        if best is None or recv - send < best[2] - best[0]:
            best = (send, remote, recv)
    assert best is not None
    send, remote, recv = best
    rtt = recv - send
    return ClockOffset(
        offset_ns=(send + recv) // 2 - remote,
        uncertainty_ns=(rtt + 1) // 2,
        rtt_ns=rtt,
        samples=len(exchanges),
    )


async def measure_offset(
    remote_now: Callable[[], Awaitable[int]],
    *,
    samples: int = 16,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> ClockOffset:
    """Exchange stamps with a remote clock `samples` times, one after another, and return
    the offset of the shortest round trip (`offset_from_exchanges`).

    `remote_now` asks the remote for its clock (a Ray actor method's `.remote()`, awaited);
    `clock` is the driver's. Raises ValueError when `samples` < 1.
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    exchanges = []
    for _ in range(samples):
        send = clock()
        remote = await remote_now()
        exchanges.append((send, int(remote), clock()))
    return offset_from_exchanges(exchanges)


def record_clock(before: ClockOffset, after: ClockOffset | None = None) -> RecordClock:
    """What a record written on a remote host carries: the estimate before its level, and
    the one after when the record was written after the level's closing exchange."""
    return RecordClock(
        offset_ns=before.offset_ns,
        uncertainty_ns=before.uncertainty_ns,
        offset_after_ns=after.offset_ns if after is not None else None,
        uncertainty_after_ns=after.uncertainty_ns if after is not None else None,
    )


def _offset(clock: RecordClock) -> int:
    """The offset a record's times are corrected by: the midpoint of the estimates before
    and after its level when both are known (a linear drift is then off by at most half
    their difference anywhere in the level), else the estimate before."""
    if clock.offset_after_ns is None:
        return clock.offset_ns
    return (clock.offset_ns + clock.offset_after_ns) // 2


def driver_start_ns(record: RequestRecord) -> int | None:
    """The record's `t_start` on the driver's clock: `t_start_mono_ns` corrected by its
    host's offset; `t_start_mono_ns` itself when the record has no `clock` (measured on the
    driver's host); None when it has no `t_start_mono_ns`."""
    start = record.t_start_mono_ns
    if start is None or record.clock is None:
        return start
    return start + _offset(record.clock)


def clock_uncertainty_ns(record: RequestRecord) -> int | None:
    """How far `driver_start_ns` may be off: the larger estimate's uncertainty plus half the
    drift between the estimates before and after; None when the record has no `clock`."""
    clock = record.clock
    if clock is None:
        return None
    if clock.offset_after_ns is None:
        return clock.uncertainty_ns
    after = clock.uncertainty_after_ns if clock.uncertainty_after_ns is not None else 0
    return _bound(clock.uncertainty_ns, after, clock.offset_after_ns - clock.offset_ns)


def _bound(uncertainty_ns: int, uncertainty_after_ns: int, drift_ns: int) -> int:
    """The larger of two estimates' uncertainties plus half the drift between them."""
    return max(uncertainty_ns, uncertainty_after_ns) + (abs(drift_ns) + 1) // 2


def host_clock_uncertainty_ns(entry: HostClock) -> int:
    """How far a host's clock may be off the driver's anywhere in the level: the larger
    estimate's uncertainty plus half the drift from before to after (as
    `clock_uncertainty_ns`); the before estimate's alone when there is no after."""
    if entry.after is None or entry.drift_ns is None:
        return entry.before.uncertainty_ns
    return _bound(entry.before.uncertainty_ns, entry.after.uncertainty_ns, entry.drift_ns)


def level_clock(
    records: Iterable[RequestRecord], clocks: Iterable[HostClock] = ()
) -> tuple[int | None, int | None]:
    """How many hosts measured `records` and how far their clocks may be off the driver's:
    the largest `clock_uncertainty_ns` of a record, or of the level's entries of the clock
    log (`clocks`: they hold the drift of records written before the closing exchange);
    `(None, None)` when every record was measured on the driver's host."""
    hosts: set[str | None] = set()
    bounds = [host_clock_uncertainty_ns(c) for c in clocks]
    for record in records:
        hosts.add(record.host)
        bound = clock_uncertainty_ns(record)
        if bound is not None:
            bounds.append(bound)
    if hosts <= {None}:
        return None, None
    return len(hosts), max(bounds, default=None)


def clock_note(title: str, uncertainty_ms: float | None, ttft_ms_p50: float | None) -> str:
    """One sentence when a level's clock uncertainty is above `COARSE_CLOCK_SHARE` of its
    median TTFT (empty: it is not, or nothing to compare)."""
    if uncertainty_ms is None or not ttft_ms_p50 or ttft_ms_p50 <= 0:
        return ""
    if uncertainty_ms <= COARSE_CLOCK_SHARE * ttft_ms_p50:
        return ""
    return (
        f" At {title} the hosts' clocks line up only within ±{uncertainty_ms:.3g} ms (clock "
        f"offset uncertainty, drift included), more than a tenth of its median TTFT "
        f"({ttft_ms_p50:.3g} ms): its timeline, span and rates across hosts are no finer."
    )


@dataclass(frozen=True, slots=True)
class HostClock:
    """One host's clock estimates around one level: a line of ``clock-<experiment>.jsonl``."""

    #: The host (as records name it in `RequestRecord.host`).
    host: str
    #: The level's label (`tags["level"]` of its records).
    level: str
    #: The estimate taken before the level's first request.
    before: ClockOffset
    #: The estimate taken after its last stream ended (None: the exchange failed).
    after: ClockOffset | None = None
    #: The experiment entry's id, when the log holds more than one.
    experiment: str | None = None

    @property
    def drift_ns(self) -> int | None:
        """How far the offset moved from before to after the level (None: no after)."""
        return None if self.after is None else self.after.offset_ns - self.before.offset_ns


def clock_log_name(experiment_id: str) -> str:
    """The run folder's file of one experiment's clock estimates."""
    return f"clock-{safe_filename(experiment_id)}.jsonl"


def write_clock_log(path: Path, entries: Iterable[HostClock]) -> None:
    """Append `entries` to the clock log at `path`, one JSON line each."""
    lines = [json.dumps(asdict(e), separators=(",", ":")) + "\n" for e in entries]
    with Path(path).open("a", encoding="utf-8") as f:
        f.writelines(lines)


def _offset_from(data: Any) -> ClockOffset:
    return ClockOffset(
        offset_ns=int(data["offset_ns"]),
        uncertainty_ns=int(data["uncertainty_ns"]),
        rtt_ns=int(data["rtt_ns"]),
        samples=int(data["samples"]),
    )


def read_clock_log(path: Path) -> list[HostClock]:
    """The clock log's entries in file order (no file: an empty list). Lines that are not
    entries (a last line cut short) are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    entries = []
    for line in lines:
        try:
            data = json.loads(line)
            after = data.get("after")
            entries.append(
                HostClock(
                    host=str(data["host"]),
                    level=str(data["level"]),
                    before=_offset_from(data["before"]),
                    after=_offset_from(after) if after is not None else None,
                    experiment=data.get("experiment"),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return entries
