"""The `load` experiment: arrival schedules, pacing, the loop-lag self-check, worker processes.

Schedules and pacing run on a fake clock; the rest runs labkit's real runner against the
fake schedule served on 127.0.0.1 (`labkit.fakeserver`), worker processes included.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.levels import Level, level_figures
from labkit.analysis.selfcheck import (
    CLIENT_BOUND_FIX,
    CPU_WAITED_NOTE,
    SATURATED_CPU_SHARE,
    client_bound_notes,
)
from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.experiments.pacing import arrival_offsets_ns, closed_loop, open_loop
from labkit.providers.fake import FakeSchedule
from labkit.records import RequestRecord
from labkit.runner import RunOptions, prepare_run
from labkit.runner.run import RunResult
from labkit.truth.process import TruthServer
from labkit.wire import loopclock
from labkit.wording import CLIENT_BOUND_MARK
from tests.support.processes import children_of
from tests.support.records import most_in_flight
from tests.support.signals import default_sigint

NS = 1_000_000_000

# --- Schedules ---------------------------------------------------------------------------


@pytest.mark.unit
def test_seeded_poisson_schedule_is_within_2_percent_of_the_rate() -> None:
    offsets = arrival_offsets_ns(10.0, "poisson", seed=7, max_requests=1000)
    assert len(offsets) == 1000 and offsets[0] == 0
    achieved = (len(offsets) - 1) / (offsets[-1] / NS)
    assert abs(achieved / 10.0 - 1) < 0.02, achieved
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    # Exponential gaps: the standard deviation equals the mean (a constant schedule has 0).
    assert 0.9 < statistics.pstdev(gaps) / statistics.mean(gaps) < 1.1
    assert offsets == arrival_offsets_ns(10.0, "poisson", seed=7, max_requests=1000)
    assert offsets != arrival_offsets_ns(10.0, "poisson", seed=8, max_requests=1000)


@pytest.mark.unit
def test_constant_schedule_and_duration_bound() -> None:
    offsets = arrival_offsets_ns(4.0, "constant", seed=0, duration_s=2.0)
    assert offsets == [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000,
                       1_250_000_000, 1_500_000_000, 1_750_000_000]  # fmt: skip
    assert len(arrival_offsets_ns(4.0, "constant", seed=0, duration_s=2.0, max_requests=3)) == 3
    with pytest.raises(ValueError):
        arrival_offsets_ns(4.0, "constant", seed=0)


class FakeClock:
    """A clock whose sleeps always oversleep by `late_ns`, like a busy event loop."""

    def __init__(self, late_ns: int) -> None:
        self.now = 10 * NS
        self.late_ns = late_ns

    def __call__(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)  # the requests already due start first, as in a real loop
        self.now += int(seconds * NS) + self.late_ns


@pytest.mark.unit
def test_open_loop_on_absolute_times_does_not_drift() -> None:
    """Every wake-up is 0.7 ms late; relative sleeps would pile that up (700 ms over 1,000
    requests); absolute due times keep each request within one wake-up of its due time."""
    clock = FakeClock(late_ns=700_000)
    offsets = arrival_offsets_ns(100.0, "constant", seed=0, max_requests=1000)
    sent: list[tuple[int, float]] = []

    async def send(planned: Any, queue_ms: float) -> None:
        sent.append((clock(), queue_ms))

    t0 = clock()

    async def main() -> None:
        await open_loop(enumerate(offsets), t0, lambda i: i, send, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]

    asyncio.run(main())
    assert len(sent) == 1000
    lateness_ms = [(t - (t0 + off)) / 1e6 for (t, _), off in zip(sent, offsets, strict=True)]
    assert max(lateness_ms) <= 0.7 + 1e-6, max(lateness_ms)
    last_gap = (sent[-1][0] - t0) / NS
    assert abs(last_gap - 9.99) < 0.001  # 999 gaps of 10 ms, no drift
    # The lateness is reported as the request's queue time, not hidden.
    assert all(abs(q - lat) < 1e-6 for (_, q), lat in zip(sent, lateness_ms, strict=True))


@pytest.mark.unit
def test_closed_loop_keeps_each_stream_busy_and_stops_at_the_deadline() -> None:
    in_flight = 0
    most = 0
    done: list[int] = []

    async def send(planned: Any, queue_ms: float) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0)  # the other streams start before this request ends
        in_flight -= 1
        done.append(planned)

    asyncio.run(closed_loop([range(0, 12, 3), range(1, 12, 3), range(2, 12, 3)], lambda i: i, send))  # type: ignore[arg-type]
    assert sorted(done) == list(range(12)) and most == 3

    done.clear()
    clock_ns = [0]

    async def slow(planned: Any, queue_ms: float) -> None:
        clock_ns[0] += NS  # each request "takes" one second
        done.append(planned)

    asyncio.run(
        closed_loop([range(100)], lambda i: i, slow, deadline_ns=5 * NS, clock=lambda: clock_ns[0])
    )  # type: ignore[arg-type]
    assert done == [0, 1, 2, 3, 4]


# --- Settings ----------------------------------------------------------------------------


def _config(
    experiment: dict[str, Any], base_url: str = "http://127.0.0.1:9/v1", **provider: Any
) -> Any:
    return parse_config(
        {
            "name": "load",
            "providers": [
                {
                    "id": "s",
                    "kind": "openai_compatible",
                    "model": "m",
                    "base_url": base_url,
                    **provider,
                }
            ],
            "experiments": [{"kind": "load", **experiment}],
        }
    )


@pytest.mark.unit
def test_the_documented_shapes_are_accepted() -> None:
    cfg = parse_config(
        {
            "name": "x",
            "providers": [
                {
                    "id": "s",
                    "kind": "openai_compatible",
                    "model": "m",
                    "base_url": "http://127.0.0.1:9/v1",
                }
            ],
            "experiments": [
                {
                    "kind": "load",
                    "concurrency": [1, 8, 32],
                    "requests": 64,
                    "prompts": ["Explain what a token is."],
                    "params": {"max_tokens": 128},
                },
                {"kind": "load", "rate": [2, 8], "arrival": "poisson", "duration_s": 30, "seed": 7},
            ],
        }
    )
    closed, opened = (LoadExperiment(s) for s in cfg.experiments)
    assert [lv.label for lv in closed.levels()] == ["c1", "c8", "c32"]
    assert [lv.title for lv in opened.levels()] == ["2 req/s", "8 req/s"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"concurrency": [1], "rate": [2]}, "not both"),
        ({}, "neither"),
        ({"concurrency": [1], "max_concurrency": 4}, "rate` levels only"),
        ({"rate": [1], "input_tokens": [50, 10]}, "min <= max"),
        ({"concurrency": [0]}, "greater than 0"),
    ],
)
def test_bad_load_entries_get_one_clear_message(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(entry)


@pytest.mark.unit
def test_more_streams_than_requests_is_refused_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="raise `requests`"):
        prepare_run(_config({"concurrency": [64], "requests": 8}), RunOptions(out_dir=tmp_path))
    assert not any(tmp_path.iterdir())


@pytest.mark.unit
def test_auto_workers_without_a_measured_rate_follow_streams_and_cpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("labkit.measurement.capacity.os.sched_getaffinity", lambda _: {0, 1, 2, 3})
    exp = LoadExperiment(LoadSettings(concurrency=[1, 16, 17, 64, 200], requests=200))
    assert [exp.workers_for(lv) for lv in exp.levels()] == [1, 1, 2, 4, 4]
    fixed = LoadExperiment(LoadSettings(concurrency=[1, 8], requests=8, workers=3))
    assert [fixed.workers_for(lv) for lv in fixed.levels()] == [1, 3]
    opened = LoadExperiment(LoadSettings(rate=[5]))
    assert opened.workers_for(opened.levels()[0]) == 1


@pytest.mark.unit
def test_synthetic_prompts_are_sized_and_reproducible() -> None:
    exp = LoadExperiment(
        LoadSettings(concurrency=[2], input_tokens=[100, 200], output_tokens=32, seed=3)
    )
    level = exp.levels()[0]
    a = exp.request(level, 5, "run")
    b = exp.request(level, 5, "other")
    assert a.request.messages == b.request.messages
    assert a.request.params["max_tokens"] == 32
    n = int(a.tags["target_input_tokens"])
    assert 100 <= n <= 200
    words = len(a.request.messages[-1]["content"].split()) - 1
    assert abs(words * 1.3 - n) < 2  # default calibration: 1.3 tokens per word
    assert exp.request(level, 6, "run").request.messages != a.request.messages


# --- Real sockets: the runner, the self-check and worker processes -------------------------

SCHEDULE = FakeSchedule(first_token_ms=20, token_interval_ms=4, tokens=16)


def _run(
    experiment: dict[str, Any],
    tmp_path: Path,
    *,
    during: Callable[[], Any] | None = None,
    schedule: FakeSchedule = SCHEDULE,
    transport: str = "auto",
) -> RunResult:
    async def main() -> RunResult:
        with TruthServer.of(schedule) as server:
            config = _config(experiment, server.base_url, transport=transport)
            runner = prepare_run(config, RunOptions(out_dir=tmp_path))
            extra = asyncio.create_task(during()) if during else None
            try:
                return await runner.run()
            finally:
                if extra:
                    extra.cancel()

    return loopclock.run(main())  # as `labkit run` does


def _levels(result: RunResult) -> list[dict[str, Any]]:
    (answer,) = [a for a in result.lab.answers if a.experiment == "load"]
    return list(answer.figures.levels)


@pytest.mark.integration
def test_load_levels_through_the_runner(tmp_path: Path) -> None:
    result = _run({"concurrency": [1, 4], "requests": 8, "warmup": 1}, tmp_path)
    assert result.status == "completed"
    rows = _levels(result)
    assert [r.level for r in rows] == ["c1", "c4"]
    records = [r for r in result.records if not r.warmup]
    for row in rows:
        assert row.ok == 8 and row.failed == 0
        # The schedule is a floor (absolute times from when the server starts the reply, and a
        # sleep never returns early): 20 ms to the first token, token 16 at 20 + 15 × 4 ms.
        # How far above it a level lands is the host's (`make bench-load` measures it).
        assert row.ttft_ms_p50 is not None and row.ttft_ms_p50 >= 20
        assert row.decode_ms_per_token_p50 is not None and row.decode_ms_per_token_p50 > 0
        level = [r for r in records if r.tags["level"] == row.level]
        assert all((r.client.last_token_ms or 0) >= 20 + 15 * 4 for r in level)
        # A closed loop of n streams never has more than n requests in flight.
        assert most_in_flight(level) <= int(row.target)
        assert row.mean_in_flight is not None and row.mean_in_flight <= row.target + 1e-9
    assert most_in_flight([r for r in records if r.tags["level"] == "c1"]) == 1
    print(
        f"\nc4 over c1: {rows[1].output_tokens_per_s / rows[0].output_tokens_per_s:.2f}x the "
        f"tokens/s, {rows[1].mean_in_flight:.2f} in flight on average"
    )
    assert len(records) == 16 and all(r.t_start_mono_ns for r in records)
    assert {r.client.queue_ms for r in records} == {0.0}
    assert all(r.client.stamp_source is not None for r in records)
    on_disk = (result.folder.records_path).read_text().splitlines()
    assert len(on_disk) == len(result.records) == 17


@pytest.mark.integration
def test_open_loop_reports_target_and_achieved_rate(tmp_path: Path) -> None:
    result = _run({"rate": [25], "arrival": "constant", "requests": 12, "warmup": 0}, tmp_path)
    (row,) = _levels(result)
    assert row.ok == 12 and row.target == 25
    # Whatever the host: the achieved rate is measured and said beside the target, and each
    # request's wait past its due time is its queue time, never negative, never in TTFT.
    # (That late wake-ups do not accumulate is tested on a scripted clock above.)
    assert row.achieved_rate_rps is not None and row.achieved_rate_rps > 0
    records = result.records
    assert all(r.client.queue_ms is not None and r.client.queue_ms >= 0 for r in records)
    assert row.queue_ms_max == pytest.approx(max(r.client.queue_ms or 0 for r in records))
    print(f"\nachieved {row.achieved_rate_rps:.2f} req/s of 25, queue max {row.queue_ms_max} ms")
    (answer,) = result.lab.answers
    assert "median TTFT at 25 req/s" in answer.answer, answer.answer


async def _hog(busy_s: float = 0.008) -> None:
    while True:  # labkit's own thread busy 8 ms (`busy_s`) out of every 10
        t = time.perf_counter()
        while time.perf_counter() - t < busy_s:
            pass
        await asyncio.sleep(0.01 - busy_s)


@pytest.mark.integration
def test_a_blocked_event_loop_is_flagged_client_bound(tmp_path: Path) -> None:
    slow = FakeSchedule(first_token_ms=20, token_interval_ms=10, tokens=20)
    result = _run(
        {"concurrency": [2], "requests": 4, "warmup": 1},
        tmp_path,
        during=_hog,
        schedule=slow,
        transport="httpx",  # stamped in user space: late by the hog
    )
    (row,) = _levels(result)
    assert row.client_bound and row.stamp_lateness_ms_p99 > 2.0
    (answer,) = result.lab.answers
    assert CLIENT_BOUND_MARK in answer.answer
    # labkit's own thread was the busy one, so the fix is more processes — unless the whole
    # machine was saturated by others meanwhile (labkit then got under 60% of a CPU).
    busy = row.labkit_cpu_share >= SATURATED_CPU_SHARE
    assert (CLIENT_BOUND_FIX if busy else CPU_WAITED_NOTE) in answer.answer
    notes = client_bound_notes(result.records)
    assert len(notes) == 1 and "s · load · c2" in notes[0]


@contextlib.contextmanager
def fake_server_process(*args: str) -> Iterator[str]:
    """`labkit fake-server` in a process of its own, so its work is not on labkit's loop."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "fake-server", "--port", "0", "--log", os.devnull, *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


