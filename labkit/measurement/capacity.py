"""How many processes a load level's streams need: measured capacity against expected load.

`workers: auto` weighs three figures before each level: this host's *capacity*
(`process_capacity`: events/s one labkit process reads within `BUDGET_SHARE` of a core), the
level's *load* (its streams × `stream_events_per_s`) and the *room* (`free_cpus`: the CPUs the
provider's server leaves free). `choose_workers` takes the fewest processes whose capacity
covers the load × `HEADROOM`, never more than the free CPUs nor the streams: 1 whenever one
process holds the level. See docs/experiments.md, "Load levels" (worker processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from labkit.records import RequestRecord
from labkit.wire import fastjson

__all__ = [
    "BUDGET_SHARE",
    "HEADROOM",
    "SURELY_HELD_EPS",
    "Capacity",
    "WorkersChoice",
    "calibrate",
    "choose_workers",
    "free_cpus",
    "needs_calibration",
    "process_capacity",
    "stream_events_per_s",
]

#: The share of one core a process's event loop may be busy reading streams: so an event waits
#: for the loop about its own service time, tens of µs, far inside the error budget.
BUDGET_SHARE = 0.5
#: Expected load is multiplied by this before it is compared with capacity.
HEADROOM = 1.2
#: Events/s one process reads on any host labkit runs on (at 100 µs an event, a fifth of a
#: core): a level below it needs no calibration to be read by one process.
SURELY_HELD_EPS = 2_000.0

_CALIBRATION_STREAMS = 8
_CALIBRATION_TOKENS = 200
_CALIBRATION_INTERVAL_MS = 1.0
_CALIBRATION_ROUNDS = 2
_CACHE_FILE = "capacity.json"


@dataclass(frozen=True, slots=True)
class Capacity:
    """What one labkit process costs per event read on this host."""

    cpu_us_per_event: float
    events_measured: int

    @property
    def events_per_s(self) -> float:
        """Events per second one process reads within `BUDGET_SHARE` of a core."""
        return BUDGET_SHARE * 1e6 / self.cpu_us_per_event


@dataclass(frozen=True, slots=True)
class WorkersChoice:
    """The processes `workers: auto` chose for one level, and the figures behind it."""

    processes: int
    load_eps: float | None
    capacity_eps: float | None
    free_cpus: int

    @property
    def reason(self) -> str:
        """Why, in a few words: ``14,200 events/s expected, 10,400 per process, 1 CPU
        free``."""
        load = "load unknown" if self.load_eps is None else f"{self.load_eps:,.0f} events/s"
        cap = "" if self.capacity_eps is None else f", {self.capacity_eps:,.0f} per process"
        cpus = "CPU" if self.free_cpus == 1 else "CPUs"
        return f"{load} expected{cap}, {self.free_cpus} {cpus} free"

    def tags(self) -> dict[str, str | int | float | bool]:
        """The choice as record tags (`workers_load_eps`, `workers_capacity_eps`,
        `workers_free_cpus`), so a report can say why without the run."""
        out: dict[str, str | int | float | bool] = {"workers_free_cpus": self.free_cpus}
        if self.load_eps is not None:
            out["workers_load_eps"] = round(self.load_eps, 1)
        if self.capacity_eps is not None:
            out["workers_capacity_eps"] = round(self.capacity_eps, 1)
        return out


def choose_workers(
    streams: int | None,
    load_eps: float | None,
    capacity_eps: float | None,
    free: int,
    *,
    streams_per_worker: int = 16,
) -> WorkersChoice:
    """The fewest processes whose capacity covers `load_eps` × `HEADROOM`, at most `free`
    and at most `streams` (None: unbounded); 1 for a load any process holds
    (`needs_calibration`). Without a load or a capacity figure, one per
    `streams_per_worker` streams, still within `free`."""
    limit = max(1, free if streams is None else min(free, streams))
    if load_eps is not None and not needs_calibration(load_eps):
        wanted = 1
    elif load_eps is not None and capacity_eps is not None and capacity_eps > 0:
        wanted = math.ceil(load_eps * HEADROOM / capacity_eps)
    elif streams is not None:
        wanted = math.ceil(streams / streams_per_worker)
    else:
        wanted = 1
    return WorkersChoice(max(1, min(limit, wanted)), load_eps, capacity_eps, free)


def needs_calibration(load_eps: float) -> bool:
    """Whether a level of `load_eps` events/s could need more than one process (below
    `SURELY_HELD_EPS` × `HEADROOM`'s share it cannot)."""
    return load_eps * HEADROOM > SURELY_HELD_EPS


def free_cpus(server_cpus: int) -> int:
    """CPUs this process may use, less what the provider's server takes from the host
    (`ProviderSettings.host_cpus_used`: a loopback server at least one core, a managed
    llama-server its threads); at least 1. A process beyond the free cores competes with the
    server and with the others, and measures worse than one."""
    try:
        mine = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        mine = os.cpu_count() or 1
    return max(1, mine - server_cpus)


def stream_events_per_s(records: Iterable[RequestRecord]) -> float | None:
    """One stream's output events per second while decoding: the fastest of the warm-ups
    with at least two output events (None: none had). A server gives no stream more under
    load, so a level's load is its streams × this."""
    rates = []
    for r in records:
        offsets = r.client.event_offsets_ms
        if r.warmup and r.error is None and len(offsets) >= 2 and offsets[-1] > offsets[0]:
            rates.append((len(offsets) - 1) * 1000.0 / (offsets[-1] - offsets[0]))
    return max(rates, default=None)


def _cache_key() -> str:
    try:
        version = metadata.version("labkit")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return "|".join(
        (
            platform.node(),
            platform.machine(),
            platform.python_version(),
            f"labkit {version}",
            f"json {fastjson.DECODER}",
            f"budget {BUDGET_SHARE}",
        )
    )


def _cache_path() -> Path:
    from labkit.local import cache_dir

    return cache_dir() / _CACHE_FILE


def _read_cache(path: Path, key: str) -> Capacity | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8")).get(key)
        return Capacity(float(entry["cpu_us_per_event"]), int(entry["events_measured"]))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _write_cache(path: Path, key: str, capacity: Capacity) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    data[key] = {
        "cpu_us_per_event": capacity.cpu_us_per_event,
        "events_measured": capacity.events_measured,
    }
    with contextlib.suppress(OSError):  # an unwritable cache only costs a recalibration
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(path)


async def process_capacity(cache: Path | None = None) -> Capacity:
    """This host's `Capacity`: cached, or measured now (about a second) and cached, once per
    host, Python and labkit version, in labkit's cache folder (``~/.cache/labkit`` or
    ``$LABKIT_CACHE_DIR``). Called only when a level could need it (`needs_calibration`)."""
    path = _cache_path() if cache is None else cache
    key = _cache_key()
    found = _read_cache(path, key)
    if found is not None:
        return found
    measured = await calibrate()
    _write_cache(path, key, measured)
    return measured


async def calibrate() -> Capacity:
    """Measure what one process pays per event: `_CALIBRATION_STREAMS` streams at a time of
    `_CALIBRATION_TOKENS` tokens each, every `_CALIBRATION_INTERVAL_MS`, from the fake server
    (`labkit.truth.process.TruthServer`, a process of its own) on loopback, read by the real
    recorder and transport on the calling thread; CPU of this thread (`time.thread_time_ns`)
    per output event."""
    from labkit.measurement.recorder import RecordContext, StreamRecorder
    from labkit.providers.base import ChatRequest
    from labkit.providers.fake import loopback_reader
    from labkit.truth.process import TruthServer

    server = TruthServer(
        first_token_ms=1.0,
        token_interval_ms=_CALIBRATION_INTERVAL_MS,
        tokens=_CALIBRATION_TOKENS,
    )
    await asyncio.to_thread(server.start)
    try:
        provider = loopback_reader(server.base_url, _CALIBRATION_STREAMS)
        recorder = StreamRecorder()
        request = ChatRequest(
            [{"role": "user", "content": "calibration"}], {"max_tokens": _CALIBRATION_TOKENS}
        )
        ctx = RecordContext("capacity", "capacity", store_text=False)
        try:
            # The first round opens the connections and warms the code paths: not counted.
            await asyncio.gather(
                *(recorder.record(provider, request, ctx) for _ in range(_CALIBRATION_STREAMS))
            )
            events = 0
            cpu0 = time.thread_time_ns()
            for _ in range(_CALIBRATION_ROUNDS):
                records = await asyncio.gather(
                    *(recorder.record(provider, request, ctx) for _ in range(_CALIBRATION_STREAMS))
                )
                events += sum(len(r.client.event_offsets_ms) for r in records)
            cpu_ns = time.thread_time_ns() - cpu0
        finally:
            await provider.aclose()
    finally:
        await asyncio.to_thread(server.stop)
    if events == 0:
        raise RuntimeError("capacity calibration read no events")
    return Capacity(cpu_ns / 1000.0 / events, events)
