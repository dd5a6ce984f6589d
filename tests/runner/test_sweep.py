"""`kind: sweep` against the fake server with a known capacity (`slots`), on real sockets.

The schedule: first token after 20 ms, then 8 more tokens 10 ms apart — 100 ms per request
— and 4 slots: the server completes at most 40 requests/s, and holds at most 4 streams
without queueing one. Below capacity TTFT stays at 20 ms; past it, requests wait for a slot
and TTFT grows. The SLO (TTFT p90 within 60 ms) leaves 40 ms for a busy machine's late
wake-ups, well under one request's 100 ms of service.
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
from labkit.figures import LoadFigures, SweepFigures
from labkit.providers.fake import FakeSchedule
from labkit.records import RequestRecord
from labkit.report import write_report
from labkit.runner import RunOptions, prepare_resume, prepare_run
from labkit.runner.run import RunResult
from labkit.runner.summary import load_tables
from labkit.truth.process import TruthServer

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
    assert within.ttft_ms_p90 is not None and within.ttft_ms_p90 < 60
    # Twice the slots: half the streams wait a whole request (100 ms) for a slot.
    assert past.ttft_ms_p50 is not None and past.ttft_ms_p50 > 100
    assert past.completed_rps is not None and past.completed_rps < 1.1 * CAPACITY_RPS
    # 40 of 40 within the bound: the share's interval clears 90 %, the level passes at 95 %.
    assert within.slo is not None and within.slo.verdict == "pass"
    assert past.slo is not None and past.slo.verdict == "fail"
    assert past.slo.goodput_rps is not None and within.slo.goodput_rps is not None
    assert past.slo.goodput_rps < within.slo.goodput_rps / 2
    assert f"Goodput peaked at concurrency {SLOTS}" in answer.answer
    assert f"the SLOs held at concurrency {SLOTS}." in answer.answer


def test_a_concurrency_sweep_finds_the_slot_count_and_resume_reuses_its_probes(
    tmp_path: Path,
) -> None:
    sweep = {"kind": "sweep", "mode": "concurrency", "throughput_concurrency": 16, "requests": 16}
    first = _run(sweep, tmp_path)
    (answer,) = first.lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    # 1 and 16, then 8 (misses), 4 (meets), 6 and 5 (miss): the knee is the slot count.
    assert [p.level.level for p in f.probes] == ["c1", "c16", "c8", "c4", "c6", "c5"]
    assert [p.met for p in f.probes] == [True, False, False, True, False, False]
    assert (f.knee, f.knee_low, f.knee_high) == (SLOTS, SLOTS, SLOTS + 1)
    assert f.stopped == "the interval is one stream wide"
    assert "The knee: 4 streams meets every SLO" in answer.answer

    # All within the bound: 16 and 32 requests cannot show a p90 holds, 64 can (after
    # 16 + 32 + 64 sent); queued levels fail on their first 16.
    judged = [(p.verdict, p.level.requests, p.requests_sent, p.passes) for p in f.probes[:5]]
    assert judged == [
        ("pass", 64, 112, 3),
        ("fail", 16, 16, 1),
        ("fail", 16, 16, 1),
        ("pass", 64, 112, 3),
        ("fail", 16, 16, 1),
    ]

    # The run "died" during its last probe: a resume measures only that probe again.
    path = first.folder.records_path
    lines = path.read_text().splitlines()
    path.write_text("\n".join(ln for ln in lines if '"level":"c5"' not in ln) + "\n")
    levels = ("c1", "c16", "c8", "c4", "c6", "c5")

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
    assert {k: v for k, v in after.items() if k != "c5"} == {
        k: v for k, v in before.items() if k != "c5"
    }
    assert len(path.read_text().splitlines()) == len(lines)
    (again,) = second.lab.answers
    assert isinstance(again.figures, SweepFigures) and again.figures.knee == SLOTS


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


def test_a_rate_sweep_s_knee_interval_holds_the_capacity(tmp_path: Path) -> None:
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
    roles = [p.role for p in f.probes]
    assert roles[:2] == ["baseline", "throughput"] and set(roles[2:]) == {"bisect"}
    assert f.throughput_rps is not None and f.throughput_rps > 0.85 * CAPACITY_RPS
    # The knee lies in [largest pass, smallest fail), and that interval holds the capacity.
    assert f.knee is not None and f.knee_low is not None and f.knee_high is not None
    assert f.knee == f.knee_low <= CAPACITY_RPS < f.knee_high
    assert f.knee_high - f.knee_low <= 0.1 * f.knee_high
    # Every level has a verdict, judged on one pass of 40, 80 or 160 requests: a pass twice
    # as long after each undecided one; undecided only at the bound.
    assert all(p.verdict in ("pass", "fail", "undecided") for p in f.probes)
    assert all(p.met == (p.verdict == "pass") for p in f.probes)
    for p in f.probes:
        assert p.level.requests in (40, 80, 160), p
        assert p.requests_sent == sum(n for n in (40, 80, 160) if n <= p.level.requests)
        assert p.verdict != "undecided" or p.level.requests == 160 or p.role == "throughput"
    # One request at a time never queues: 40 of 40 within the bound pass a p90 SLO.
    assert (f.probes[0].verdict, f.probes[0].level.requests) == ("pass", 40)
    assert any(p.verdict == "fail" for p in f.probes[2:])
    knee_probe = next(p for p in f.probes if p.level.target == f.knee)
    assert knee_probe.verdict == "pass" and knee_probe.level.slo is not None
    assert f.knee_goodput_rps == knee_probe.level.slo.goodput_rps
    assert f.knee_goodput_low_rps is not None and f.knee_goodput_high_rps is not None
    assert f.knee_goodput_low_rps <= f.knee_goodput_rps <= f.knee_goodput_high_rps
    lead = answer.answer.split(" there. ")[0]
    assert lead.startswith("The knee: ") and "req/s meets every SLO at 95%" in lead
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
    assert [p.level.level for p in f.probes] == ["c1", "c8", "c4"]
    assert [p.level.workers for p in f.probes] == [1, 2, 2]
    assert (f.knee, f.knee_low, f.knee_high) == (SLOTS, SLOTS, 8)
    assert f.stopped == "max_probes (3) reached"
