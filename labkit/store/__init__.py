"""The observatory's store: every round's records in a database that lasts.

`open_store(url)` gives a `Store`: embedded DuckDB for a path (one file, the default) or
PostgreSQL for a ``postgresql://`` URL. Its schema comes from the record contract (the same
flattened names as `labkit.rundata`); loads are idempotent (a record loaded twice is one
row). `Store.probes()` is the hand-off to the observatory's analysis. Its tables ``records``,
``runs``, ``rounds``, ``schema_version`` and the view ``probes``: docs/runs.md, "The store";
the schema's versions and how a store is upgraded: docs/migrations.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from labkit.store.base import SCHEMA_VERSION, LoadResult, RoundInfo, StoreError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SCHEMA_VERSION",
    "LoadResult",
    "RoundInfo",
    "Store",
    "StoreError",
    "open_store",
    "redact_url",
]


class Store(Protocol):
    """A database of runs and rounds."""

    url: str  # secrets removed: fit for a message, a log or a page

    def load_run(self, run_dir: Path, round_info: RoundInfo | None = None) -> LoadResult:
        """Load a run folder's records (and the round it was, for a watch)."""
        ...

    def probes(self, watch_id: str | None = None) -> pd.DataFrame:
        """One row per record: the `labkit.rundata` columns plus ``round.watch_id``,
        ``round.index``, ``round.at``, ``round.status`` and ``round.nonce`` (null for a run
        that was not a round)."""
        ...

    def query(self, sql: str) -> pd.DataFrame:
        """Run SQL against the store's tables and views."""
        ...

    def rounds(self, watch_id: str | None = None) -> pd.DataFrame:
        """One row per round (of one watch, or all): ``watch_id``, ``index``, ``at`` (UTC),
        ``status``, ``nonce``, ``run_id``, ordered by watch and index."""
        ...

    def close(self) -> None:
        """Close the connection (the data stays)."""
        ...


def redact_url(url: str) -> str:
    """`url` with its password (in the user part or a ``password=`` parameter) removed."""
    from labkit.store.sql import redact

    return redact(url)


def open_store(url: str | Path, *, create: bool = True) -> Store:
    """The store at `url`: a DuckDB file path, or ``postgresql://…`` (``postgres://``).

    The schema is created, or an older one upgraded in place; a store written by a newer
    labkit is refused. `create=False`: a DuckDB file that does not exist is an error, not a
    new store. Raises `StoreError` with one line (the password never in it)."""
    text = str(url)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("postgresql", "postgres"):
        from labkit.store.postgres import PostgresStore

        return PostgresStore(text)
    if scheme and scheme not in ("file", "duckdb"):
        raise StoreError(
            f"{redact_url(text)} is not a store: give a DuckDB file path or a "
            "postgresql://user@host/db URL"
        )
    from labkit.store.duck import DuckStore

    path = (Path(text.split("://", 1)[1]) if scheme else Path(text)).expanduser()
    return DuckStore(path, create=create)