@pytest.mark.integration
def test_a_busy_loop_is_no_flag_while_the_kernel_stamps(tmp_path: Path) -> None:
    # labkit's loop busy 5 ms of every 10, tokens 20 ms apart from a server of its own: each
    # read comes late but still brings one event, whose kernel stamp is its arrival.
    schedule = ("--first-token-ms", "20", "--token-interval-ms", "20", "--tokens", "10")
    with fake_server_process(*schedule) as url:
        config = _config({"concurrency": [2], "requests": 4, "warmup": 1}, url)

        async def main() -> RunResult:
            hog = asyncio.create_task(_hog(0.005))
            try:
                return await prepare_run(config, RunOptions(out_dir=tmp_path)).run()
            finally:
                hog.cancel()

        result = loopclock.run(main())
    (row,) = _levels(result)
    records = [r for r in result.records if not r.warmup]
    assert {r.client.stamp_source for r in records} == {"kernel"}
    # labkit read the streams late (the kernel's stamp to labkit's read); the stamps were
    # not late: no flag.
    assert max(r.client.read_lag_ms_p99 or 0.0 for r in records) > 1.0
    assert not row.client_bound, [r.client.stamp_lateness_ms_p99 for r in records]


@pytest.mark.integration
def test_a_free_event_loop_is_not_flagged(tmp_path: Path) -> None:
    # Short streams (about 100 ms, 20 probe samples each): a free loop is not judged by
    # another tenant's hiccup on a shared machine.
    schedule = ("--first-token-ms", "20", "--token-interval-ms", "10", "--tokens", "8")
    with fake_server_process(*schedule) as url:
        # One warm-up: a process's first request pays lazy imports on the loop (tens of ms).
        config = _config({"concurrency": [1, 2], "requests": 8, "warmup": 1}, url)
        result = asyncio.run(prepare_run(config, RunOptions(out_dir=tmp_path)).run())
    for row in _levels(result):
        assert not row.client_bound, [r.client.loop_lag_ms for r in result.records]
    assert client_bound_notes(result.records) == []


