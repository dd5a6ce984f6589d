"""The store's plain parts, which its modules share: the schema version, the error, and the
models of a round and of a load (re-exported by `labkit.store`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from labkit.errors import LabkitError

__all__ = ["SCHEMA_VERSION", "LoadResult", "RoundInfo", "StoreError"]

#: The schema version this labkit writes (docs/migrations.md, "The store's schema").
SCHEMA_VERSION = 1


class StoreError(LabkitError):
    """A store that cannot be opened, read or written: one line, the password left out."""


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
