"""The default store: one DuckDB file, nothing to install (DuckDB is one of labkit's own
dependencies)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.store.base import StoreError
from labkit.store.sql import Kind, SqlStore

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["DuckStore"]

#: Where a DuckDB file says what it is (bytes 8–11 of its header).
_MAGIC = (8, b"DUCK")

#: DuckDB's memory while a load's transaction is open (its buffers spill to the file).
LOAD_MEMORY = "400MiB"


def _is_duckdb(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(_MAGIC[0])
        return fh.read(len(_MAGIC[1])) == _MAGIC[1]


class DuckStore(SqlStore):
    """A store in a DuckDB file (one writer at a time: a second process waits or fails)."""

    mark = "?"

    def __init__(self, path: Path, *, create: bool = True) -> None:
        import duckdb

        self.path = path
        self.url = str(path)
        if not create and not path.is_file():
            raise StoreError(f"{path}: no store there (no such file)")
        if path.is_file() and path.stat().st_size and not _is_duckdb(path):
            raise StoreError(f"{path}: not a DuckDB store (its first bytes are not DuckDB's)")
        if not path.parent.is_dir():
            raise StoreError(f"{path}: cannot create a store there (no folder {path.parent})")
        try:
            self._con = duckdb.connect(str(path))
            self._con.execute("SET TimeZone = 'UTC'")
            self._con.execute("SET enable_progress_bar = false")
        except duckdb.Error as exc:
            raise self._fail("not a DuckDB store", exc) from None
        try:
            self._migrate()
        except duckdb.Error as exc:
            self._con.close()
            raise self._fail("cannot set up its schema", exc) from None
        except StoreError:
            self._con.close()
            raise

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._con.execute(sql, list(params))

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._con.execute(sql, list(params)).fetchall()

    def _frame(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        import duckdb

        try:
            return self._con.execute(sql, params).df()
        except duckdb.Error as exc:
            raise self._fail("the query failed", exc) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        # DuckDB's buffers bounded while a load's transaction is open (its default is most
        # of the host's memory). The transaction's own rows still grow until the commit
        # (about 1 KB a record, with the primary key's index): a 10⁶-record run through its
        # sidecar peaked at 1.36 GB so, 1.57 GB without the bound.
        import duckdb

        self._con.execute(f"SET memory_limit = '{LOAD_MEMORY}'")
        try:
            self._con.begin()
            try:
                yield
            except BaseException:
                self._con.rollback()
                raise
            self._con.commit()
        finally:
            with contextlib.suppress(duckdb.Error):
                self._con.execute("RESET memory_limit")

    def _stage(self, batch: pa.Table, kinds: dict[str, Kind]) -> None:
        self._con.register("incoming", batch)

    def _unstage(self) -> None:
        self._con.unregister("incoming")

    def close(self) -> None:
        """Close the file (checkpointed: the data is in it)."""
        self._con.close()
