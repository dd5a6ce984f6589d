"""`labkit.clocksync`: the NTP-style offset with scripted clocks, the record correction, the log."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from labkit.clocksync import (
    ClockOffset,
    HostClock,
    clock_log_name,
    clock_uncertainty_ns,
    driver_start_ns,
    measure_offset,
    offset_from_exchanges,
    read_clock_log,
    record_clock,
    write_clock_log,
)
from labkit.records import RecordClock, RequestRecord
from tests.support.records import make_record

pytestmark = pytest.mark.unit

US = 1_000
MS = 1_000_000


class ScriptedLink:
    """A driver and a remote clock joined by a link with scripted one-way delays.

    The true time is `now`; the driver reads `now`, the remote reads
    `now * (1 + drift) + skew`. Each exchange takes its delays out and back from the lists.
    """

    def __init__(
        self, skew_ns: int, out_ns: list[int], back_ns: list[int], drift: float = 0.0
    ) -> None:
        self.now = 1_000_000 * MS
        self.skew_ns = skew_ns
        self.drift = drift
        self.out = list(out_ns)
        self.back = list(back_ns)

    def driver(self) -> int:
        return self.now

    def remote_reading(self) -> int:
        return int(self.now * (1 + self.drift)) + self.skew_ns

    async def remote_now(self) -> int:
        self.now += self.out.pop(0)
        reading = self.remote_reading()
        self.now += self.back.pop(0)
        return reading

    def true_offset(self) -> int:
        """driver − remote at this moment."""
        return self.now - self.remote_reading()


def measure(link: ScriptedLink, samples: int) -> ClockOffset:
    return asyncio.run(measure_offset(link.remote_now, samples=samples, clock=link.driver))


def test_symmetric_delays_recover_the_skew_exactly() -> None:
    link = ScriptedLink(skew_ns=-7 * MS, out_ns=[200 * US] * 4, back_ns=[200 * US] * 4)
    est = measure(link, 4)
    assert est.offset_ns == 7 * MS
    assert est.rtt_ns == 400 * US
    assert est.uncertainty_ns == 200 * US
    assert est.samples == 4


def test_asymmetric_delays_bias_the_estimate_but_stay_within_the_uncertainty() -> None:
    # Out 900 µs, back 100 µs: the remote read at +900 µs looks like +500 µs.
    link = ScriptedLink(skew_ns=3 * MS, out_ns=[900 * US], back_ns=[100 * US])
    est = measure(link, 1)
    assert est.offset_ns == -3 * MS - 400 * US
    assert est.uncertainty_ns == 500 * US
    assert abs(est.offset_ns - (-3 * MS)) <= est.uncertainty_ns


def test_the_shortest_round_trip_is_the_one_kept() -> None:
    # Queueing delays on most exchanges; one quick exchange near the end.
    out = [5 * MS, 3 * MS, 8 * MS, 50 * US, 2 * MS]
    back = [1 * MS, 6 * MS, 2 * MS, 70 * US, 4 * MS]
    link = ScriptedLink(skew_ns=123 * MS, out_ns=out, back_ns=back)
    est = measure(link, 5)
    assert est.rtt_ns == 120 * US
    assert est.uncertainty_ns == 60 * US
    assert est.offset_ns == -123 * MS + (120 * US // 2 - 50 * US)
    assert abs(est.offset_ns + 123 * MS) <= est.uncertainty_ns


@pytest.mark.parametrize("seed", range(20))
def test_random_delays_never_put_the_truth_outside_the_bound(seed: int) -> None:
    rng = random.Random(seed)
    n = 16
    link = ScriptedLink(
        skew_ns=rng.randint(-(10**12), 10**12),
        out_ns=[rng.randint(10 * US, 20 * MS) for _ in range(n)],
        back_ns=[rng.randint(10 * US, 20 * MS) for _ in range(n)],
    )
    est = measure(link, n)
    assert abs(est.offset_ns - link.true_offset()) <= est.uncertainty_ns


def test_exchanges_as_tuples_and_their_errors() -> None:
    est = offset_from_exchanges([(100, 1_050, 200), (300, 1_240, 320)])
    assert est == ClockOffset(offset_ns=310 - 1_240, uncertainty_ns=10, rtt_ns=20, samples=2)
    with pytest.raises(ValueError, match="no clock exchange"):
        offset_from_exchanges([])
    with pytest.raises(ValueError, match="before it was sent"):
        offset_from_exchanges([(200, 0, 100)])
    with pytest.raises(ValueError, match="at least 1"):
        asyncio.run(measure_offset(lambda: asyncio.sleep(0, 0), samples=0))


def test_an_odd_round_trip_rounds_the_uncertainty_up() -> None:
    est = offset_from_exchanges([(0, 0, 3)])
    assert est.uncertainty_ns == 2  # the remote read may be 1.5 ns either side of 1


def _remote(record: RequestRecord, clock: RecordClock | None, host: str | None) -> RequestRecord:
    return record.model_copy(update={"clock": clock, "host": host})


def test_a_record_without_a_clock_reads_as_before() -> None:
    rec = make_record(experiment="load").model_copy(update={"t_start_mono_ns": 5 * MS})
    assert rec.clock is None and rec.host is None
    assert driver_start_ns(rec) == 5 * MS
    assert clock_uncertainty_ns(rec) is None
    assert driver_start_ns(make_record(experiment="load")) is None


def test_a_skewed_host_is_corrected_onto_the_driver_clock() -> None:
    link = ScriptedLink(skew_ns=-40 * MS, out_ns=[300 * US] * 8, back_ns=[100 * US] * 8)
    before = measure(link, 8)
    remote_start = link.remote_reading()  # the host stamps a request's t_start
    true_driver_start = link.driver()
    rec = _remote(
        make_record(experiment="load").model_copy(update={"t_start_mono_ns": remote_start}),
        record_clock(before),
        "node-b",
    )
    start = driver_start_ns(rec)
    assert start is not None
    assert abs(start - true_driver_start) <= before.uncertainty_ns
    assert clock_uncertainty_ns(rec) == before.uncertainty_ns
    assert RequestRecord.from_json_line(rec.to_json_line()) == rec


def test_drift_between_before_and_after_widens_the_uncertainty() -> None:
    # The remote clock runs 100 ppm fast: over a 10 s level the offset moves by 1 ms.
    link = ScriptedLink(skew_ns=0, out_ns=[50 * US] * 8, back_ns=[50 * US] * 8, drift=1e-4)
    link.now = 0
    before = measure(link, 4)
    link.now += 5_000 * MS
    mid_remote, mid_driver = link.remote_reading(), link.driver()
    link.now += 5_000 * MS
    after = measure(link, 4)
    drift = after.offset_ns - before.offset_ns
    assert abs(drift + 1 * MS) <= 100 * US  # the remote gained about a millisecond
    rec = _remote(
        make_record(experiment="load").model_copy(update={"t_start_mono_ns": mid_remote}),
        record_clock(before, after),
        "node-b",
    )
    bound = clock_uncertainty_ns(rec)
    assert bound is not None
    assert bound >= abs(drift) // 2 > 10 * before.uncertainty_ns
    start = driver_start_ns(rec)
    assert start is not None
    assert abs(start - mid_driver) <= bound
    # Corrected with the before estimate alone, the middle of the level is off by half a ms.
    before_only = _remote(rec, record_clock(before), "node-b")
    only = driver_start_ns(before_only)
    assert only is not None and abs(only - mid_driver) > 400 * US


def test_the_clock_log_round_trips_and_skips_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / clock_log_name("load/a b")
    assert path.name.startswith("clock-load_a_b") and path.suffix == ".jsonl"
    first = HostClock(
        host="node-a",
        level="c4",
        before=ClockOffset(offset_ns=10, uncertainty_ns=2, rtt_ns=4, samples=16),
        after=ClockOffset(offset_ns=14, uncertainty_ns=3, rtt_ns=6, samples=16),
        experiment="load",
    )
    second = HostClock(
        host="node-b",
        level="c4",
        before=ClockOffset(offset_ns=-5, uncertainty_ns=1, rtt_ns=2, samples=16),
    )
    write_clock_log(path, [first])
    write_clock_log(path, [second])
    with path.open("a", encoding="utf-8") as f:
        f.write('{"host": "node-c", "lev')
    assert read_clock_log(path) == [first, second]
    assert first.drift_ns == 4 and second.drift_ns is None
    assert json.loads(path.read_text().splitlines()[1])["after"] is None
    assert read_clock_log(tmp_path / "missing.jsonl") == []
