"""The store, on both backends: DuckDB (a file; unit tier) and a real PostgreSQL server
(tests/support/postgres.py; integration tier: a socket on 127.0.0.1).

Loads are idempotent (a run or round loaded twice is one), a run that grew or whose load
was killed completes on reload, `probes()` is `labkit.read_run`'s frame plus ``round.*``,
the CLI imports and queries, an older schema is upgraded and a newer one refused, and the
PostgreSQL password is never shown.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

import labkit
from labkit.cli import app
from labkit.records import RequestRecord
from labkit.store import SCHEMA_VERSION, RoundInfo, StoreError, open_store, redact_url
from labkit.store import sql as store_sql
from tests.report.report_builders import write_run
from tests.support.records import T0, make_record

ROUND_COLUMNS = ["round.watch_id", "round.index", "round.at", "round.status", "round.nonce"]


@pytest.fixture(
    params=[
        pytest.param("duckdb", marks=pytest.mark.unit),
        pytest.param("postgres", marks=pytest.mark.integration),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store: a DuckDB file, or a fresh database on the real PostgreSQL server."""
    if request.param == "duckdb":
        return str(tmp_path / "store.duckdb")
    url: str = request.getfixturevalue("postgres_db")
    return url


def _records(run_id: str, n: int, *, ttft0: float = 50.0, **kw: Any) -> list[RequestRecord]:
    return [
        make_record(
            run_id=run_id,
            ttft_ms=ttft0 + i,
            started_at=T0 + timedelta(seconds=i),
            **kw,
        )
        for i in range(n)
    ]


def _round(index: int, *, watch: str = "w1", status: str = "ok") -> RoundInfo:
    return RoundInfo(
        watch_id=watch,
        index=index,
        at=datetime(2025, 3, 1, 10, tzinfo=UTC) + timedelta(hours=index),
        status=status,  # type: ignore[arg-type]
        nonce=f"n{index}",
    )


def _count(url: str, sql: str) -> int:
    store = open_store(url)
    try:
        return int(store.query(sql).iloc[0, 0])
    finally:
        store.close()


def test_a_run_and_a_round_loaded_twice_are_one(store_url: str, tmp_path: Path) -> None:
    run = write_run(tmp_path / "r1", _records("r1", 8, tags={"variant": "a"}))
    store = open_store(store_url)
    try:
        first = store.load_run(run, _round(0))
        again = store.load_run(run, _round(0))
        assert (first.run_id, first.added, first.already) == ("r1", 8, 0)
        assert (again.run_id, again.added, again.already) == ("r1", 0, 8)
        assert int(store.query("SELECT count(*) FROM records").iloc[0, 0]) == 8
        assert int(store.query("SELECT count(*) FROM runs").iloc[0, 0]) == 1
        rounds = store.rounds()
        assert rounds[["watch_id", "index", "status", "nonce", "run_id"]].values.tolist() == [
            ["w1", 0, "ok", "n0", "r1"]
        ]
        assert rounds["at"].iloc[0] == pd.Timestamp("2025-03-01T10:00Z")
    finally:
        store.close()


def test_a_run_that_grew_completes_on_reload(store_url: str, tmp_path: Path) -> None:
    records = _records("r1", 10)
    # Half the run written, and a last line cut short (a run still being written).
    run = write_run(tmp_path / "r1", records[:5], tail=records[5].to_json_line()[:40])
    store = open_store(store_url)
    try:
        assert store.load_run(run).added == 5
        write_run(tmp_path / "r1", records)
        result = store.load_run(run)
        assert (result.added, result.already) == (5, 5)
        ttfts = store.query('SELECT "client.ttft_ms" FROM records ORDER BY 1')
        assert ttfts.iloc[:, 0].tolist() == [50.0 + i for i in range(10)]
    finally:
        store.close()


