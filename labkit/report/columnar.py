"""A run's records as columns on disk: the columnar sidecar beside records.jsonl.

``records.jsonl`` stays the source of truth. A large run's records are read from it once
(`labkit.report.load.scan_batches`: DuckDB's JSON reader, the same reading and the same
checks as the frame's) into ``records.columns.parquet``: every column of the records frame
under the frame's (and `labkit.rundata`'s) dotted names, the tags as their JSON text, each
row's byte offset in records.jsonl. Each Parquet row group holds the rows of one group of
the statistics (provider, experiment, model, client path), in the order of their lines, so
the report reads one group's, or one provider's, columns at a time (`Sidecar.frames`) and
never holds the whole run. ``records.columns.json`` beside it says which records.jsonl it
was built from (its size and modification time), each group's rows and row groups, the
lines that were not records and those that repeat a record.

Built when missing or stale (records.jsonl changed since, or another format) by the first
reader of a run of at least `SIDECAR_MIN_BYTES`; a smaller run is read whole, as before. A
folder that cannot be written, or a file DuckDB cannot read as a whole, is read as before
too.

Why Parquet, written by group as the lines are read: the reader already streams DuckDB's
Arrow batches, Parquet keeps them as typed, compressed columns (pyarrow, a dependency
already), and a row group per group makes a group a read of its own row groups, with no
sort of the run. A sidecar sorted by DuckDB instead took twice as long to build (the sort,
and the join of each row to its byte offset). Reading the report's columns back takes about
2 s of CPU at 10⁶ records where parsing records.jsonl took 8-11 s (docs/report.md).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection, Iterator, Sequence
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
VERSION = 2

#: Rows per Parquet row group: a group is read as the row groups it spans.
ROW_GROUP_ROWS = 1 << 16

#: DuckDB's memory while it looks for repeated records in the sidecar.
SORT_MEMORY = "400MiB"


@dataclass(frozen=True)
class Group:
    """One group of the statistics in the sidecar: its key, its rows, and the Parquet row
    groups that hold them (each row group holds one group's rows only)."""

    provider: str
    experiment: str
    model: str
    client_path: str
    rows: int
    row_groups: tuple[int, ...]

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(provider, experiment, model, client path): the order of the groups."""
        return (self.provider, self.experiment, self.model, self.client_path)


def _schema() -> pa.Schema:
    """The sidecar's columns: the frame's (less `run_dir`), and the tags as JSON text."""
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
    return pa.schema(fields)


def _stamp(records: Path) -> dict[str, int]:
    st = records.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass
class Sidecar:
    """An open, fresh sidecar: its groups (in their sorted order) and how to read them."""

    run_dir: Path
    path: Path
    groups: list[Group]
    skipped: dict[int, str]
    repeated: int
    repeated_requests: int
    repeated_offsets: list[int]

    @property
    def rows(self) -> int:
        """Rows in the sidecar (the lines that repeat a record among them)."""
        return sum(g.rows for g in self.groups)

    def read(
        self, groups: Sequence[Group] | None = None, columns: Collection[str] | None = None
    ) -> pa.Table:
        """The rows of `groups` (all when None) in the columns asked for (all when None;
        those the sidecar lacks left out), read as their row groups, in no set order."""
        file = pq.ParquetFile(self.path)
        names = file.schema_arrow.names
        wanted = names if columns is None else [c for c in names if c in columns]
        chosen = self.groups if groups is None else groups
        ids = sorted(i for g in chosen for i in g.row_groups)
        if not ids:
            return _schema().empty_table().select(wanted)
        return file.read_row_groups(ids, columns=wanted)

    def frame(
        self,
        groups: Sequence[Group] | None = None,
        columns: Collection[str] | None = None,
        *,
        dedup: bool = True,
        lean: bool = False,
    ) -> pd.DataFrame:
        """The rows of `groups` (all when None) as the records frame
        (`labkit.report.load`), in the order of their lines; `columns` as in `load_run`
        (with the identity and the tags; `lean`: `columns` only, with `file_offset`);
        `dedup`: without the lines that repeat a record read before."""
        if lean and columns is not None:
            wanted: frozenset[str] | None = frozenset(columns) | {"file_offset"}
            read: frozenset[str] | None = wanted
        else:
            wanted = None if columns is None else frozenset(columns) | _load._ALWAYS
            read = None if wanted is None else wanted | {"tags", "file_offset"}
        table = self.read(groups, read)
        if dedup and self.repeated_offsets:
            again = pc.is_in(table.column("file_offset"), pa.array(self.repeated_offsets))
            table = table.filter(pc.invert(again))
        return table_frame(table, self.run_dir, wanted)

    def parts(self, by: int) -> list[list[Group]]:
        """The groups in parts: one part per distinct value of the first `by` keys of the
        group (1: per provider; 2: per provider × experiment; 4: per group), sorted."""
        parts: list[list[Group]] = []
        for g in self.groups:
            if parts and parts[-1][0].key[:by] == g.key[:by]:
                parts[-1].append(g)
            else:
                parts.append([g])
        return parts

    def frames(
        self, by: int, columns: Collection[str] | None = None, *, lean: bool = False
    ) -> Iterator[tuple[tuple[str, ...], pd.DataFrame]]:
        """The records frame part by part (`parts`), each part's rows in the order of
        their lines (`lean` as in `frame`): the whole run is never held, and each part's
        memory is given back before the next is read."""
        for part in self.parts(by):
            yield part[0].key[:by], self.frame(part, columns, lean=lean)
            pa.default_memory_pool().release_unused()
            _load._give_back()


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

#: Rows buffered (all groups together) before the largest group's is written out.
MAX_BUFFERED = 4 * ROW_GROUP_ROWS


def _batch_table(batch: pa.RecordBatch, valid: np.ndarray, offsets: np.ndarray) -> pa.Table:
    """One DuckDB batch's valid rows as sidecar columns (`offsets`: the batch's rows'
    byte offsets in records.jsonl)."""
    if not valid.all():
        batch = batch.filter(pa.array(valid))
    arrays = []
    for f in _schema():
        if f.name == "file_offset":
            arrays.append(pa.array(offsets[valid], pa.int64()))
        elif f.name == "tags":
            arrays.append(pc.cast(batch.column("tags"), pa.string()))
        elif f.name in batch.schema.names:
            column = batch.column(f.name)
            if f.type == pa.float64() and pa.types.is_string(column.type):
                column = pa.nulls(batch.num_rows, pa.float64())  # text is not a number
            arrays.append(pc.cast(column, f.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=_schema())


def _doubtful_table(
    records: Path, scanned: _load.Scanned, run_dir: Path, skipped: dict[int, str]
) -> pa.Table | None:
    """The lines DuckDB doubted, each read by the line reader: those that are records
    after all as sidecar rows, the others into `skipped`."""
    rows: list[dict[str, Any]] = []
    with records.open("rb") as fh:
        for row in scanned.doubted:
            number = int(scanned.numbers[row])
            offset = int(scanned.offsets[row])
            fh.seek(offset)
            line = fh.read(int(scanned.lengths[row]))
            frame = _load._parse_block(line, number - 1, offset, records, run_dir, skipped)
            if not len(frame):
                continue
            record = frame.iloc[0]
            values: dict[str, Any] = {}
            for f in _schema():
                if f.name == "tags":
                    parsed = _load._load_first_wins(line)
                    tags = parsed.get("tags") if isinstance(parsed, dict) else None
                    values[f.name] = json.dumps(tags) if isinstance(tags, dict) else None
                else:
                    value = record.get(f.name)
                    values[f.name] = None if value is None or pd.isna(value) else value
            rows.append(values)
    return pa.Table.from_pylist(rows, schema=_schema()) if rows else None


class _GroupWriter:
    """Writes rows into the sidecar one group's row group at a time: each group's rows
    buffered until `ROW_GROUP_ROWS` (or, all groups together, `MAX_BUFFERED`), in the
    order they came, so a group's rows keep the order of their lines."""

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self.writer = writer
        self.buffered: dict[tuple[str, str, str, str], list[pa.Table]] = {}
        self.counts: dict[tuple[str, str, str, str], int] = {}
        self.rows: dict[tuple[str, str, str, str], int] = {}
        self.row_groups: dict[tuple[str, str, str, str], list[int]] = {}
        self.written = 0

    def add(self, table: pa.Table) -> None:
        """Split `table` by group and buffer each part."""
        model = pc.fill_null(table.column("model"), "")
        path = pc.fill_null(table.column("app.client_path"), "wire")
        joined = pc.binary_join_element_wise(
            table.column("provider"), table.column("experiment"), model, path, "\x00"
        )
        coded = pc.dictionary_encode(joined).combine_chunks()
        codes = coded.indices.to_numpy()
        for code, text in enumerate(coded.dictionary.to_pylist()):
            rows = np.flatnonzero(codes == code)
            if not rows.size:
                continue
            provider, experiment, model_, path_ = text.split("\x00")
            key = (provider, experiment, model_, path_)
            self.buffered.setdefault(key, []).append(table.take(pa.array(rows)))
            self.counts[key] = self.counts.get(key, 0) + int(rows.size)
            if self.counts[key] >= ROW_GROUP_ROWS:
                self.flush(key)
        while sum(self.counts.values()) > MAX_BUFFERED:
            self.flush(max(self.counts, key=self.counts.__getitem__))

    def flush(self, key: tuple[str, str, str, str]) -> None:
        """Write `key`'s buffered rows as one row group."""
        table = pa.concat_tables(self.buffered.pop(key))
        del self.counts[key]
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.row_groups.setdefault(key, []).append(self.written)
        self.rows[key] = self.rows.get(key, 0) + table.num_rows
        self.written += 1

    def groups(self) -> list[Group]:
        """Every group written, in their sorted order (all buffers written first)."""
        for key in list(self.buffered):
            self.flush(key)
        return [
            Group(*key, self.rows[key], tuple(self.row_groups[key])) for key in sorted(self.rows)
        ]


