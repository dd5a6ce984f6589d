"""What only a real PostgreSQL server shows: the data outlives a restart of the server, an
unreachable server is one line, and the password (in the URL or PGPASSWORD) is never
printed or kept in the store's `url`."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.store import RoundInfo, StoreError, open_store
from tests.report.report_builders import write_run
from tests.support.postgres import PostgresServer
from tests.support.records import make_record

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, run_id: str = "r1", n: int = 4) -> Path:
    records = [make_record(run_id=run_id, ttft_ms=10.0 * (i + 1)) for i in range(n)]
    return write_run(tmp_path / run_id, records)


def test_the_rows_outlive_a_server_restart(
    postgres_server: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    store = open_store(postgres_db)
    at = datetime(2025, 3, 1, 17, tzinfo=UTC)
    store.load_run(_run(tmp_path), RoundInfo(watch_id="w", index=3, at=at, status="ok"))
    store.close()
    postgres_server.stop()
    postgres_server.start()
    again = open_store(postgres_db)
    try:
        probes = again.probes("w")
        assert probes["client.ttft_ms"].tolist() == [10.0, 20.0, 30.0, 40.0]
        assert probes["round.index"].tolist() == [3] * 4
        assert (probes["round.at"] == at).all()
    finally:
        again.close()


def test_the_password_is_never_shown(
    postgres_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password = postgres_db.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    store = open_store(postgres_db)
    try:
        assert password not in store.url and "labkit@127.0.0.1" in store.url
    finally:
        store.close()
    runner = CliRunner()
    results = [
        runner.invoke(app, ["store", "import", postgres_db, str(_run(tmp_path))]),
        runner.invoke(app, ["store", "query", postgres_db, "SELECT * FROM no_such_table"]),
        runner.invoke(app, ["store", "query", postgres_db, "SELECT run_id FROM runs", "--csv"]),
        # The wrong password: refused by the server, the message still without it.
        runner.invoke(
            app, ["store", "query", postgres_db.replace(password, "x" + password), "SELECT 1"]
        ),
    ]
    assert [r.exit_code for r in results] == [0, 1, 0, 1]
    assert "no_such_table" in results[1].stderr and "password authentication" in results[3].stderr
    for result in results:
        assert password not in result.output
    assert password not in capsys.readouterr().err


def test_the_password_from_pgpassword(
    postgres_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = postgres_db.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    monkeypatch.setenv("PGPASSWORD", password)
    without = postgres_db.replace(f":{password}@", "@")
    result = CliRunner().invoke(app, ["store", "import", without, str(_run(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "added 4 records" in result.stdout and password not in result.output


def test_an_unreachable_server_is_one_line() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://me:s3cr3t-Word-42@127.0.0.1:{port}/lab"
    with pytest.raises(StoreError, match="cannot connect") as caught:
        open_store(url)
    assert "s3cr3t-Word-42" not in str(caught.value)
    result = CliRunner().invoke(app, ["store", "query", url, "SELECT 1"])
    assert result.exit_code == 1 and result.stderr.strip().count("\n") == 0
    assert "s3cr3t-Word-42" not in result.output