def test_a_killed_load_leaves_nothing_and_completes_on_reload(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = write_run(tmp_path / "r1", _records("r1", 7))
    monkeypatch.setattr(store_sql, "CHUNK_ROWS", 3)
    store = open_store(store_url)
    stage = type(store)._stage  # type: ignore[attr-defined]
    staged: list[int] = []

    def killed_on_the_second_batch(self: Any, batch: Any, kinds: Any) -> None:
        staged.append(batch.num_rows)
        if len(staged) == 2:
            raise KeyboardInterrupt  # the process stopped mid-load
        stage(self, batch, kinds)

    try:
        with monkeypatch.context() as m:
            m.setattr(type(store), "_stage", killed_on_the_second_batch)
            with pytest.raises(KeyboardInterrupt):
                store.load_run(run, _round(0))
        assert int(store.query("SELECT count(*) FROM records").iloc[0, 0]) == 0
        assert int(store.query("SELECT count(*) FROM runs").iloc[0, 0]) == 0
        assert int(store.query("SELECT count(*) FROM rounds").iloc[0, 0]) == 0
        result = store.load_run(run, _round(0))
        assert (result.added, result.already) == (7, 0)
    finally:
        store.close()


def test_probes_is_read_runs_frame_plus_the_round(store_url: str, tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / f"r{i}", _records(f"r{i}", 4, ttft0=100.0 * (i + 1), prefill_ms=7.0))
        for i in range(3)
    ]
    failed = _records("r3", 1, error_kind="http_status")
    runs.append(write_run(tmp_path / "r3", failed))
    store = open_store(store_url)
    try:
        store.load_run(runs[0], _round(0))
        store.load_run(runs[1], _round(1))
        store.load_run(runs[2])  # not a round
        store.load_run(runs[3], _round(0, watch="w2", status="throttled"))
        probes = store.probes("w1")
        expected = labkit.read_runs(runs[:2])
        assert list(probes.columns[: len(expected.columns)]) == list(expected.columns)
        assert list(probes.columns[len(expected.columns) :]) == ROUND_COLUMNS
        assert probes["client.ttft_ms"].tolist() == expected["client.ttft_ms"].tolist()
        assert probes["provider_timings.prefill_ms"].tolist() == [7.0] * 8
        assert probes["round.index"].tolist() == [0] * 4 + [1] * 4
        assert str(probes["round.at"].dtype) == "datetime64[ns, UTC]"
        assert probes["round.at"].iloc[-1] == pd.Timestamp("2025-03-01T11:00Z")
        assert probes["round.nonce"].tolist() == ["n0"] * 4 + ["n1"] * 4
        for name in expected.columns:
            if expected[name].dtype.kind == "f":
                assert probes[name].dtype.kind == "f", name
        everything = store.probes()
        assert len(everything) == 13
        loose = everything[everything["run_id"] == "r2"]
        assert loose["round.watch_id"].isna().all() and loose["round.at"].isna().all()
        throttled = store.probes("w2")
        assert throttled["round.status"].tolist() == ["throttled"]
        assert throttled["error.kind"].tolist() == ["http_status"]
        assert not throttled["ok"].any()
    finally:
        store.close()


def test_a_tag_becomes_a_column_and_text_wins(store_url: str, tmp_path: Path) -> None:
    numeric = write_run(tmp_path / "a", _records("a", 2, tags={"n": 1}))
    text = write_run(tmp_path / "b", _records("b", 2, tags={"n": "big", "other": "x"}))
    store = open_store(store_url)
    try:
        store.load_run(numeric)
        assert store.probes()["tags.n"].tolist() == [1.0, 1.0]
        store.load_run(text)
        values = store.probes()["tags.n"].tolist()
        assert values[2:] == ["big", "big"] and [float(v) for v in values[:2]] == [1.0, 1.0]
        assert store.probes()["tags.other"].tolist() == [None, None, "x", "x"]
    finally:
        store.close()