def build_sidecar(run_dir: Path) -> Sidecar | None:
    """Read `run_dir`'s records.jsonl once into its sidecar (see the module); None when
    DuckDB cannot read it as a whole or the folder cannot be written (the caller reads
    records.jsonl as before)."""
    import duckdb

    records = run_dir / _load.RECORDS_FILE
    stamp = _stamp(records)
    tag = f".{os.getpid()}.tmp"
    sidecar_tmp = run_dir / (SIDECAR_FILE + tag)
    index_tmp = run_dir / (SIDECAR_INDEX + tag)
    skipped: dict[int, str] = {}
    try:
        lines = _load.record_lines(records)
        offsets = lines[1]
        with pq.ParquetWriter(sidecar_tmp, _schema()) as writer:
            groups = _GroupWriter(writer)

            def write(first_row: int, batch: pa.RecordBatch, valid: np.ndarray) -> None:
                at = offsets[first_row : first_row + batch.num_rows]
                if at.size == batch.num_rows:  # else the file and the rows differ: refused
                    groups.add(_batch_table(batch, valid, at))

            scanned = _load.scan_batches(records, None, write, lines)
            if scanned is None:
                return None
            doubtful = _doubtful_table(records, scanned, run_dir, skipped)
            if doubtful is not None:
                groups.add(doubtful)
            found = groups.groups()
        repeated = _repeated(sidecar_tmp)
        index = {
            "version": VERSION,
            "source": stamp,
            "groups": [[*g.key, g.rows, list(g.row_groups)] for g in found],
            "skipped": {str(k): v for k, v in sorted(skipped.items())},
            "repeated": repeated,
        }
        index_tmp.write_text(json.dumps(index), encoding="utf-8")
        os.replace(sidecar_tmp, run_dir / SIDECAR_FILE)
        os.replace(index_tmp, run_dir / SIDECAR_INDEX)  # last: the pair is whole
    except (OSError, duckdb.Error, pa.ArrowException) as exc:
        log.info("%s: no columnar sidecar (%s); records.jsonl is read whole", run_dir, exc)
        return None
    finally:
        sidecar_tmp.unlink(missing_ok=True)
        index_tmp.unlink(missing_ok=True)
    return open_sidecar(run_dir)


