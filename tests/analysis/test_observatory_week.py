"""The proof of the observatory: a compressed-clock `labkit watch` of three simulated
providers (three truth servers, each with its own `drift` plan) over seven simulated days,
one round an hour, stored in DuckDB and in a real PostgreSQL server, then
`labkit.analysis.observatory.compute` graded against the truth servers' logs:

- `queuey` (Groq's shape: its queue and prefill reported): a +300 ms queue 17:00–19:00 UTC
  every day, and its prefill doubles on Thursday at 12:30;
- `netty` (the same shape): its front end, which no timing reports, grows by 60 ms on
  Saturday at 06:30, and its system_fingerprint changes on Friday at 09:30;
- `steady`: nothing changes.

Every planted change is found, named by its part, with its true time inside the stated
interval and its true size inside the shift's interval; the daily bump is a curve, not a
change, and the hour-of-day curve's interval at the bump covers the true queue; `steady`
has no change. The watch runs once (a few minutes on a busy 2-core host); the PostgreSQL
test loads the same rounds into a fresh database as the watch loads each round
(`Store.load_run` with the round's `RoundInfo`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.observatory import compute
from labkit.config import parse_config
from labkit.figures.observatory import ChangeEvent, ObservatoryFigures
from labkit.store import RoundInfo, open_store
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from labkit.watch import read_state, run_watch

START = "2026-03-02T00:00:00+00:00"  # a Monday
PREFILL_AT = datetime(2026, 3, 5, 12, 30, tzinfo=UTC)
FRONTEND_AT = datetime(2026, 3, 7, 6, 30, tzinfo=UTC)
FINGERPRINT_AT = datetime(2026, 3, 6, 9, 30, tzinfo=UTC)
BUMP_MS, FRONTEND_MS = 300.0, 60.0
SCHEDULE: dict[str, Any] = {
    "first_token_ms": 40,
    "prefill_ms_per_token": 1,
    "token_interval_ms": 2,
    "tokens": 4,
    "jitter_ms": 2,
    "server_timings": "groq",
}
PLANS: dict[str, dict[str, Any] | None] = {
    "queuey": {
        "queue_bump": {"start_hour": 17, "end_hour": 19, "ms": BUMP_MS},
        "prefill_step": {"at": PREFILL_AT.isoformat(), "factor": 2},
    },
    "netty": {
        "frontend_step": {"at": FRONTEND_AT.isoformat(), "ms": FRONTEND_MS},
        "fingerprint_step": {"at": FINGERPRINT_AT.isoformat(), "before": "fp_a", "after": "fp_b"},
    },
    "steady": None,
}


@dataclass
class Week:
    """The watch's folder, its DuckDB store and each truth server's log."""

    folder: Path
    duckdb: Path
    truth: dict[str, list[TruthRequest]]


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    root = tmp_path_factory.mktemp("week")
    servers: dict[str, TruthServer] = {}
    for name, plan in PLANS.items():
        schedule: dict[str, Any] = {**SCHEDULE, **({"drift": plan} if plan else {})}
        servers[name] = TruthServer(truth_log=root / f"{name}.truth.jsonl", **schedule)
    try:
        for server in servers.values():
            server.start()
        config = parse_config(
            {
                "name": "week",
                "providers": [
                    {"id": name, "kind": "openai_compatible", "model": "m", "base_url": s.base_url}
                    for name, s in servers.items()
                ],
                "experiments": [
                    {
                        "kind": "single",
                        "prompts": ["Say hello."],
                        "repeats": 2,
                        "params": {"max_tokens": 4},
                    }
                ],
                "watch": {
                    "every": "1h",
                    "rounds": 7 * 24,
                    "clock": {"kind": "simulated", "start": START},
                    "store": str(root / "week.duckdb"),
                },
            }
        )
        result = run_watch(config, root / "watch")
        assert result.rounds_run == 7 * 24
    finally:
        for server in servers.values():
            server.stop()
    truth = {name: read_truth_log(root / f"{name}.truth.jsonl").requests for name in PLANS}
    yield Week(root / "watch", root / "week.duckdb", truth)


def _at(r: TruthRequest) -> datetime:
    assert r.sim_time is not None  # every request of the watch carried its simulated time
    return datetime.fromtimestamp(r.sim_time, UTC)


def _shifts(figures: ObservatoryFigures, provider: str) -> list[ChangeEvent]:
    return [c for c in figures.changes if c.kind == "shift" and c.provider == provider]


def _covers(event: ChangeEvent, true_ms: float, slack_ms: float = 5.0) -> bool:
    """The shift's interval (widened by a busy host's few ms) holds the true size."""
    d = event.delta
    assert d is not None and d.lo is not None and d.hi is not None, event.sentence
    return d.lo - slack_ms <= true_ms <= d.hi + slack_ms


def assert_the_week(figures: ObservatoryFigures, truth: dict[str, list[TruthRequest]]) -> None:
    """Every planted change found, named, placed and sized; nothing else; the curve."""
    said = [c.sentence for c in figures.changes]
    assert figures.rounds == 7 * 24

    # queuey: its prefill doubled; the daily queue bump is no change
    shifts = _shifts(figures, "queuey")
    assert len(shifts) == 1, said
    prefill = shifts[0]
    assert (prefill.metric, prefill.component) == ("client.ttft_ms", "processing"), said
    assert prefill.at_lo is not None and prefill.at_hi is not None
    assert prefill.at_lo <= PREFILL_AT <= prefill.at_hi, prefill.sentence
    served = truth["queuey"]
    first_doubled = min(
        _at(r) for r in served if any(e["kind"] == "prefill_step" for e in r.drift or [])
    )
    assert prefill.at_lo < first_doubled <= prefill.at_hi
    before = statistics.median(r.prefill_ms or 0.0 for r in served if _at(r) < PREFILL_AT)
    after = statistics.median(r.prefill_ms or 0.0 for r in served if _at(r) > PREFILL_AT)
    assert _covers(prefill, after - before), (prefill.sentence, after - before)
    assert "the provider's processing (prefill), not" in prefill.sentence

    # netty: its unreported front end grew; its fingerprint changed
    shifts = _shifts(figures, "netty")
    assert len(shifts) == 1, said
    network = shifts[0]
    assert network.component == "network_frontend", said
    assert network.at_lo is not None and network.at_hi is not None
    assert network.at_lo <= FRONTEND_AT <= network.at_hi, network.sentence
    fronts = [r.frontend_ms for r in truth["netty"] if _at(r) > FRONTEND_AT]
    assert fronts and set(fronts) == {FRONTEND_MS}
    assert _covers(network, FRONTEND_MS), network.sentence
    (print_change,) = [c for c in figures.changes if c.kind == "fingerprint"]
    assert (print_change.provider, print_change.old_value, print_change.new_value) == (
        "netty",
        "fp_a",
        "fp_b",
    )
    assert print_change.at_lo is not None and print_change.at_hi is not None
    assert print_change.at_lo <= FINGERPRINT_AT <= print_change.at_hi

    # steady: nothing
    assert _shifts(figures, "steady") == [], said
    assert not [c for c in figures.changes if c.kind == "build"]

    # the hour-of-day curve holds the daily queue, as the server served it
    curve = {
        c.hour: c.median
        for c in figures.rollups
        if (c.provider, c.metric, c.window)
        == ("queuey", "provider_timings.queue_ms", "hour_of_day")
    }
    assert sorted(h for h in curve if h is not None) == list(range(24))
    for hour in (16, 17, 18, 19):
        true = statistics.median(r.queue_ms for r in served if _at(r).hour == hour)
        assert true == (BUMP_MS if hour in (17, 18) else 0.0)
        median = curve[hour]
        assert median.lo is not None and median.hi is not None, median
        assert median.lo <= true <= median.hi, (hour, median)
    ttft_curve = [
        c
        for c in figures.rollups
        if c.provider == "steady" and c.metric == "client.ttft_ms" and c.window == "hour_of_day"
    ]
    assert len(ttft_curve) == 24 and all(c.median.lo is not None for c in ttft_curve)
    split = next(
        c for c in figures.splits if (c.provider, c.window, c.hour) == ("queuey", "hour_of_day", 17)
    )
    assert split.queue_ms is not None and split.queue_ms.lo is not None
    assert split.queue_ms.lo <= BUMP_MS <= (split.queue_ms.hi or 0)


@pytest.mark.integration
def test_a_week_watched_into_duckdb_finds_each_planted_change(week: Week) -> None:
    store = open_store(week.duckdb)
    try:
        figures = compute(store.probes(), store=store.url)
    finally:
        store.close()
    assert_the_week(figures, week.truth)


@pytest.mark.integration
def test_the_same_week_in_postgresql_says_the_same(week: Week, postgres_db: str) -> None:
    state = read_state(week.folder)
    assert state is not None
    store = open_store(postgres_db)
    try:
        for entry in state.rounds:
            info = RoundInfo(
                watch_id=state.watch_id,
                index=entry.index,
                at=entry.at,
                status="ok" if entry.status == "running" else entry.status,
                nonce=entry.nonce,
            )
            store.load_run(week.folder / "rounds" / entry.run_id, info)
        probes = store.probes()
        figures = compute(probes, store=store.url)
    finally:
        store.close()
    password = postgres_db.split("//", 1)[1].split("@", 1)[0].partition(":")[2]
    assert password and password not in figures.store  # the URL without its password
    duck = open_store(week.duckdb)
    try:
        assert len(probes) == len(duck.probes())
    finally:
        duck.close()
    assert_the_week(figures, week.truth)
