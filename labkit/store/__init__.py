"""The observatory's store: every round's records in a database that lasts.

`open_store(url)` gives a `Store`: embedded DuckDB for a path (one file, the default) or
PostgreSQL for a ``postgresql://`` URL. Its schema comes from the record contract (the same
flattened names as `labkit.rundata`); loads are idempotent (a record loaded twice is one
row). `Store.probes()` is the hand-off to the observatory's analysis.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LoadResult", "RoundInfo", "Store", "open_store"]


class RoundInfo(BaseModel):
    """One watch round: which watch, which round, and the time it stands for."""

    watch_id: str
    index: int
    at: datetime  # UTC; on a compressed clock, the simulated time
    status: Literal["ok", "throttled", "failed", "partial"] = "ok"
    nonce: str | None = None


class LoadResult(BaseModel):
    """What one load did: rows added and rows already there (a repeated load adds none)."""

    run_id: str
    added: int
    already: int


class Store(Protocol):
    """A database of runs and rounds."""

    url: str

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

    def close(self) -> None: ...


def open_store(url: str | Path) -> Store:
    """The store at `url`: a DuckDB file path, or ``postgresql://…``."""
    raise NotImplementedError("the store is being built (issue 46)")
