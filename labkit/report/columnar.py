"""A run's records as columns on disk: the columnar sidecar beside records.jsonl.

``records.jsonl`` stays the source of truth. A large run's records are read from it once
(`labkit.report.load.scan_batches`: DuckDB's JSON reader, the same reading and the same
checks as the frame's) into ``records.columns.parquet``: every column of the records frame
under the frame's (and `labkit.rundata`'s) dotted names, the tags as their JSON text, each
row's byte offset in records.jsonl. Its rows are sorted by the statistics' group
(provider, experiment, model, client path) and then by their place in the file, so a
group, or a provider's records, is a run of consecutive rows: the report reads a group's
columns at a time (`Sidecar.frame`) and never holds the whole run. ``records.columns.json``
beside it says which records.jsonl it was built from (its size and modification time),
the groups (first row, rows), and the lines that were not records.

Built when missing or stale (records.jsonl changed since) by the first reader of a run of
at least `SIDECAR_MIN_BYTES`; a smaller run is read whole, as before. A folder that cannot
be written, or a file DuckDB cannot read as a whole, is read as before too.

Why Parquet through DuckDB: the reader already streams DuckDB's Arrow batches, Parquet
stores them as they come (pyarrow, a dependency already), and DuckDB sorts a run larger
than memory into its groups with a bounded memory, spilling to disk. Reading a group back
is a slice of row groups of the columns asked for: at 10⁶ records, the report's 37 columns
read in about a second where parsing records.jsonl took 8-11 s of CPU (docs/report.md).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labkit.report import load as _load

__all__ = [
    "SIDECAR_FILE",
    "SIDECAR_INDEX",
    "SIDECAR_MIN_BYTES",
    "Group",
    "Sidecar",
    "build_sidecar",
    "open_sidecar",
    "sidecar",
]

log = logging.getLogger(__name__)

SIDECAR_FILE = "records.columns.parquet"
SIDECAR_INDEX = "records.columns.json"

#: A records.jsonl this large or larger is read through its sidecar (about 20,000
#: records); a smaller one is read whole, which is quick and writes nothing.
SIDECAR_MIN_BYTES = 64 << 20

#: The sidecar's format: a sidecar of another version is stale.
VERSION = 1

#: Rows per Parquet row group: a group is read as the row groups it spans.
ROW_GROUP_ROWS = 1 << 16

#: DuckDB's memory while it sorts the sidecar (beyond it, it spills to disk).
SORT_MEMORY = "400MiB"

#: The statistics' group of a record (`labkit.analysis.requests.GROUP_KEYS`), as columns,
#: a missing model or client path read as the statistics read it.
_GROUP_SQL = [
    '"provider"',
    '"experiment"',
    "coalesce(\"model\", '')",
    "coalesce(\"app.client_path\", 'wire')",
]


@dataclass(frozen=True)
class Group:
    """One group of the statistics in the sidecar: its key and its rows."""

    provider: str
    experiment: str
    model: str
    client_path: str
    start: int
    rows: int


def _schema() -> pa.Schema:
    """The sidecar's columns: the frame's (less `run_dir`), the tags as JSON text, and
    `repeated` (a line that repeats a record_id read before)."""
    fields = []
    for name in _load._columns():
        if name == "run_dir":
            continue
        if name in ("ok", "warmup"):
            kind = pa.bool_()
        elif name == "file_offset":
            kind = pa.int64()
        elif _load._is_text(name):
            kind = pa.string()
        else:
            kind = pa.float64()
        fields.append(pa.field(name, kind))
    fields.append(pa.field("tags", pa.string()))
    fields.append(pa.field("repeated", pa.bool_()))
    return pa.schema(fields)


def _stamp(records: Path) -> dict[str, int]:
    st = records.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass
class Sidecar:
    """An open, fresh sidecar: its groups and how to read their columns."""

    run_dir: Path
    path: Path
    groups: list[Group]
    rows: int
    skipped: dict[int, str]
    repeated: int
    repeated_requests: int

    def _file(self) -> pq.ParquetFile:
        return pq.ParquetFile(self.path)

    def table(self, start: int, rows: int, columns: Collection[str] | None = None) -> pa.Table:
        """Rows `start` to `start + rows` of the columns asked for (all when None; those the
        sidecar lacks left out), read as the row groups they span."""
        file = self._file()
        names = file.schema_arrow.names
        wanted = names if columns is None else [c for c in names if c in columns]
        meta = file.metadata
        ids: list[int] = []
        first: int | None = None
        at = 0
        for i in range(meta.num_row_groups):
            n = meta.row_group(i).num_rows
            if at + n > start and at < start + rows:
                ids.append(i)
                first = at if first is None else first
            at += n
        if not ids or first is None:
            return _schema().empty_table().select(wanted)
        return file.read_row_groups(ids, columns=wanted).slice(start - first, rows)

    def frame(
        self, start: int, rows: int, columns: Collection[str] | None = None, *, dedup: bool = True
    ) -> pd.DataFrame:
        """Rows `start` to `start + rows` as the records frame (`labkit.report.load`), in
        the order of their lines; `columns` as in `load_run` (with the identity and the
        tags); `dedup`: without the lines that repeat a record read before."""
        wanted = None if columns is None else frozenset(columns) | _load._ALWAYS | {"tags"}
        read = None if wanted is None else wanted | {"repeated"}
        table = self.table(start, rows, read)
        if dedup and "repeated" in table.column_names and self.repeated:
            table = table.filter(pc.invert(table.column("repeated")))
        return table_frame(table, self.run_dir, wanted)

    def frames(
        self, by: int, columns: Collection[str] | None = None
    ) -> Iterator[tuple[tuple[str, ...], pd.DataFrame]]:
        """The records frame part by part: one part per distinct value of the first `by`
        keys of the group (1: per provider; 2: per provider × experiment; 4: per group),
        in their sorted order, each part's rows in the order of their lines."""
        parts: list[tuple[tuple[str, ...], int, int]] = []
        for g in self.groups:
            key = (g.provider, g.experiment, g.model, g.client_path)[:by]
            if parts and parts[-1][0] == key:
                k, s, n = parts[-1]
                parts[-1] = (k, s, n + g.rows)
            else:
                parts.append((key, g.start, g.rows))
        for key, start, rows in parts:
            yield key, self.frame(start, rows, columns)


