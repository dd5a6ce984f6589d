"""`workers: auto` from measured capacity (labkit.capacity): the choice from scripted
capacity, rates and free CPUs; the warm-up's rate; the cache; a load run that records why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.measurement import capacity
from labkit.measurement.capacity import (
    HEADROOM,
    SURELY_HELD_EPS,
    Capacity,
    WorkersChoice,
    choose_workers,
    free_cpus,
    process_capacity,
    stream_events_per_s,
)
from labkit.records import ClientTimings, RequestRecord
from labkit.runner import RunOptions, prepare_run

pytestmark = pytest.mark.unit


def warmup(offsets_ms: list[float], *, ok: bool = True, is_warmup: bool = True) -> RequestRecord:
    """A warm-up record whose output events arrived at `offsets_ms`."""
    from labkit.records import ErrorKind, RecordError

    return RequestRecord(
        run_id="r",
        record_id="x",
        experiment="load",
        warmup=is_warmup,
        provider="p",
        provider_kind="k",
        model="m",
        prompt_id="p",
        prompt_chars=1,
        prompt_bytes=1,
        started_at="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
        client=ClientTimings(event_offsets_ms=offsets_ms),
        error=None if ok else RecordError(kind=ErrorKind.PROTOCOL, message="bad"),
    )


# --- the choice ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("streams", "load", "cap", "free", "expected"),
    [
        (32, 16_000.0, 20_000.0, 1, 1),  # two cores, a loopback server: one process, always
        (32, 16_000.0, 20_000.0, 8, 1),  # 16,000 × 1.2 = 19,200 within one process's 20,000
        (32, 18_000.0, 20_000.0, 8, 2),  # 21,600 over one: two
        (64, 90_000.0, 20_000.0, 8, 6),  # 108,000 / 20,000 → 6
        (64, 900_000.0, 20_000.0, 8, 8),  # never more than the free CPUs
        (3, 900_000.0, 20_000.0, 8, 3),  # never more than the streams
        (32, 1_000.0, None, 8, 1),  # a load any process holds: no capacity figure needed
        (1, 50_000.0, 20_000.0, 8, 1),  # one stream: one process
        (None, 45_000.0, 20_000.0, 8, 3),  # an uncapped open loop: capacity alone decides
    ],
)
def test_the_fewest_processes_that_cover_the_load_within_the_free_cpus(
    streams: int | None, load: float, cap: float | None, free: int, expected: int
) -> None:
    choice = choose_workers(streams, load, cap, free)
    assert choice.processes == expected
    assert (choice.load_eps, choice.capacity_eps, choice.free_cpus) == (load, cap, free)


def test_without_a_measured_rate_streams_per_worker_decides_within_the_free_cpus() -> None:
    assert [choose_workers(s, None, None, 4).processes for s in (1, 16, 17, 64)] == [1, 1, 2, 4]
    assert choose_workers(64, None, None, 1).processes == 1
    assert choose_workers(None, None, None, 4).processes == 1
    assert choose_workers(40, None, None, 8, streams_per_worker=8).processes == 5


def test_a_load_at_the_edge_of_the_surely_held_rate() -> None:
    edge = SURELY_HELD_EPS / HEADROOM
    assert choose_workers(32, edge, None, 8).processes == 1
    # Just over it, without a capacity figure, streams_per_worker decides.
    assert choose_workers(32, edge * 1.01, None, 8).processes == 2


def test_the_choice_says_why_in_words_and_tags() -> None:
    choice = WorkersChoice(processes=2, load_eps=21_600.4, capacity_eps=18_000.0, free_cpus=3)
    assert choice.reason == "21,600 events/s expected, 18,000 per process, 3 CPUs free"
    assert choice.tags() == {
        "workers_free_cpus": 3,
        "workers_load_eps": 21_600.4,
        "workers_capacity_eps": 18_000.0,
    }
    unknown = WorkersChoice(processes=1, load_eps=None, capacity_eps=None, free_cpus=1)
    assert unknown.reason == "load unknown expected, 1 CPU free"
    assert unknown.tags() == {"workers_free_cpus": 1}


def test_capacity_is_the_budget_share_of_a_core_over_the_cost_of_an_event() -> None:
    assert Capacity(cpu_us_per_event=25.0, events_measured=3200).events_per_s == pytest.approx(
        capacity.BUDGET_SHARE * 40_000
    )


# --- what is measured ---------------------------------------------------------------------


def test_free_cpus_leave_the_servers_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("labkit.measurement.capacity.os.sched_getaffinity", lambda _: {0, 1, 2, 3})
    assert [free_cpus(n) for n in (0, 1, 3, 8)] == [4, 3, 1, 1]


def test_a_streams_rate_is_the_fastest_warmups_decode_rate() -> None:
    records = [
        warmup([100.0, 102.0, 104.0, 106.0]),  # 3 gaps over 6 ms: 500 events/s
        warmup([50.0, 60.0, 70.0]),  # 100 events/s
        warmup([10.0, 10.5], ok=False),  # failed: not counted
        warmup([10.0, 10.1, 10.2], is_warmup=False),  # a measured request: not counted
        warmup([5.0]),  # one event: no rate
    ]
    assert stream_events_per_s(records) == pytest.approx(500.0)
    assert stream_events_per_s([warmup([5.0])]) is None


def test_servers_on_this_host_take_cores_remote_ones_none() -> None:
    def settings(entry: dict[str, Any]) -> Any:
        cfg = parse_config(
            {
                "name": "n",
                "providers": [{"id": "p", "model": "m", **entry}],
                "experiments": [{"kind": "single"}],
            }
        )
        return cfg.providers[0]

    compat = {"kind": "openai_compatible"}
    assert settings({**compat, "base_url": "http://127.0.0.1:8000/v1"}).host_cpus_used() == 1
    assert settings({**compat, "base_url": "http://localhost:8000/v1"}).host_cpus_used() == 1
    assert settings({**compat, "base_url": "https://api.example.com/v1"}).host_cpus_used() == 0
    assert settings({"kind": "openai"}).host_cpus_used() == 0
    managed = {"kind": "llamacpp", "backend": "cpu"}
    assert settings({**managed, "threads": 6}).host_cpus_used() == 6
    assert settings({**managed, "backend": "cuda"}).host_cpus_used() == 1
    running = {"kind": "llamacpp", "managed": False, "base_url": "http://127.0.0.1:8080"}
    assert settings(running).host_cpus_used() == 1


def test_capacity_is_measured_once_and_cached_per_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    async def scripted() -> Capacity:
        calls.append(1)
        return Capacity(cpu_us_per_event=40.0, events_measured=3200)

    monkeypatch.setattr(capacity, "calibrate", scripted)
    path = tmp_path / "cache" / "capacity.json"
    first = asyncio.run(process_capacity(path))
    again = asyncio.run(process_capacity(path))
    assert first == again == Capacity(40.0, 3200) and calls == [1]
    stored = json.loads(path.read_text())
    assert list(stored.values()) == [{"cpu_us_per_event": 40.0, "events_measured": 3200}]
    # Another labkit, Python or host is another key; a damaged cache is measured again.
    path.write_text("{not json")
    assert asyncio.run(process_capacity(path)) == first and calls == [1, 1]


def test_the_cache_lives_in_labkits_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    assert capacity._cache_path() == tmp_path / "capacity.json"


# --- the experiment -----------------------------------------------------------------------


def scripted(
    exp: LoadExperiment, stream_eps: float, cap: float | None, free: int, events: float = 64
) -> LoadExperiment:
    exp._stream_eps, exp._capacity_eps, exp._free_cpus = stream_eps, cap, free
    exp._request_events = events
    return exp


def test_closed_levels_weigh_streams_times_the_warmups_rate() -> None:
    exp = scripted(
        LoadExperiment(LoadSettings(concurrency=[1, 8, 32, 64], requests=64)), 500.0, 10_000, 4
    )
    # c8: 4,000 × 1.2 = 4,800 → 1; c32: 16,000 → 2; c64: 32,000 → 4 (38,400 / 10,000).
    assert [exp.workers_for(lv) for lv in exp.levels()] == [1, 1, 2, 4]
    assert exp.workers_choice(exp.levels()[2]).load_eps == 16_000.0


def test_open_levels_weigh_rate_times_events_capped_by_the_streams_allowed() -> None:
    exp = scripted(
        LoadExperiment(LoadSettings(rate=[10, 200, 400], max_concurrency=16)), 500.0, 5_000, 8, 64
    )
    loads = [exp.workers_choice(lv).load_eps for lv in exp.levels()]
    assert loads == [640.0, 8_000.0, 8_000.0]  # 400 × 64 capped by 16 streams × 500
    assert [exp.workers_for(lv) for lv in exp.levels()] == [1, 2, 2]


def test_a_fixed_workers_setting_is_kept() -> None:
    exp = scripted(LoadExperiment(LoadSettings(concurrency=[1, 8], workers=3)), 500.0, 1.0, 1)
    assert [exp.workers_for(lv) for lv in exp.levels()] == [1, 3]


def test_auto_sizes_each_processs_pool_for_every_stream() -> None:
    exp = LoadExperiment(LoadSettings(concurrency=[4, 64], requests=64))
    assert exp.connections_needed() == 64
    fixed = LoadExperiment(LoadSettings(concurrency=[4, 64], requests=64, workers=4))
    assert fixed.connections_needed() == 16


def _fake_run(tmp_path: Path, interval_ms: float, monkeypatch: pytest.MonkeyPatch) -> Any:
    config = parse_config(
        {
            "name": "auto",
            "providers": [
                {
                    "id": "fake",
                    "kind": "fake",
                    "schedule": {
                        "first_token_ms": 0,
                        "token_interval_ms": interval_ms,
                        "tokens": 8,
                    },
                }
            ],
            "experiments": [{"kind": "load", "concurrency": [1, 4], "requests": 4}],
        }
    )
    monkeypatch.setattr("labkit.measurement.capacity.os.sched_getaffinity", lambda _: {0, 1, 2, 3})
    runner = prepare_run(config, RunOptions(out_dir=tmp_path))
    return asyncio.run(runner.run())


def test_a_slow_level_is_read_by_one_process_without_calibrating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never() -> Capacity:
        raise AssertionError("a level any process holds needs no calibration")

    monkeypatch.setattr(capacity, "calibrate", never)
    result = _fake_run(tmp_path, 10.0, monkeypatch)  # 100 events/s a stream
    measured = [r for r in result.records if not r.warmup]
    assert measured and {r.tags["workers"] for r in measured} == {"1"}
    c4 = [r for r in measured if r.tags["level"] == "c4"]
    assert {r.tags["workers_free_cpus"] for r in c4} == {4}
    rate = stream_events_per_s(r for r in result.records if r.warmup)
    assert rate is not None and {r.tags["workers_load_eps"] for r in c4} == {round(4 * rate, 1)}
    answer = result.lab.answers[0].answer
    assert "workers: auto read c1 with 1 process (" in answer
    assert "; c4 with 1 process (" in answer and "4 CPUs free)." in answer


def test_a_fast_level_is_weighed_against_the_hosts_capacity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = Capacity(cpu_us_per_event=1e6, events_measured=1)  # 0.5 events/s a process

    async def scripted_capacity(cache: Path | None = None) -> Capacity:
        return cached

    monkeypatch.setattr("labkit.experiments.load.process_capacity", scripted_capacity)
    monkeypatch.setattr("labkit.experiments.load.LoadExperiment.workers_for", _one_process)
    result = _fake_run(tmp_path, 0.0, monkeypatch)  # as fast as the loop goes
    c4 = [r for r in result.records if not r.warmup and r.tags["level"] == "c4"]
    assert {r.tags["workers_capacity_eps"] for r in c4} == {0.5}
    assert all(float(r.tags["workers_load_eps"]) > SURELY_HELD_EPS for r in c4)


def _one_process(self: LoadExperiment, level: Any) -> int:
    """The choice is recorded as made; the run stays in this process (a unit test starts
    no worker processes)."""
    assert self.workers_choice(level).processes == (4 if level.target == 4 else 1)
    return 1
