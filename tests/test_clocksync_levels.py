"""A load level measured on two hosts, one with a skewed clock: its span, rates and SLO
goodput come out on the driver's clock, and a level whose clock is coarse says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.analysis.levels import Level, level_figures
from labkit.clocksync import (
    ClockOffset,
    HostClock,
    clock_note,
    host_clock_uncertainty_ns,
    record_clock,
)
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.figures import LoadFigures
from labkit.records import LabResults, RecordClock, RequestRecord
from labkit.report import write_report
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit

NS = 1_000_000_000
MS = 1_000_000
SKEW_NS = 4_321 * NS  # host b's perf_counter origin: booted long before the driver's host


def _level(clock: RecordClock | None, *, requests: int = 10) -> list[RequestRecord]:
    """A 2 req/s level whose odd requests ran on host b: true starts i/2 s, 100 ms streams."""
    out = []
    for i in range(requests):
        start = 10 * NS + i * NS // 2
        remote = i % 2 == 1
        rec = make_record(
            experiment="load", ttft_ms=40.0, e2e_ms=100.0, n_events=0, tags={"level": "r2"}
        )
        out.append(
            rec.model_copy(
                update={
                    "t_start_mono_ns": start + SKEW_NS if remote else start,
                    "host": "b" if remote else None,
                    "clock": clock if remote else None,
                }
            )
        )
    return out


def _corrected(uncertainty_ns: int = 150_000, drift_ns: int = 0) -> RecordClock:
    before = ClockOffset(offset_ns=-SKEW_NS, uncertainty_ns=uncertainty_ns, rtt_ns=0, samples=16)
    after = ClockOffset(
        offset_ns=-SKEW_NS + drift_ns, uncertainty_ns=uncertainty_ns, rtt_ns=0, samples=16
    )
    return record_clock(before, after)


def test_a_skewed_host_is_put_on_the_driver_clock_for_span_and_rates() -> None:
    settings = LoadSettings(rate=[2.0], slo={"ttft_ms_p90": 50})
    row = level_figures(
        Level(0, "rate", 2.0), _level(_corrected()), "constant", slos=settings.slos()
    )
    assert row.duration_s == pytest.approx(4.6)  # first start to last end: 4.5 s + 100 ms
    assert row.achieved_rate_rps == pytest.approx(2.0)
    assert row.completed_rps == pytest.approx(10 / 4.6)
    assert row.slo is not None and row.slo.goodput_rps == pytest.approx(10 / 4.6)
    assert row.hosts == 2 and row.clock_uncertainty_ms == pytest.approx(0.15)
    # Read as raw stamps, host b's requests look 72 minutes late: the level falls apart.
    raw = level_figures(Level(0, "rate", 2.0), _level(None), "constant")
    assert raw.duration_s is not None and raw.duration_s > 4000
    assert raw.hosts == 2 and raw.clock_uncertainty_ms is None


def test_a_level_on_the_driver_alone_reads_as_before() -> None:
    records = [
        r.model_copy(update={"t_start_mono_ns": 10 * NS + i * NS // 2})
        for i, r in enumerate(_level(None))
    ]
    row = level_figures(
        Level(0, "rate", 2.0), [r.model_copy(update={"host": None}) for r in records]
    )
    assert row.hosts is None and row.clock_uncertainty_ms is None
    assert row.duration_s == pytest.approx(4.6)


def test_a_coarse_clock_is_said_in_the_answer_and_the_report(tmp_path: Path) -> None:
    # 9 ms of drift over the level: ±4.65 ms against a 40 ms median TTFT is above a tenth.
    records = _level(_corrected(uncertainty_ns=150_000, drift_ns=9 * MS))
    answer = LoadExperiment(LoadSettings(rate=[2.0], requests=10)).analyze("p", "m", records)
    assert isinstance(answer.figures, LoadFigures)
    (row,) = answer.figures.levels
    assert row.clock_uncertainty_ms == pytest.approx(4.65)
    sentence = "the hosts' clocks line up only within ±4.65 ms"
    assert sentence in answer.answer and "median TTFT (40 ms)" in answer.answer
    run = write_run(tmp_path / "run", records, lab=LabResults(run_id="run", answers=[answer]))
    md = write_report(run).md.read_text(encoding="utf-8")
    assert md.count(sentence) == 2  # in the level's answer and under the load table
    head = next(line for line in md.splitlines() if line.startswith("| level"))
    row = next(line for line in md.splitlines() if line.startswith("| 2 req/s"))
    cells = [[c.strip() for c in line.strip(" |").split("|")] for line in (head, row)]
    assert cells[0][-2:] == ["hosts", "clock ± ms"] and cells[1][-2:] == ["2", "4.650"]
    fine = LoadExperiment(LoadSettings(rate=[2.0], requests=10)).analyze(
        "p", "m", _level(_corrected())
    )
    assert "clocks line up" not in fine.answer


@pytest.mark.parametrize(
    ("uncertainty_ms", "ttft_ms", "said"),
    [(None, 40.0, False), (4.0, 40.0, False), (4.01, 40.0, True), (1.0, None, False)],
)
def test_the_clock_note_threshold(
    uncertainty_ms: float | None, ttft_ms: float | None, said: bool
) -> None:
    assert bool(clock_note("2 req/s", uncertainty_ms, ttft_ms)) is said


def test_the_drift_in_the_clock_log_reaches_a_level_whose_records_have_only_before() -> None:
    # The Ray executor writes records as they arrive, before the closing exchange: their
    # `clock` has no after estimate; the clock log has it.
    before = ClockOffset(offset_ns=-SKEW_NS, uncertainty_ns=150_000, rtt_ns=300_000, samples=16)
    after = ClockOffset(
        offset_ns=-SKEW_NS + 12 * MS, uncertainty_ns=100_000, rtt_ns=200_000, samples=16
    )
    records = _level(record_clock(before))
    entry = HostClock(host="b", level="r2", before=before, after=after, experiment="load")
    assert host_clock_uncertainty_ns(entry) == 150_000 + 6 * MS
    assert host_clock_uncertainty_ns(HostClock("b", "r2", before)) == 150_000
    exp = LoadExperiment(LoadSettings(rate=[2.0], requests=10))
    quiet = exp.analyze("p", "m", records)
    assert "clocks line up" not in quiet.answer
    exp.host_clocks = [entry, HostClock("b", "r9", before, after)]  # r9: another level's
    told = exp.analyze("p", "m", records)
    assert isinstance(told.figures, LoadFigures)
    assert told.figures.levels[0].clock_uncertainty_ms == pytest.approx(6.15)
    assert "the hosts' clocks line up only within ±6.15 ms" in told.answer