def _fingerprint(records: list[RequestRecord]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            r.plan_key,
            r.prompt_id,
            r.usage.output_tokens,
            r.stop_reason,
            r.output_text,
            r.error is None,
            r.tags["level"],
            len(r.client.event_offsets_ms),
        )
        for r in records
        if not r.warmup
    )


@pytest.mark.integration
def test_worker_processes_produce_the_same_records_as_one_process(tmp_path: Path) -> None:
    experiment = {"concurrency": [1, 4], "requests": 8, "warmup": 1, "prompts": ["a", "b", "c"]}
    one = _run({**experiment, "workers": 1}, tmp_path / "one")
    before = time.perf_counter_ns()
    two = _run({**experiment, "workers": 2}, tmp_path / "two")
    after = time.perf_counter_ns()
    assert _fingerprint(one.records) == _fingerprint(two.records)
    assert len(_fingerprint(two.records)) == 16
    c4 = [r for r in two.records if r.tags.get("level") == "c4" and not r.warmup]
    assert {r.tags["workers"] for r in c4} == {"2"}
    # Every worker warmed up on its own, and those records are kept as warm-ups.
    assert sum(r.warmup for r in two.records) == 1 + 2
    # Everything went into the one run folder, and the records line up on one clock.
    assert len(two.folder.records_path.read_text().splitlines()) == len(two.records)
    # One clock: every worker's starts lie within this process's own reads of it around the
    # run (a clock per process would put them anywhere).
    assert all(before < (r.t_start_mono_ns or 0) < after for r in two.records)
    assert (two.folder.path / "worker-logs").is_dir()
    rows = _levels(two)
    assert rows[1].workers == 2 and rows[1].ok == 8