def test_data_lasts_after_the_store_is_closed(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    store.load_run(write_run(tmp_path / "r1", _records("r1", 3)), _round(0))
    store.close()
    again = open_store(store_url, create=False)
    try:
        assert again.probes("w1")["client.ttft_ms"].tolist() == [50.0, 51.0, 52.0]
    finally:
        again.close()


def test_the_cli_imports_and_queries(store_url: str, tmp_path: Path) -> None:
    runs = [write_run(tmp_path / f"r{i}", _records(f"r{i}", 3 + i)) for i in range(2)]
    runner = CliRunner()
    first = runner.invoke(app, ["store", "import", store_url, *map(str, runs)])
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert len(lines) == 2
    assert "added 3 records" in lines[0] and "added 4 records" in lines[1]
    again = runner.invoke(app, ["store", "import", store_url, str(runs[1])])
    assert again.exit_code == 0 and "already there (4 records" in again.stdout
    sql = (
        'SELECT run_id, count(*) AS n, min("client.ttft_ms") AS first FROM records '
        "GROUP BY run_id ORDER BY run_id"
    )
    table = runner.invoke(app, ["store", "query", store_url, sql])
    assert table.exit_code == 0, table.output
    assert "r0" in table.stdout and "r1" in table.stdout and "2 row(s)" in table.stdout
    csv = runner.invoke(app, ["store", "query", store_url, sql, "--csv"])
    assert csv.exit_code == 0
    assert csv.stdout.splitlines() == ["run_id,n,first", "r0,3,50.0", "r1,4,50.0"]


def test_the_cli_says_one_line_for_bad_input(store_url: str, tmp_path: Path) -> None:
    open_store(store_url).close()
    runner = CliRunner()
    missing = runner.invoke(app, ["store", "import", store_url, str(tmp_path / "nothing")])
    assert missing.exit_code == 1
    assert missing.stderr.strip().count("\n") == 0 and "not a run folder" in missing.stderr
    bad_sql = runner.invoke(app, ["store", "query", store_url, "SELEC 1"])
    assert bad_sql.exit_code == 1 and bad_sql.stderr.strip().count("\n") == 0
    assert "the query failed" in bad_sql.stderr and "Traceback" not in bad_sql.output


def test_an_older_schema_is_upgraded_in_place(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(store_url)
    store.load_run(write_run(tmp_path / "r1", _records("r1", 3)), _round(0))
    assert store.schema_version() == SCHEMA_VERSION == len(store_sql.MIGRATIONS)  # type: ignore[attr-defined]
    store.close()
    later = store_sql.Migration(
        SCHEMA_VERSION + 1,
        "rounds gain a note",
        ("ALTER TABLE rounds ADD COLUMN note TEXT", "UPDATE rounds SET note = 'upgraded'"),
    )
    monkeypatch.setattr(store_sql, "MIGRATIONS", [*store_sql.MIGRATIONS, later])
    upgraded = open_store(store_url)
    try:
        assert upgraded.schema_version() == SCHEMA_VERSION + 1  # type: ignore[attr-defined]
        assert upgraded.query("SELECT note FROM rounds").iloc[:, 0].tolist() == ["upgraded"]
        assert upgraded.probes("w1")["client.ttft_ms"].tolist() == [50.0, 51.0, 52.0]
        versions = upgraded.query("SELECT version FROM schema_version ORDER BY version")
        assert versions.iloc[:, 0].tolist() == list(range(1, SCHEMA_VERSION + 2))
    finally:
        upgraded.close()


def test_a_newer_schema_is_refused_in_one_line(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    store.load_run(write_run(tmp_path / "r1", _records("r1", 2)))
    store._exec(  # type: ignore[attr-defined]
        "INSERT INTO schema_version (version, summary) VALUES (99, 'from the future')"
    )
    store.close()
    with pytest.raises(StoreError, match=r"schema version 99, newer than this labkit's"):
        open_store(store_url)
    result = CliRunner().invoke(app, ["store", "query", store_url, "SELECT 1"])
    assert result.exit_code == 1 and result.stderr.strip().count("\n") == 0
    assert "upgrade labkit" in result.stderr
    assert _count_rows_by_hand(store_url) == 2  # refused, untouched


def _count_rows_by_hand(url: str) -> int:
    """The records' count read without labkit's store (which refuses a newer schema)."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url) as con:
            row = con.execute("SELECT count(*) FROM records").fetchone()
    else:
        import duckdb

        with duckdb.connect(url) as con:
            row = con.execute("SELECT count(*) FROM records").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.unit
def test_the_url_is_shown_without_its_password() -> None:
    assert (
        redact_url("postgresql://watcher:s3cr3t-Pass@db.example:5433/lab?sslmode=require")
        == "postgresql://watcher@db.example:5433/lab?sslmode=require"
    )
    assert redact_url("postgresql://db.example/lab?password=s3cr3t-Pass&user=w") == (
        "postgresql://db.example/lab?user=w"
    )
    assert redact_url("/data/runs.duckdb") == "/data/runs.duckdb"


@pytest.mark.unit
def test_what_is_not_a_store_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is not a store"):
        open_store("mysql://me:s3cr3t-Pass@host/db")
    with pytest.raises(StoreError, match="no store there"):
        open_store(tmp_path / "absent.duckdb", create=False)
    with pytest.raises(StoreError, match="no folder"):
        open_store(tmp_path / "no" / "such" / "store.duckdb")
    other = tmp_path / "records.jsonl"
    other.write_text(json.dumps({"not": "a database"}) + "\n", encoding="utf-8")
    with pytest.raises(StoreError, match="not a DuckDB store"):
        open_store(other)
    assert other.read_text(encoding="utf-8").startswith('{"not"')  # left as it was


def test_a_run_imported_through_its_sidecars_parts_has_the_rows_of_one_imported_whole(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large run is imported a Parquet row group at a time from its sidecar's parts
    (bounded memory); its rows are those of the run read whole: a tag numeric in some
    rows and text in others is text in all (as the whole frame types it), a repeated
    record is stored once, a line that is not a record is left out."""
    from labkit.report import columnar
    from tests.report.test_columnar_load import _varied

    recs = _varied()
    for i, r in enumerate(recs):
        r.tags["mixed"] = i if i % 5 else f"t{i}"  # text in a few rows only
        if i % 4 == 1:
            r.experiment = "token_ratio"
    run_dir = write_run(tmp_path / "run", recs, tail='{"record_id": "cut')
    with (run_dir / "records.jsonl").open("r+", encoding="utf-8") as fh:
        text = fh.read()
        fh.seek(0)
        fh.write(
            text.replace('{"record_id": "cut', recs[3].to_json_line() + '\n{"record_id": "cut')
        )
    monkeypatch.setattr(columnar, "ROW_GROUP_ROWS", 3)  # many row groups: many chunks
    monkeypatch.setattr(columnar, "MAX_BUFFERED", 6)
    urls = {"whole": store_url, "parts": str(tmp_path / "parts.duckdb")}
    if not store_url.endswith(".duckdb"):  # PostgreSQL: a second database on the server
        urls["parts"] = store_url.rsplit("/", 1)[0] + "/parts_" + store_url.rsplit("/", 1)[1]
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as con:
            con.execute(f"CREATE DATABASE parts_{store_url.rsplit('/', 1)[1]}")
    got: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
    for how, url in urls.items():
        limit = 1 << 62 if how == "whole" else 0
        monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", limit)
        if how == "parts":  # the recorder's part (to the cut line), the import the rest
            assert columnar.convert(run_dir, final=False)
        store = open_store(url)
        try:
            result = store.load_run(run_dir)
            assert result.added == len(recs) and result.already == 0
            records = store.query("SELECT * FROM records ORDER BY record_id")
            runs = store.query("SELECT * FROM runs").drop(columns=["loaded_at"])
            got[how] = (records, runs)
        finally:
            store.close()
    side = columnar.open_sidecar(run_dir)
    assert side is not None and sum(len(c) for c in side.chunks()) == len(recs)
    assert len(list(side.chunks())) > 4
    pd.testing.assert_frame_equal(got["parts"][0], got["whole"][0])
    pd.testing.assert_frame_equal(got["parts"][1], got["whole"][1])
    assert set(got["parts"][0]["tags.mixed"]) >= {"1", "t0"}
