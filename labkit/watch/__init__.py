"""`labkit watch`: a config's probes on a schedule for days, each round a run, into a store.

`Watch` runs the rounds (`labkit.watch.watcher`); `run_watch` is its blocking entry point
(the CLI's, and a test's with a simulated clock); `status_lines` says what a watch folder
did and will do. docs/watch.md is the guide.
"""

from __future__ import annotations

from pathlib import Path

from labkit.config import LabConfig
from labkit.watch.rounds import (
    SIM_TIME_HEADER,
    RoundOutcome,
    RoundPlan,
    RoundRunner,
    RunRounds,
    round_config,
)
from labkit.watch.schedule import Clock, ManualClock, Schedule, SimulatedClock, WallClock
from labkit.watch.state import STATE_FILE, MissedSpan, RoundEntry, WatchState, read_state
from labkit.watch.status import status_lines
from labkit.watch.watcher import (
    STORE_FILE,
    Line,
    Watch,
    WatchResult,
    default_folder,
    resolve_store_url,
)

__all__ = [
    "SIM_TIME_HEADER",
    "STATE_FILE",
    "STORE_FILE",
    "Clock",
    "ManualClock",
    "MissedSpan",
    "RoundEntry",
    "RoundOutcome",
    "RoundPlan",
    "RoundRunner",
    "RunRounds",
    "Schedule",
    "SimulatedClock",
    "WallClock",
    "Watch",
    "WatchResult",
    "WatchState",
    "default_folder",
    "read_state",
    "resolve_store_url",
    "round_config",
    "run_watch",
    "status_lines",
]


def run_watch(
    config: LabConfig,
    folder: Path | None = None,
    *,
    store_url: str | None = None,
    clock: Clock | None = None,
    on_line: Line | None = None,
    config_path: str | None = None,
) -> WatchResult:
    """Run the watch of `config` in `folder` (default `default_folder`) until it stops
    (a budget, `watch.rounds`, a signal), on an event loop of its own; one line per round
    to `on_line`."""
    from labkit.wire import loopclock

    watch = Watch(
        config,
        folder or default_folder(config),
        store_url=store_url,
        clock=clock,
        on_line=on_line,
        config_path=config_path,
    )
    return loopclock.run(watch.run())