@pytest.mark.unit
def test_level_figures_of_an_empty_level() -> None:
    row = level_figures(Level(0, "concurrency", 4), [])
    assert row.ok == 0 and row.output_tokens_per_s is None and not row.client_bound


# --- Ctrl-C and resume -------------------------------------------------------------------


@pytest.mark.integration
def test_ctrl_c_in_a_multi_process_level_keeps_every_record_and_stops_the_workers(
    tmp_path: Path,
) -> None:
    schedule = ("--first-token-ms", "20", "--token-interval-ms", "50", "--tokens", "40")
    with fake_server_process(*schedule) as url:
        cfg = tmp_path / "load.yaml"
        cfg.write_text(
            "name: cc\n"
            f"providers: [{{id: s, kind: openai_compatible, model: m, base_url: '{url}'}}]\n"
            "experiments: [{kind: load, concurrency: [4], requests: 400, workers: 2, "
            "warmup: 1}]\n"
        )
        out = tmp_path / "runs"
        proc = subprocess.Popen(
            [sys.executable, "-m", "labkit", "run", str(cfg), "--out", str(out), "--no-report"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_sigint,  # it gets SIGINT even where the tests run in background
        )
        deadline = time.monotonic() + 60
        records_path = None
        while time.monotonic() < deadline:
            found = list(out.glob("*/records.jsonl")) if out.exists() else []
            if found and len(found[0].read_text().splitlines()) >= 8:  # warm-ups + a few
                records_path = found[0]
                break
            time.sleep(0.1)
        assert records_path is not None, "the level did not start"
        workers = children_of(proc.pid)
        assert len(workers) == 2
        time.sleep(0.5)  # the streams end together and restart together: cut them mid-stream
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    time.sleep(0.3)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "a worker outlived it"
    lines = records_path.read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines]
    cancelled = [r for r in records if r.error is not None and r.error.kind == "cancelled"]
    # The four streams in flight were cut, and their partial records were still written.
    assert len(cancelled) == 4
    assert all(r.tags.get("workers") == "2" for r in cancelled)
    assert any(r.client.ttft_ms is not None for r in cancelled)
    assert len({r.record_id for r in records}) == len(records)


