"""What both stores share: the schema, its migrations, and loads in SQL that reads alike in
DuckDB and PostgreSQL (``TEXT``, ``DOUBLE PRECISION``, ``BOOLEAN``, ``BIGINT``,
``TIMESTAMPTZ`` are names both know).

A load reads the run folder once, into columns, with the report's reader
(`labkit.report.load.load_run`: the one flattening of the record contract), and hands the
columns to the database in Arrow batches of `CHUNK_ROWS` rows (DuckDB scans them in place;
PostgreSQL takes them by ``COPY``), then inserts the rows whose ``(run_id, record_id)`` is not
there yet: a record loaded twice is one row, and a run cut short by a killed load (nothing
committed) or still growing completes on the next load. A load is one transaction.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from labkit.store.base import SCHEMA_VERSION, LoadResult, RoundInfo, StoreError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = [
    "CHUNK_ROWS",
    "MIGRATIONS",
    "Migration",
    "SqlStore",
    "record_columns",
    "redact",
]

#: Rows handed to the database at a time (memory holds one batch's copy beside the run's).
CHUNK_ROWS = 100_000

Kind = Literal["text", "double", "bool", "bigint", "integer", "timestamp"]

#: Each kind's SQL type, a name DuckDB and PostgreSQL both know.
SQL_TYPES: dict[Kind, str] = {
    "text": "TEXT",
    "double": "DOUBLE PRECISION",
    "bool": "BOOLEAN",
    "bigint": "BIGINT",
    "integer": "INTEGER",
    "timestamp": "TIMESTAMPTZ",
}

_DB_KINDS: dict[str, Kind] = {
    "text": "text",
    "varchar": "text",
    "character varying": "text",
    "double": "double",
    "double precision": "double",
    "boolean": "bool",
    "bigint": "bigint",
    "integer": "integer",
    "timestamp with time zone": "timestamp",
}

#: The columns of ``rounds`` as `Store.probes` names them.
ROUND_COLUMNS: dict[str, Kind] = {
    "round.watch_id": "text",
    "round.index": "integer",
    "round.at": "timestamp",
    "round.status": "text",
    "round.nonce": "text",
}


def redact(url: str) -> str:
    """`url` with its password (``user:password@`` or ``?password=``) left out."""
    if "://" not in url:
        return url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://…"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}@{host}"
    query = urllib.parse.urlencode(
        [
            (k, v)
            for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() != "password"
        ]
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def record_columns() -> dict[str, Kind]:
    """The ``records`` table's columns of the contract: `labkit.read_run`'s, in its order
    (tags are added as runs bring them)."""
    from labkit.report.load import _columns, _is_text

    out: dict[str, Kind] = {}
    for name in _columns():
        if name in ("ok", "warmup"):
            out[name] = "bool"
        elif name == "file_offset":
            out[name] = "bigint"
        elif _is_text(name):
            out[name] = "text"
        else:
            out[name] = "double"
    return out


def quote(name: str) -> str:
    """An SQL identifier, quoted (dotted names, ``index`` and ``at`` are words SQL keeps)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Migration:
    """One schema version: the statements that take a store from the version before to it."""

    version: int
    summary: str
    statements: tuple[str, ...]


def _version_1() -> Migration:
    records = record_columns()
    cols = ", ".join(
        f"{quote(n)} {SQL_TYPES[k]}{' NOT NULL' if n in ('run_id', 'record_id') else ''}"
        for n, k in records.items()
    )
    return Migration(
        1,
        "records, runs, rounds and the probes view",
        (
            f"CREATE TABLE records ({cols}, PRIMARY KEY (run_id, record_id))",
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, name TEXT, run_dir TEXT, "
            "config_path TEXT, labkit_version TEXT, started_at TEXT, ended_at TEXT, "
            "status TEXT, records BIGINT, providers TEXT, provider_kinds TEXT, models TEXT, "
            "read_path TEXT, hostname TEXT, manifest TEXT, loaded_at TIMESTAMPTZ)",
            'CREATE TABLE rounds (watch_id TEXT NOT NULL, "index" INTEGER NOT NULL, '
            '"at" TIMESTAMPTZ NOT NULL, status TEXT NOT NULL, nonce TEXT, run_id TEXT NOT NULL, '
            'PRIMARY KEY (watch_id, "index"))',
            PROBES_VIEW,
        ),
    )


