"""`kind: sweep` against the fake server with a known capacity (`slots`), on real sockets.

The schedule: first token after 20 ms, then 8 more tokens 10 ms apart — 100 ms per request
— and 4 slots: the server completes at most 40 requests/s, and holds at most 4 streams
without queueing one. Below capacity TTFT is 20 ms plus whatever the host adds; past it,
requests wait for a slot and TTFT grows. The SLO: TTFT p90 within 60 ms.

Which levels meet the SLO is partly the host's (a busy host adds to every TTFT), so the
probes a sweep takes are too: the tests assert what holds on any host (`tests.support.sweeps`:
each verdict is what its records say, the search brackets and ends) and what the server's
slots and schedule make true whatever the host (it completes at most 40 requests/s; twice
the slots queues half the streams a whole request), never the path of a fast host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.experiments.sweep import SweepSettings
from labkit.figures import LoadFigures, SweepFigures, SweepProbe
from labkit.providers.fake import FakeSchedule
from labkit.records import RequestRecord
from labkit.report import write_report
from labkit.runner import RunOptions, prepare_resume, prepare_run
from labkit.runner.run import RunResult
from labkit.runner.summary import load_tables
from labkit.truth.process import TruthServer
from tests.support.sweeps import check_sweep

pytestmark = pytest.mark.integration

SLOTS = 4
SCHEDULE = FakeSchedule(first_token_ms=20, token_interval_ms=10, tokens=9, slots=SLOTS)
CAPACITY_RPS = SLOTS / 0.100
SLO = {"ttft_ms_p90": 60}
ROOT = Path(__file__).resolve().parents[2]


def _config(experiment: dict[str, Any], base_url: str) -> Any:
    return parse_config(
        {
            "name": "sweep",
            "providers": [
                {"id": "s", "kind": "openai_compatible", "model": "m", "base_url": base_url}
            ],
            "experiments": [{"warmup": 0, "slo": SLO, **experiment}],
        }
    )


def _settings(experiment: dict[str, Any]) -> SweepSettings:
    (settings,) = _config(experiment, "http://127.0.0.1:9/v1").experiments
    assert isinstance(settings, SweepSettings)
    return settings


def _run(experiment: dict[str, Any], tmp_path: Path) -> RunResult:
    async def main() -> RunResult:
        with TruthServer.of(SCHEDULE) as server:
            runner = prepare_run(_config(experiment, server.base_url), RunOptions(out_dir=tmp_path))
            return await runner.run()

    return asyncio.run(main())


def test_slots_queue_requests_past_capacity(tmp_path: Path) -> None:
    result = _run(
        {"kind": "load", "concurrency": [SLOTS, 2 * SLOTS], "requests": 40},
        tmp_path,
    )
    (answer,) = result.lab.answers
    assert isinstance(answer.figures, LoadFigures)
    within, past = answer.figures.levels
    # Twice the slots: half the streams wait a whole request (100 ms) for a slot, and the
    # server completes at most 40 requests/s however fast the client.
    assert past.ttft_ms_p50 is not None and past.ttft_ms_p50 > 100
    assert past.completed_rps is not None and past.completed_rps < 1.1 * CAPACITY_RPS
    assert past.slo is not None and past.slo.verdict == "fail"
    # Within the slots nothing queues; whether its TTFTs meet the SLO is the host's: the
    # verdict is what its records say, and the answer says where goodput peaked.
    assert within.slo is not None and within.slo.goodput_rps is not None
    records = [r for r in result.records if r.tags.get("level") == within.level]
    met = sum(r.error is None and (r.client.ttft_ms or 1e9) <= 60 for r in records)
    assert within.slo.good == met and within.slo.requests == len(records) == 40
    # 40 of 40 within the bound clear 90 % at 95 %; 31 or fewer fall below it.
    assert within.slo.verdict == ("pass" if met == 40 else "fail" if met <= 31 else "undecided")
    assert past.slo.goodput_rps is not None
    best = SLOTS if within.slo.goodput_rps >= past.slo.goodput_rps else 2 * SLOTS
    assert f"Goodput peaked at concurrency {best}" in answer.answer, answer.answer
    held = within.slo.verdict == "pass"
    assert (f"the SLOs held at concurrency {SLOTS}." in answer.answer) == held, answer.answer


def test_a_concurrency_sweep_finds_the_slot_count_and_resume_reuses_its_probes(
    tmp_path: Path,
) -> None:
    sweep = {"kind": "sweep", "mode": "concurrency", "throughput_concurrency": 16, "requests": 16}
    first = _run(sweep, tmp_path)
    (answer,) = first.lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    print(f"\n{answer.answer}")
    check_sweep(f, first.records, _settings(sweep))
    # 16 and 8 streams queue half or more of their requests a whole request: they fail on any
    # host, so the bisection goes below 8, and no level past the slots is the knee.
    assert [p.level.level for p in f.probes[:3]] == ["c1", "c16", "c8"][: len(f.probes)]
    assert all(p.verdict == "fail" for p in f.probes[1:3])
    assert f.knee is None or f.knee <= SLOTS
    # A level is judged on 16 requests, then twice as many while undecided up to the bound
    # (16 of 16 within it cannot show a p90 holds): each probe's cost is all its passes.
    sizes = [16, 32, 64, 128, 200]
    for p in f.probes:
        assert p.level.requests == sizes[p.passes - 1], p
        assert p.requests_sent == sum(sizes[: p.passes])
        assert p.verdict != "undecided" or p.level.requests == 200

    # The run "died" during its last probe: a resume measures only that probe again.
    path = first.folder.records_path
    lines = path.read_text().splitlines()
    last = f.probes[-1].level.level
    path.write_text("\n".join(ln for ln in lines if f'"level":"{last}"' not in ln) + "\n")
    levels = [p.level.level for p in f.probes]

    def passes() -> dict[str, set[str]]:
        records = [RequestRecord.from_json_line(ln) for ln in path.read_text().splitlines()]
        return {lvl: {str(r.tags["level_run"]) for r in records if r.tags["level"] == lvl}
                for lvl in levels}  # fmt: skip

    before = passes()

    async def resume() -> RunResult:
        with TruthServer.of(SCHEDULE) as server:
            runner = prepare_resume(first.folder.path)
            settings = runner.config.providers[0].model_copy(update={"base_url": server.base_url})
            runner.config = runner.config.model_copy(update={"providers": [settings]})
            return await runner.run()

    second = asyncio.run(resume())
    after = passes()
    # Every finished probe is reused as it was; only the last one ran again.
    assert {k: v for k, v in after.items() if k != last} == {
        k: v for k, v in before.items() if k != last
    }
    assert after[last] and not before[last]
    (again,) = second.lab.answers
    assert isinstance(again.figures, SweepFigures)
    records = [RequestRecord.from_json_line(ln) for ln in path.read_text().splitlines()]
    check_sweep(again.figures, records, _settings(sweep))
    assert [p.level.level for p in again.figures.probes[: len(levels) - 1]] == levels[:-1]


@contextlib.contextmanager
def _server_process() -> Iterator[str]:
    """`labkit fake-server` with the schedule and slots above, in a process of its own: the
    sweep's streams share no event loop with it, so its 40 req/s hold on a busy host."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "fake-server", "--port", "0", "--first-token-ms",
         "20", "--token-interval-ms", "10", "--tokens", "9", "--slots", str(SLOTS),
         "--log", os.devnull],
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/v1", line)
        assert url is not None, f"fake-server did not start: {line!r}"
        yield url.group(0)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_rate_sweep_brackets_a_knee_below_the_servers_capacity(tmp_path: Path) -> None:
    sweep = {
        "kind": "sweep",
        "throughput_concurrency": 16,
        "requests": 40,
        "max_requests_per_level": 160,
        "resolution": 0.1,
    }
    with _server_process() as url:
        runner = prepare_run(_config(sweep, url), RunOptions(out_dir=tmp_path))
        result = asyncio.run(runner.run())
    (answer,) = result.lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    print(f"\n{answer.answer}")
    for p in f.probes:
        print(p.role, p.level.title, p.verdict, p.level.requests, p.requests_sent, p.why)
    check_sweep(f, result.records, _settings(sweep))
    # The server completes at most 40 requests/s (4 slots, 100 ms each) however fast the
    # client; how close the throughput probe comes, and so where the knee lies, is the host's.
    assert f.throughput_rps is not None and 0 < f.throughput_rps <= CAPACITY_RPS
    # Every level judged on one pass of 40, 80 or 160 requests: a pass twice as long after
    # each undecided one; undecided only at the bound (the throughput probe is never rerun).
    for p in f.probes:
        assert p.level.requests in (40, 80, 160), p
        assert p.requests_sent == sum(n for n in (40, 80, 160) if n <= p.level.requests)
        assert p.verdict != "undecided" or p.level.requests == 160 or p.role == "throughput"
    if f.knee is None:  # the host missed the SLO from the baseline on: nothing to draw
        assert answer.status == "partial", answer.answer
        return

    def load(p: SweepProbe) -> float | None:  # a rate sweep's baseline: its completed rate
        return p.level.completed_rps if p.role == "baseline" else p.level.target

    knee_probe = next(p for p in f.probes if p.met and p.role != "throughput" and load(p) == f.knee)
    assert knee_probe.verdict == "pass" and knee_probe.level.slo is not None
    assert f.knee_goodput_rps == knee_probe.level.slo.goodput_rps
    assert f.knee_goodput_low_rps is not None and f.knee_goodput_high_rps is not None
    assert f.knee_goodput_low_rps <= f.knee_goodput_rps <= f.knee_goodput_high_rps
    lead = answer.answer.split(" there. ")[0]
    assert lead.startswith("The knee: ") and "req/s meets every SLO at 95%" in lead
    if f.knee_low is not None and f.knee_high is not None:
        assert f"[{f.knee_low:.2f}, {f.knee_high:.2f}) req/s" in lead and len(lead.split()) <= 35

    # The summary's table and the report show the probes, goodput and the knee.
    (table,) = load_tables(result.lab)
    assert f"knee {f.knee:.3g}" in str(table.title)
    assert any("goodput" in str(c.header) for c in table.columns)
    paths = write_report(result.folder.path)
    assert (paths.files / "goodput.png").exists()
    md = paths.md.read_text()
    assert "## Sweeps" in md and f"knee {f.knee:.2f} in [" in md


def test_a_sweep_runs_its_levels_on_worker_processes(tmp_path: Path) -> None:
    sweep = {
        "kind": "sweep",
        "mode": "concurrency",
        "throughput_concurrency": 8,
        "requests": 8,
        "max_probes": 3,
        "workers": 2,
    }
    result = _run(sweep, tmp_path)
    (answer,) = result.lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    check_sweep(f, result.records, _settings(sweep))
    # The baseline runs on one process; 8 streams queue half their requests a whole request
    # (they fail on any host), so the last probe, if the baseline met, is the middle: 4.
    assert [p.level.level for p in f.probes] == ["c1", "c8", "c4"][: len(f.probes)]
    assert [p.level.workers for p in f.probes] == [1, 2, 2][: len(f.probes)]
    assert len(f.probes) == 1 or f.probes[1].verdict == "fail"
    assert len(f.probes) in (1, 3)
    if len(f.probes) == 3:
        assert f.stopped == "max_probes (3) reached"