@pytest.mark.integration
def test_resume_runs_again_only_the_level_that_was_cut_short(tmp_path: Path) -> None:
    from labkit.runner import prepare_resume

    first = _run({"concurrency": [1, 2], "requests": 4, "warmup": 0}, tmp_path)
    path = first.folder.records_path
    lines = path.read_text().splitlines()
    keep = [ln for ln in lines if '"level":"c2"' not in ln]
    cut = [ln for ln in lines if '"level":"c2"' in ln][:2]
    path.write_text("\n".join(keep + cut) + "\n")  # the run "died" halfway through c2

    async def resume() -> RunResult:
        with TruthServer.of(SCHEDULE) as server:
            runner = prepare_resume(first.folder.path)
            # The new server has a new port: point the provider at it.
            settings = runner.config.providers[0].model_copy(update={"base_url": server.base_url})
            runner.config = runner.config.model_copy(update={"providers": [settings]})
            return await runner.run()

    second = asyncio.run(resume())
    records = [RequestRecord.from_json_line(ln) for ln in path.read_text().splitlines()]
    c1 = [r for r in records if r.tags.get("level") == "c1"]
    c2 = [r for r in records if r.tags.get("level") == "c2"]
    assert len(c1) == 4  # complete: not sent again
    assert len(c2) == 2 + 4  # the cut pass stays on disk, a full pass follows
    assert len({r.tags["level_run"] for r in c2}) == 2
    rows = _levels(second)
    assert rows[1].ok == 4 and rows[1].requests == 4  # the answer uses the last pass