def table_frame(table: pa.Table, run_dir: Path, wanted: frozenset[str] | None) -> pd.DataFrame:
    """A sidecar table as the records frame: the same columns, types and order as
    `load_run` gives (texts as objects, numbers as float64, tags typed as the reader types
    them), its rows in the order of their lines."""
    if table.num_rows and "file_offset" in table.column_names:
        offsets = table.column("file_offset").to_numpy()
        if (np.diff(offsets) < 0).any():
            table = table.take(pa.array(np.argsort(offsets, kind="stable")))
    n = table.num_rows
    data: dict[str, Any] = {}
    for name in _load._columns():
        if wanted is not None and name not in wanted:
            continue
        if name == "run_dir":
            data[name] = pa.repeat(pa.scalar(str(run_dir)), n).to_pandas().array
            continue
        column = table.column(name).combine_chunks()
        if name in ("ok", "warmup"):
            data[name] = column.to_numpy(zero_copy_only=False).astype(bool)
        elif name == "file_offset":
            data[name] = column.to_numpy(zero_copy_only=False).astype(np.int64)
        elif _load._is_text(name):
            data[name] = _texts(column)
        else:
            data[name] = _numbers(column)
    if "tags" in table.column_names:
        for key, values in _load._tags_of_json(table.column("tags").combine_chunks()).items():
            data[key] = _texts(values) if isinstance(values, pa.Array) else values
    frame = pd.DataFrame(data, copy=False)
    if wanted is not None:
        frame = frame[[c for c in frame.columns if c in wanted or c.startswith("tags.")]]
    return frame


def _texts(column: pa.Array) -> Any:
    """Text as the frame holds it (`labkit.report.load`): Arrow's strings as pandas' own,
    no Python object per value; a column of None as objects, as pandas types it."""
    if column.null_count == len(column):
        return np.full(len(column), None, dtype=object)
    return pa.chunked_array([column], pa.string()).to_pandas().array


def _numbers(column: pa.Array) -> np.ndarray:
    if column.null_count == len(column):
        return np.broadcast_to(np.float64(np.nan), (len(column),))
    values: np.ndarray = column.to_numpy(zero_copy_only=False).astype(float, copy=False)
    return values


# --- Building it ---------------------------------------------------------------------------


