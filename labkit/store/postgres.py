"""A store in PostgreSQL, for a team that watches from several machines into one database
(psycopg 3: the optional extra ``labkit[postgres]``).

The password comes from the URL or ``PGPASSWORD`` (libpq reads it) and is registered with
`labkit.scrub`, so no message, log or page shows it; the store's `url` leaves it out. Loads
and migrations hold a transaction-scoped advisory lock: two machines loading at once take
turns (a new tag column is added once).
"""

from __future__ import annotations

import contextlib
import io
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from labkit.store.base import StoreError
from labkit.store.sql import SQL_TYPES, Kind, SqlStore, quote, redact

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["PostgresStore"]

#: The advisory lock key of loads and migrations (any fixed number; "labkit" in ASCII).
LOCK_KEY = 0x6C61626B6974

#: Seconds to wait for the server before saying it cannot be reached.
CONNECT_TIMEOUT_S = 10


def _register_secrets(url: str) -> None:
    from labkit.scrub import register_secret, register_url_credentials

    register_url_credentials(url)
    register_secret(os.environ.get("PGPASSWORD"))
    try:
        query = urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)
    except ValueError:
        return
    for key, value in query:
        if key.lower() == "password":
            register_secret(value)


class PostgresStore(SqlStore):
    """A store in a PostgreSQL database (its tables in the connection's current schema)."""

    mark = "%s"

    def __init__(self, url: str) -> None:
        _register_secrets(url)
        self.url = redact(url)
        try:
            import psycopg
        except ImportError:
            raise StoreError(
                f"{self.url}: a PostgreSQL store needs psycopg: pip install 'labkit[postgres]'"
            ) from None
        self._psycopg = psycopg
        try:
            self._con = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True)
        except (psycopg.Error, ValueError) as exc:
            raise self._fail("cannot connect", exc) from None
        try:
            self._con.execute("SET TIME ZONE 'UTC'")
            self._migrate()
        except psycopg.Error as exc:
            self._con.close()
            raise self._fail("cannot set up its schema", exc) from None
        except StoreError:
            self._con.close()
            raise

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._con.execute(sql.encode(), list(params) if params else None)

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._con.execute(sql.encode(), list(params) if params else None)
        return list(cur.fetchall())

    def _frame(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        import pandas as pd

        try:
            with self._transaction():
                cur = self._con.execute(sql.encode(), params)
                names = [d.name for d in cur.description or []]
                rows = cur.fetchall() if cur.description else []
        except self._psycopg.Error as exc:
            raise self._fail("the query failed", exc) from None
        return pd.DataFrame.from_records(rows, columns=names)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._con.transaction():
            yield

    def _lock(self) -> None:
        self._exec(f"SELECT pg_advisory_xact_lock({LOCK_KEY})")

    def _stage(self, batch: pa.Table, kinds: dict[str, Kind]) -> None:
        import pyarrow.csv as pacsv

        cols = ", ".join(f"{quote(c)} {SQL_TYPES[kinds[c]]}" for c in batch.column_names)
        self._exec(f"CREATE TEMP TABLE incoming ({cols}) ON COMMIT DROP")
        buffer = io.BytesIO()
        # Text is quoted ("" is an empty text), a null is left empty: COPY's CSV reads both.
        pacsv.write_csv(batch, buffer, pacsv.WriteOptions(include_header=False))
        names = ", ".join(quote(c) for c in batch.column_names)
        with self._con.cursor().copy(
            f"COPY incoming ({names}) FROM STDIN (FORMAT csv)".encode()
        ) as copy:
            view = buffer.getbuffer()
            for start in range(0, len(view), 1 << 20):
                copy.write(view[start : start + (1 << 20)])
        self._exec("ANALYZE incoming")  # a temporary table has no statistics: the join needs them

    def _unstage(self) -> None:
        self._exec("DROP TABLE incoming")

    def close(self) -> None:
        """Close the connection."""
        self._con.close()
