"""Every query docs/runs.md shows under "The store" runs on both backends and says what the
rounds hold: a watch of two providers over four hourly rounds, one throttled."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from labkit.store import RoundInfo, open_store
from tests.report.report_builders import write_run
from tests.support.records import make_record

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2025, 3, 4, 22, tzinfo=UTC)  # rounds at 22:00, 23:00, 00:00, 01:00 UTC


def documented_queries() -> dict[str, str]:
    """The SQL blocks of docs/runs.md's store section, by their marker's name."""
    page = (ROOT / "docs" / "runs.md").read_text(encoding="utf-8")
    found = re.findall(r"<!-- store-query: ([^>]*?) -->\n```sql\n(.*?)```", page, re.S)
    return {name.strip(): sql for name, sql in found}


@pytest.fixture(
    params=[
        pytest.param("duckdb", marks=pytest.mark.unit),
        pytest.param("postgres", marks=pytest.mark.integration),
    ]
)
def watched(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store holding a watch of providers a and b, rounds 0–3 an hour apart; round 2 of b
    throttled (one rate-limited request)."""
    url = str(tmp_path / "store.duckdb")
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_db")
    store = open_store(url)
    try:
        for index in range(4):
            for provider, base in (("a", 100.0), ("b", 200.0)):
                run_id = f"{provider}{index}"
                throttled = provider == "b" and index == 2
                records = [
                    make_record(run_id=run_id, provider=provider, ttft_ms=base + 10 * index + k)
                    for k in range(3)
                ]
                if throttled:
                    records = [
                        make_record(run_id=run_id, provider=provider, error_kind="http_status")
                    ]
                at = START + timedelta(hours=index)
                store.load_run(
                    write_run(tmp_path / run_id, records),
                    RoundInfo(
                        watch_id=f"watch-{provider}",
                        index=index,
                        at=at,
                        status="throttled" if throttled else "ok",
                    ),
                )
    finally:
        store.close()
    return url


def _run(url: str, sql: str) -> pd.DataFrame:
    store = open_store(url, create=False)
    try:
        return store.query(sql)
    finally:
        store.close()


@pytest.mark.unit
def test_the_docs_show_the_queries() -> None:
    assert set(documented_queries()) == {
        "ttft by hour",
        "throttled rounds",
        "errors by day",
        "runs",
    }


def test_median_ttft_per_provider_and_hour(watched: str) -> None:
    frame = _run(watched, documented_queries()["ttft by hour"])
    rows = [(str(p), int(h), int(n), float(v)) for p, h, n, v in frame.itertuples(index=False)]
    assert rows == [
        ("a", 0, 3, 121.0),
        ("a", 1, 3, 131.0),
        ("a", 22, 3, 101.0),
        ("a", 23, 3, 111.0),
        ("b", 1, 3, 231.0),  # 00:00 was throttled: no successful request
        ("b", 22, 3, 201.0),
        ("b", 23, 3, 211.0),
    ]


def test_throttled_rounds(watched: str) -> None:
    frame = _run(watched, documented_queries()["throttled rounds"])
    assert frame["watch_id"].tolist() == ["watch-a", "watch-b"]
    assert [int(v) for v in frame["rounds"]] == [4, 4]
    assert [int(v) for v in frame["throttled"]] == [0, 1]
    assert pd.isna(frame["first_throttled"].iloc[0])
    assert pd.Timestamp(frame["first_throttled"].iloc[1]) == pd.Timestamp("2025-03-05T00:00Z")


def test_errors_by_day(watched: str) -> None:
    frame = _run(watched, documented_queries()["errors by day"])
    days = [pd.Timestamp(d).date().isoformat() for d in frame["day"]]
    assert [
        (p, day, k, int(n))
        for (p, _, k, n), day in zip(frame.itertuples(index=False), days, strict=True)
    ] == [("b", "2025-03-05", "http_status", 1)]


def test_the_runs(watched: str) -> None:
    frame = _run(watched, documented_queries()["runs"])
    assert frame["run_id"].tolist() == sorted(f"{p}{i}" for p in "ab" for i in range(4))
    assert [int(v) for v in frame["records"]] == [3, 3, 3, 3, 3, 3, 1, 3]