PROBES_VIEW = (
    'CREATE VIEW probes AS SELECT r.*, d.watch_id AS "round.watch_id", '
    'd."index" AS "round.index", d."at" AS "round.at", d.status AS "round.status", '
    'd.nonce AS "round.nonce" FROM records r LEFT JOIN rounds d ON d.run_id = r.run_id'
)

#: Every schema version, in order; a store at version v gets the ones after v applied.
MIGRATIONS: list[Migration] = [_version_1()]
assert MIGRATIONS[-1].version == SCHEMA_VERSION


class SqlStore:
    """A store over a DB-API-like connection; `DuckStore` and `PostgresStore` give the
    database's own parts (statements, transactions, staging a batch)."""

    url: str
    #: The parameter mark of the driver (``?`` or ``%s``).
    mark = "?"

    # --- what each database does its own way ---------------------------------------------

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _frame(self, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
        raise NotImplementedError

    def _transaction(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _lock(self) -> None:
        """Hold loads and migrations from other connections off until the transaction ends."""

    def _stage(self, batch: pa.Table, kinds: dict[str, Kind]) -> None:
        """Make `batch` readable as the table ``incoming`` (replacing the one before)."""
        raise NotImplementedError

    def _unstage(self) -> None:
        raise NotImplementedError

    def _fail(self, what: str, exc: Exception) -> StoreError:
        from labkit.scrub import scrub

        first = scrub(str(exc)).strip().splitlines()
        return StoreError(f"{self.url}: {what}: {first[0] if first else type(exc).__name__}")

    # --- the schema -------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Bring the schema to the newest version in one transaction; refuse a newer one."""
        newest = MIGRATIONS[-1].version
        with self._transaction():
            self._lock()
            self._exec(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER NOT NULL, applied_at TIMESTAMPTZ, summary TEXT)"
            )
            row = self._rows("SELECT max(version) FROM schema_version")
            current = int(row[0][0]) if row and row[0][0] is not None else 0
            if current > newest:
                raise StoreError(
                    f"{self.url} has store schema version {current}, newer than this labkit's "
                    f"{newest}: upgrade labkit to read it"
                )
            for migration in MIGRATIONS:
                if migration.version <= current:
                    continue
                for statement in migration.statements:
                    self._exec(statement)
                self._exec(
                    f"INSERT INTO schema_version VALUES ({self.mark}, {self.mark}, {self.mark})",
                    (migration.version, datetime.now(UTC), migration.summary),
                )

    def schema_version(self) -> int:
        """The store's schema version (`SCHEMA_VERSION` once opened)."""
        return int(self._rows("SELECT max(version) FROM schema_version")[0][0])

    def _kinds(self, table: str) -> dict[str, Kind]:
        rows = self._rows(
            "SELECT column_name, data_type FROM information_schema.columns "
            f"WHERE table_name = {self.mark} AND table_schema = current_schema() "
            "ORDER BY ordinal_position",
            (table,),
        )
        return {str(n): _DB_KINDS.get(str(t).lower(), "text") for n, t in rows}

    def _widen(self, frame: pd.DataFrame, have: dict[str, Kind]) -> dict[str, Kind]:
        """Add the frame's columns the table lacks (a tag, a field newer than the store);
        a numeric tag column that now meets text becomes text. Returns the table's kinds."""
        changes: list[str] = []
        for name in frame.columns:
            kind: Kind = "double" if frame[name].dtype.kind in "fiu" else "text"
            if frame[name].dtype.kind == "b":
                kind = "bool"
            if name not in have:
                changes.append(f"ALTER TABLE records ADD COLUMN {quote(name)} {SQL_TYPES[kind]}")
                have[name] = kind
            elif have[name] == "double" and kind == "text" and name.startswith("tags."):
                changes.append(
                    f"ALTER TABLE records ALTER COLUMN {quote(name)} TYPE TEXT "
                    f"USING CAST({quote(name)} AS TEXT)"
                )
                have[name] = "text"
        if changes:
            self._exec("DROP VIEW IF EXISTS probes")
            for statement in changes:
                self._exec(statement)
            self._exec(PROBES_VIEW)
        return have

    # --- loads ------------------------------------------------------------------------------

    def load_run(self, run_dir: Path, round_info: RoundInfo | None = None) -> LoadResult:
        """Load a run folder's records (and its round): one transaction; a record already
        there (same run_id and record_id) is left as it is."""
        from labkit.report.columnar import sidecar
        from labkit.report.load import load_run, run_folder, run_meta

        folder = run_folder(run_dir)  # RunError (a LabkitError) names a folder that is not a run
        side = sidecar(folder)
        chunks: Iterator[pd.DataFrame]
        if side is not None:  # a large run: its sidecar's row groups, one at a time
            manifest, _ = run_meta(folder, [])
            rows = side.rows - side.repeated
            text_tags = side.text_tags()
            fill = manifest.get("run_id", folder.name) if side.all_null("run_id") else None
            chunks = _filled(side.chunks(text_tags), fill)
            first = None
            if not manifest.get("run_id"):  # the run_id of its first record, as read whole
                first = next(_filled(side.chunks(text_tags), fill), None)
        else:
            data = load_run(folder)
            manifest, rows, first = data.manifest, len(data.records), data.records
            frame = data.records
            chunks = (frame.iloc[at : at + CHUNK_ROWS] for at in range(0, len(frame), CHUNK_ROWS))
        run_id = str(manifest.get("run_id") or "")
        if not run_id:
            run_id = (
                str(first["run_id"].iloc[0]) if first is not None and len(first) else folder.name
            )
        added = already = 0
        with self._transaction():
            self._lock()
            kinds = self._kinds("records")
            self._upsert_run(run_id, Path(run_dir), manifest, rows)
            for chunk in chunks:
                kinds = self._widen(chunk, kinds)
                batch = _arrow(chunk, kinds)
                self._stage(batch, {c: kinds[c] for c in batch.column_names})
                there = self._rows(
                    "SELECT count(*) FROM incoming i JOIN records r "
                    "ON r.run_id = i.run_id AND r.record_id = i.record_id"
                )[0][0]
                cols = ", ".join(quote(c) for c in batch.column_names)
                self._exec(
                    f"INSERT INTO records ({cols}) SELECT {cols} FROM incoming i WHERE NOT "
                    "EXISTS (SELECT 1 FROM records r WHERE r.run_id = i.run_id AND "
                    "r.record_id = i.record_id) ON CONFLICT DO NOTHING"
                )
                self._unstage()
                already += int(there)
                added += len(chunk) - int(there)
            if round_info is not None:
                self._upsert_round(round_info, run_id)
        return LoadResult(run_id=run_id, added=added, already=already)

    def _upsert_run(self, run_id: str, run_dir: Path, manifest: dict[str, Any], n: int) -> None:
        providers = manifest.get("providers") or {}
        providers = providers if isinstance(providers, dict) else {}

        def each(key: str) -> str | None:
            values = [str(p.get(key)) for p in providers.values() if isinstance(p, dict)]
            return ",".join(dict.fromkeys(v for v in values if v != "None")) or None

        read_path = manifest.get("read_path")
        host = manifest.get("host")
        row = {
            "run_id": run_id,
            "name": manifest.get("name"),
            "run_dir": str(Path(run_dir).resolve()),
            "config_path": manifest.get("config_path"),
            "labkit_version": manifest.get("labkit_version"),
            "started_at": manifest.get("started_at"),
            "ended_at": manifest.get("ended_at"),
            "status": manifest.get("status"),
            "records": n,
            "providers": ",".join(str(k) for k in providers) or None,
            "provider_kinds": each("kind"),
            "models": each("model"),
            "read_path": read_path.get("implementation") if isinstance(read_path, dict) else None,
            "hostname": host.get("hostname") if isinstance(host, dict) else None,
            "manifest": json.dumps(manifest, sort_keys=True) if manifest else None,
            "loaded_at": datetime.now(UTC),
        }
        names = ", ".join(row)
        marks = ", ".join(self.mark for _ in row)
        update = ", ".join(f"{k} = excluded.{k}" for k in row if k != "run_id")
        self._exec(
            f"INSERT INTO runs ({names}) VALUES ({marks}) "
            f"ON CONFLICT (run_id) DO UPDATE SET {update}",
            [
                None if v is None else v if isinstance(v, int | datetime) else str(v)
                for v in row.values()
            ],
        )

    def _upsert_round(self, info: RoundInfo, run_id: str) -> None:
        at = info.at if info.at.tzinfo is not None else info.at.replace(tzinfo=UTC)
        m = self.mark
        self._exec(
            f'INSERT INTO rounds (watch_id, "index", "at", status, nonce, run_id) '
            f'VALUES ({m}, {m}, {m}, {m}, {m}, {m}) ON CONFLICT (watch_id, "index") DO UPDATE '
            'SET "at" = excluded."at", status = excluded.status, nonce = excluded.nonce, '
            "run_id = excluded.run_id",
            (info.watch_id, info.index, at.astimezone(UTC), info.status, info.nonce, run_id),
        )

    # --- reads ------------------------------------------------------------------------------

    def probes(self, watch_id: str | None = None) -> pd.DataFrame:
        """One row per record: `labkit.read_run`'s columns plus ``round.watch_id``,
        ``round.index`` (Int64), ``round.at`` (datetime64, UTC), ``round.status`` and
        ``round.nonce`` (null for a run that was not a round); in round order, then in
        the order of each run's file. `watch_id`: only that watch's rounds."""
        where, params = ("", None)
        if watch_id is not None:
            where, params = (f'WHERE "round.watch_id" = {self.mark}', [watch_id])
        frame = self._frame(
            f'SELECT * FROM probes {where} ORDER BY "round.at" NULLS FIRST, '
            '"round.index", run_id, file_offset',
            params,
        )
        return _typed(frame, {**self._kinds("records"), **ROUND_COLUMNS})

    def rounds(self, watch_id: str | None = None) -> pd.DataFrame:
        """One row per round (see `labkit.store.Store.rounds`)."""
        where, params = ("", None)
        if watch_id is not None:
            where, params = (f"WHERE watch_id = {self.mark}", [watch_id])
        frame = self._frame(
            f'SELECT watch_id, "index", "at", status, nonce, run_id FROM rounds {where} '
            'ORDER BY watch_id, "index"',
            params,
        )
        return _typed(frame, {"index": "integer", "at": "timestamp"})

    def query(self, sql: str) -> pd.DataFrame:
        """Run SQL against the store's tables and views; its result as a frame."""
        return self._frame(sql)


def _filled(chunks: Iterator[pd.DataFrame], run_id: Any) -> Iterator[pd.DataFrame]:
    """`chunks` with their run_id set to `run_id` where it is not None (a run whose records
    carry none: `labkit.report.load.load_run` does the same for the whole frame)."""
    for chunk in chunks:
        if run_id is not None:
            chunk["run_id"] = str(run_id)
        yield chunk


def _arrow(chunk: pd.DataFrame, kinds: dict[str, Kind]) -> pa.Table:
    """A chunk of the records frame as an Arrow table of the table's column types (NaN and
    None as null)."""
    import numpy as np
    import pyarrow as pa

    arrays: list[pa.Array] = []
    names: list[str] = []
    for name in chunk.columns:
        values = chunk[name].to_numpy()
        kind = kinds[name]
        if kind == "text":
            if values.dtype.kind == "f":
                values = np.array(
                    [None if v != v else repr(float(v)).removesuffix(".0") for v in values],
                    dtype=object,
                )
            arrays.append(pa.array(values, pa.string(), from_pandas=True))
        elif kind == "bool":
            arrays.append(pa.array(values, pa.bool_(), from_pandas=True))
        elif kind == "bigint":
            arrays.append(pa.array(values, pa.int64(), from_pandas=True))
        else:
            arrays.append(pa.array(values.astype(float), pa.float64(), from_pandas=True))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def _typed(frame: pd.DataFrame, kinds: dict[str, Kind]) -> pd.DataFrame:
    """`frame` with `labkit.read_run`'s types: numbers float64 (NaN where null), text as
    objects (None where null), timestamps tz-aware UTC, integers nullable Int64."""
    import numpy as np
    import pandas as pd

    out: dict[str, Any] = {}
    for name in frame.columns:
        values = frame[name]
        kind = kinds.get(name)
        if kind == "double":
            out[name] = pd.to_numeric(values, errors="coerce").astype(float)
        elif kind == "text":
            objects = values.astype(object)
            out[name] = objects.where(values.notna(), None)
        elif kind == "timestamp":
            out[name] = pd.to_datetime(values, utc=True).astype("datetime64[ns, UTC]")
        elif kind == "integer":
            out[name] = values.astype("Int64")
        elif kind == "bool":
            out[name] = values.astype(bool) if values.notna().all() else values
        elif kind == "bigint":
            out[name] = values.astype(np.int64) if values.notna().all() else values
        else:
            out[name] = values
    return pd.DataFrame(out, index=frame.index)
