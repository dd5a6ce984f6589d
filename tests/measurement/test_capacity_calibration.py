"""The capacity calibration for real (a fake server on loopback, read by the real recorder
and transport in this thread), and a `workers: auto` choice carried through worker
processes into the records."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.measurement.capacity import BUDGET_SHARE, Capacity, calibrate
from labkit.providers.fake import FakeSchedule
from labkit.runner import RunOptions, prepare_run
from labkit.runner.run import RunResult
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration


def test_calibration_reads_every_event_and_prices_it() -> None:
    before = set(threading.enumerate())
    measured = asyncio.run(calibrate())
    # Two counted rounds of 8 streams × 200 tokens, every token one output event.
    assert measured.events_measured == 3200
    # A real cost, priced from the CPU the rounds took; how much is the host's (`make
    # bench-cpu` measures labkit's CPU per token).
    assert measured.cpu_us_per_event > 0
    assert measured.events_per_s == pytest.approx(BUDGET_SHARE * 1e6 / measured.cpu_us_per_event)
    print(f"\n{measured.cpu_us_per_event:.1f} µs of CPU per event")
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


def test_an_auto_choice_of_two_processes_is_tagged_on_their_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow_host(cache: Path | None = None) -> Capacity:
        return Capacity(cpu_us_per_event=1_000.0, events_measured=1)  # 500 events/s

    monkeypatch.setattr("labkit.experiments.load.process_capacity", slow_host)
    monkeypatch.setattr("labkit.measurement.capacity.os.sched_getaffinity", lambda _: {0, 1, 2, 3})
    schedule = FakeSchedule(first_token_ms=5, token_interval_ms=0.25, tokens=40)

    async def main() -> RunResult:
        with TruthServer.of(schedule) as server:
            config = parse_config(
                {
                    "name": "auto",
                    "providers": [
                        {
                            "id": "s",
                            "kind": "openai_compatible",
                            "model": "m",
                            "base_url": server.base_url,
                        }
                    ],
                    "experiments": [{"kind": "load", "concurrency": [2], "requests": 4}],
                }
            )
            return await prepare_run(config, RunOptions(out_dir=tmp_path)).run()

    result = asyncio.run(main())
    measured = [r for r in result.records if not r.warmup]
    assert len(measured) == 4 and all(r.error is None for r in measured)
    # Four CPUs, one left to the loopback server: three free; two streams, two processes.
    assert {r.tags["workers"] for r in measured} == {"2"}
    assert {r.tags["workers_free_cpus"] for r in measured} == {3}
    assert {r.tags["workers_capacity_eps"] for r in measured} == {500.0}
    (answer,) = result.lab.answers
    assert "workers: auto read c2 with 2 processes (" in answer.answer
    assert ", 500 per process, 3 CPUs free)." in answer.answer