def _repeated(path: Path) -> dict[str, Any]:
    """The lines that repeat a record_id read before (their byte offsets), how many, and
    how many records they repeat (DuckDB, over the sidecar's record_id column)."""
    import duckdb

    with duckdb.connect(config={"memory_limit": SORT_MEMORY}) as con:
        con.execute("SET enable_progress_bar = false")
        (total, distinct) = con.execute(
            "SELECT count(*), count(DISTINCT record_id) FROM read_parquet(?)", [str(path)]
        ).fetchone() or (0, 0)
        if total == distinct:
            return {"lines": 0, "records": 0, "offsets": []}
        again = con.execute(
            "SELECT file_offset, record_id FROM (SELECT file_offset, record_id, row_number() "
            "OVER (PARTITION BY record_id ORDER BY file_offset) AS n FROM read_parquet(?)) "
            "WHERE n > 1 ORDER BY file_offset",
            [str(path)],
        ).fetchall()
    return {
        "lines": len(again),
        "records": len({rid for _, rid in again}),
        "offsets": [int(at) for at, _ in again],
    }


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
        groups = [Group(p, e, m, c, int(n), tuple(rg)) for p, e, m, c, n, rg in index["groups"]]
        skipped = {int(k): str(v) for k, v in index["skipped"].items()}
        repeated = index["repeated"]
        return Sidecar(
            run_dir,
            path,
            groups,
            skipped,
            int(repeated["lines"]),
            int(repeated["records"]),
            [int(x) for x in repeated["offsets"]],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


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


def _read_for_load(
    run_dir: Path, columns: Collection[str] | None
) -> tuple[pd.DataFrame, dict[int, str]] | None:
    """`labkit.report.load.sidecar_reader`: the frame through the run's sidecar (the
    lines that repeat a record kept: `load_run` counts and drops them itself)."""
    side = sidecar(run_dir)
    if side is None:
        return None
    return side.frame(None, columns, dedup=False), dict(side.skipped)


_load.sidecar_reader = _read_for_load