def _batch_table(batch: pa.RecordBatch, valid: np.ndarray, first_row: int) -> pa.Table:
    """One DuckDB batch's valid rows as sidecar columns, with their row numbers (the
    byte offsets come once the scan of the line ends is done)."""
    if not valid.all():
        batch = batch.filter(pa.array(valid))
    schema = _schema()
    arrays = []
    for f in schema:
        if f.name == "file_offset":
            arrays.append(pa.array(np.flatnonzero(valid) + first_row, pa.int64()))
        elif f.name == "repeated":
            arrays.append(pa.nulls(batch.num_rows, pa.bool_()))
        elif f.name == "tags":
            arrays.append(pc.cast(batch.column("tags"), pa.string()))
        elif f.name in batch.schema.names:
            column = batch.column(f.name)
            if f.type == pa.float64() and pa.types.is_string(column.type):
                column = pa.nulls(batch.num_rows, pa.float64())  # text is not a number
            arrays.append(pc.cast(column, f.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _doubtful_table(
    records: Path, scanned: _load.Scanned, run_dir: Path, skipped: dict[int, str]
) -> pa.Table | None:
    """The lines DuckDB doubted, each read by the line reader: those that are records
    after all as sidecar rows (with their row numbers), the others into `skipped`."""
    frames = []
    with records.open("rb") as fh:
        for row in scanned.doubted:
            number = int(scanned.numbers[row])
            offset = int(scanned.offsets[row])
            fh.seek(offset)
            line = fh.read(int(scanned.lengths[row]))
            frame = _load._parse_block(line, number - 1, offset, records, run_dir, skipped)
            if len(frame):
                frames.append((row, line, frame))
    if not frames:
        return None
    rows: list[dict[str, Any]] = []
    for row, line, frame in frames:
        record = frame.iloc[0]
        values: dict[str, Any] = {}
        for f in _schema():
            if f.name == "file_offset":
                values[f.name] = row
            elif f.name == "repeated":
                values[f.name] = None
            elif f.name == "tags":
                parsed = _load._load_first_wins(line)
                tags = parsed.get("tags") if isinstance(parsed, dict) else None
                values[f.name] = json.dumps(tags) if isinstance(tags, dict) else None
            else:
                value = record.get(f.name)
                values[f.name] = None if value is None or pd.isna(value) else value
        rows.append(values)
    return pa.Table.from_pylist(rows, schema=_schema())


def build_sidecar(run_dir: Path) -> Sidecar | None:
    """Read `run_dir`'s records.jsonl once into its sidecar (see the module); None when
    DuckDB cannot read it as a whole (the caller reads it as before)."""
    import duckdb

    records = run_dir / _load.RECORDS_FILE
    stamp = _stamp(records)
    tag = f".{os.getpid()}.tmp"
    unsorted = run_dir / (SIDECAR_FILE + ".unsorted" + tag)
    sorted_tmp = run_dir / (SIDECAR_FILE + tag)
    index_tmp = run_dir / (SIDECAR_INDEX + tag)
    offsets_tmp = run_dir / (SIDECAR_FILE + ".offsets" + tag)
    skipped: dict[int, str] = {}
    try:
        with pq.ParquetWriter(unsorted, _schema()) as writer:

            def write(first_row: int, batch: pa.RecordBatch, valid: np.ndarray) -> None:
                writer.write_table(_batch_table(batch, valid, first_row))

            scanned = _load.scan_batches(records, None, write)
            if scanned is None:
                return None
            doubtful = _doubtful_table(records, scanned, run_dir, skipped)
            if doubtful is not None:
                writer.write_table(doubtful)
        pq.write_table(
            pa.table({"row": np.arange(scanned.rows), "at": scanned.offsets}), offsets_tmp
        )
        del scanned
        groups, repeated, requests = _sort(unsorted, offsets_tmp, sorted_tmp, run_dir)
        index = {
            "version": VERSION,
            "source": stamp,
            "rows": sum(g.rows for g in groups),
            "groups": [
                [g.provider, g.experiment, g.model, g.client_path, g.start, g.rows] for g in groups
            ],
            "skipped": {str(k): v for k, v in sorted(skipped.items())},
            "repeated": [repeated, requests],
        }
        index_tmp.write_text(json.dumps(index), encoding="utf-8")
        os.replace(sorted_tmp, run_dir / SIDECAR_FILE)
        os.replace(index_tmp, run_dir / SIDECAR_INDEX)  # last: the pair is whole
    except (OSError, duckdb.Error) as exc:
        log.info("%s: no columnar sidecar (%s); records.jsonl is read whole", run_dir, exc)
        return None
    finally:
        for leftover in (unsorted, sorted_tmp, index_tmp, offsets_tmp):
            leftover.unlink(missing_ok=True)
    return open_sidecar(run_dir)


def _sort(unsorted: Path, offsets: Path, out: Path, run_dir: Path) -> tuple[list[Group], int, int]:
    """Write the sidecar sorted by group and line (DuckDB, spilling beyond `SORT_MEMORY`),
    marking the lines that repeat a record_id; its groups, repeated lines and records."""
    import duckdb

    threads = min(os.cpu_count() or 1, _load.MAX_THREADS)
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": threads,
        "memory_limit": SORT_MEMORY,
        "preserve_insertion_order": True,
        "temp_directory": str(run_dir / (SIDECAR_FILE + f".spill.{os.getpid()}")),
    }
    keys = ", ".join(_GROUP_SQL)
    with duckdb.connect(config=config) as con:
        con.execute("SET enable_progress_bar = false")
        src = "read_parquet(?)"
        (distinct,) = con.execute(
            f"SELECT count(DISTINCT record_id) FROM {src}", [str(unsorted)]
        ).fetchone() or (0,)
        (total,) = con.execute(f"SELECT count(*) FROM {src}", [str(unsorted)]).fetchone() or (0,)
        repeated = int(total) - int(distinct)
        # The row number DuckDB gave each line (file_offset, for now) → its byte offset.
        mark = (
            "row_number() OVER (PARTITION BY u.record_id ORDER BY o.at) > 1"
            if repeated
            else "false"
        )
        columns = [f'u."{f.name}"' for f in _schema() if f.name not in ("file_offset", "repeated")]
        select = (
            f"SELECT {', '.join(columns)}, o.at AS file_offset, {mark} AS repeated "
            f"FROM read_parquet(?) u JOIN read_parquet(?) o ON u.file_offset = o.row"
        )
        order = ", ".join(_GROUP_SQL)
        con.execute(
            f"COPY (SELECT * FROM ({select}) ORDER BY {order}, file_offset) TO ? "
            f"(FORMAT PARQUET, ROW_GROUP_SIZE {ROW_GROUP_ROWS})",
            [str(unsorted), str(offsets), str(out)],
        )
        found = con.execute(
            f"SELECT {keys}, count(*) FROM read_parquet(?) GROUP BY ALL ORDER BY ALL",
            [str(out)],
        ).fetchall()
        requests = 0
        if repeated:
            (requests,) = con.execute(
                "SELECT count(DISTINCT record_id) FROM read_parquet(?) WHERE repeated",
                [str(out)],
            ).fetchone() or (0,)
    groups: list[Group] = []
    start = 0
    for provider, experiment, model, path, rows in found:
        groups.append(Group(provider, experiment, model, path, start, int(rows)))
        start += int(rows)
    return groups, repeated, int(requests)


# --- Opening it ----------------------------------------------------------------------------


def open_sidecar(run_dir: Path) -> Sidecar | None:
    """`run_dir`'s sidecar when it is there and fresh (built from records.jsonl as it is
    now, by this version); None otherwise."""
    index_path = run_dir / SIDECAR_INDEX
    path = run_dir / SIDECAR_FILE
    records = run_dir / _load.RECORDS_FILE
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        if (
            not isinstance(index, dict)
            or index.get("version") != VERSION
            or index.get("source") != _stamp(records)
            or not path.is_file()
        ):
            return None
        groups = [Group(*g) for g in index["groups"]]
        skipped = {int(k): str(v) for k, v in index["skipped"].items()}
        repeated, requests = index["repeated"]
        rows = int(index["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Sidecar(run_dir, path, groups, rows, skipped, int(repeated), int(requests))


def sidecar(run_dir: Path | str, *, min_bytes: int | None = None) -> Sidecar | None:
    """The sidecar of a run of at least `min_bytes` (`SIDECAR_MIN_BYTES`) of records:
    opened when fresh, else built; None for a smaller run or where it cannot be built."""
    folder = Path(run_dir)
    records = folder / _load.RECORDS_FILE
    limit = SIDECAR_MIN_BYTES if min_bytes is None else min_bytes
    try:
        if records.stat().st_size < limit:
            return None
    except OSError:
        return None
    return open_sidecar(folder) or build_sidecar(folder)
