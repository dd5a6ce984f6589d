"""A run's records as columns on disk: the columnar sidecar beside records.jsonl.

``records.jsonl`` stays the source of truth. A large run's records (`SIDECAR_MIN_BYTES` or more)
are read from it once, with the frame's reading and checks (`labkit.report.load.scan_batches`),
into ``records.columns/``: Parquet parts (`Part`), each the records of one byte range of
records.jsonl with one row group per group of the statistics, so the report reads one group's
columns at a time (`Sidecar.frames`) and never holds the whole run. The runner's child process
converts the parts as the run records (`convert`); the first reader converts what they lack.
What the parts and ``index.json`` hold, why Parquet written by group, and the figures:
docs/report.md, "A large run: the columnar sidecar".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labkit.report import load as _load

__all__ = [
    "SIDECAR_DIR",
    "SIDECAR_INDEX",
    "SIDECAR_MIN_BYTES",
    "Group",
    "Part",
    "Sidecar",
    "build_sidecar",
    "convert",
    "open_sidecar",
    "sidecar",
]

log = logging.getLogger(__name__)

#: The sidecar's folder in the run folder: its parts and their index.
SIDECAR_DIR = "records.columns"
INDEX_FILE = "index.json"
LOCK_FILE = ".lock"
#: The index, from the run folder.
SIDECAR_INDEX = f"{SIDECAR_DIR}/{INDEX_FILE}"
#: Yesterday's single-file sidecar (format 2): removed, never read.
OLD_FILES = ("records.columns.parquet", "records.columns.json")

#: The most bytes one part covers when its range is copied out of records.jsonl for DuckDB
#: (a converter that fell behind, a reader completing a killed run): the copy stays small.
#: A whole file converted at once is read in place, as one part.
MAX_PART_BYTES = 1 << 30

#: The bytes of a part's range whose digest is its fingerprint, at each end.
EDGE_BYTES = 1024

#: A records.jsonl this large or larger is read through its sidecar (about 20,000
#: records); a smaller one is read whole, which is quick and writes nothing.
SIDECAR_MIN_BYTES = 64 << 20

#: The sidecar's format: a sidecar of another version is stale.
VERSION = 3

#: Rows per Parquet row group: a group is read as the row groups it spans.
ROW_GROUP_ROWS = 1 << 16

#: DuckDB's memory while it looks for repeated records in the sidecar.
SORT_MEMORY = "400MiB"


@dataclass(frozen=True)
class Group:
    """One group of the statistics in the sidecar: its key, its rows, and the Parquet row
    groups that hold them, as (part, row group in the part's file), in the order of their
    lines (each row group holds one group's rows only)."""

    provider: str
    experiment: str
    model: str
    client_path: str
    rows: int
    row_groups: tuple[tuple[int, int], ...]

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


@dataclass
class Sidecar:
    """An open, complete and fresh sidecar: its parts' files (in the order of their byte
    ranges), its groups (in their sorted order, each the union of its rows in every part)
    and how to read them."""

    run_dir: Path
    paths: list[Path]
    groups: list[Group]
    skipped: dict[int, str]
    repeated: int
    repeated_requests: int
    repeated_offsets: list[int]
    #: The process that converted each part (the runner's converter, or a reader).
    converted_by: list[int]

    @property
    def rows(self) -> int:
        """Rows in the sidecar (the lines that repeat a record among them)."""
        return sum(g.rows for g in self.groups)

    def read(
        self, groups: Sequence[Group] | None = None, columns: Collection[str] | None = None
    ) -> pa.Table:
        """The rows of `groups` (all when None) in the columns asked for (all when None;
        those the sidecar lacks left out), read as their row groups, part after part (so
        in no set order)."""
        names = _schema().names
        wanted = names if columns is None else [c for c in names if c in columns]
        chosen = self.groups if groups is None else groups
        by_part: dict[int, list[int]] = {}
        for g in chosen:
            for part, i in g.row_groups:
                by_part.setdefault(part, []).append(i)
        if not by_part:
            return _schema().empty_table().select(wanted)
        tables = [
            pq.ParquetFile(self.paths[part]).read_row_groups(sorted(ids), columns=wanted)
            for part, ids in sorted(by_part.items())
        ]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

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
        with _system_pool():
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

    def text_tags(self) -> set[str]:
        """The tags (`tags.<key>`'s keys) that are text somewhere in the run: the whole
        frame types such a tag as text in every row (read a row group at a time)."""
        keys: set[str] = set()
        for path in self.paths:
            for batch in pq.ParquetFile(path).iter_batches(columns=["tags"]):
                texts = pc.unique(batch.column("tags")).drop_null().to_pylist()
                for text in texts:
                    tags = json.loads(text)
                    if isinstance(tags, dict):
                        keys.update(
                            k
                            for k, v in tags.items()
                            if v is not None
                            and (isinstance(v, bool) or not isinstance(v, int | float))
                        )
        return keys

    def all_null(self, column: str) -> bool:
        """Whether `column` is null in every row (read a row group at a time)."""
        for path in self.paths:
            for batch in pq.ParquetFile(path).iter_batches(columns=[column]):
                if batch.column(0).null_count < batch.num_rows:
                    return False
        return True

    def chunks(
        self, text_tags: Collection[str] = (), columns: Collection[str] | None = None
    ) -> Iterator[pd.DataFrame]:
        """The records frame (without the lines that repeat a record) a Parquet row group
        at a time, part after part: at most `ROW_GROUP_ROWS` rows held; `text_tags`
        (`text_tags`) typed as text, as in the whole frame; `columns` as in `frame` (every
        column when None)."""
        again = pa.array(self.repeated_offsets, pa.int64())
        wanted = None if columns is None else frozenset(columns) | _load._ALWAYS
        names = _schema().names
        read = None if wanted is None else [c for c in names if c in wanted | {"tags"}]
        for path in self.paths:
            file = pq.ParquetFile(path)
            for i in range(file.num_row_groups):
                with _system_pool():
                    table = file.read_row_group(i, columns=read)
                    if len(again):
                        offsets = table.column("file_offset")
                        table = table.filter(pc.invert(pc.is_in(offsets, again)))
                    frame = table_frame(table, self.run_dir, wanted, text_tags)
                del table
                if len(frame):
                    yield frame

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


@contextlib.contextmanager
def _system_pool() -> Iterator[None]:
    """Arrow's allocations made with the C library's allocator meanwhile: a part's columns
    are read from many small row groups (one per group per part of the sidecar), and
    mimalloc, Arrow's default, kept what they freed: at 10⁶ records in 14 parts the report
    peaked at 608 MiB with it, 412 MiB without (the C library's is given back by
    `labkit.report.load._give_back`)."""
    before = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def table_frame(
    table: pa.Table,
    run_dir: Path,
    wanted: frozenset[str] | None,
    text_tags: Collection[str] = (),
) -> pd.DataFrame:
    """A sidecar table as the records frame: the same columns, types and order as
    `load_run` gives (texts as objects, numbers as float64, tags typed as the reader types
    them, those of `text_tags` as text), its rows in the order of their lines."""
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
        tags = table.column("tags").combine_chunks()
        for key, values in _load._tags_of_json(tags, text_tags).items():
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
    records: Path,
    scanned: _load.Scanned,
    run_dir: Path,
    skipped: dict[int, str],
    lines_before: int = 0,
    start: int = 0,
) -> pa.Table | None:
    """The lines DuckDB doubted, each read by the line reader: those that are records
    after all as sidecar rows, the others into `skipped` (`records` holds bytes from
    `start` of records.jsonl, its first line the one after `lines_before`)."""
    rows: list[dict[str, Any]] = []
    named = run_dir / _load.RECORDS_FILE
    with records.open("rb") as fh:
        for row in scanned.doubted:
            number = int(scanned.numbers[row]) + lines_before
            offset = int(scanned.offsets[row])
            fh.seek(offset)
            line = fh.read(int(scanned.lengths[row]))
            frame = _load._parse_block(line, number - 1, offset + start, named, run_dir, skipped)
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
        """Every group written, in their sorted order (all buffers written first), its
        row groups as (0, row group): this file's."""
        for key in list(self.buffered):
            self.flush(key)
        return [
            Group(*key, self.rows[key], tuple((0, i) for i in self.row_groups[key]))
            for key in sorted(self.rows)
        ]


# --- Building it, a part at a time -------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One part of the sidecar: the records of bytes [start, end) of records.jsonl (a range
    that ends a line, or the file), in `file` under `SIDECAR_DIR`; `lines`: the lines it
    covers (blank ones too: the next part's first line is the one after); `head` and
    `tail`: a fingerprint of the range's first and last KiB; `pid`: the process that
    converted it."""

    file: str
    start: int
    end: int
    lines: int
    head: str
    tail: str
    groups: tuple[Group, ...]
    skipped: dict[int, str]
    pid: int

    def entry(self) -> dict[str, Any]:
        """The part as the index holds it."""
        return {
            "file": self.file,
            "start": self.start,
            "end": self.end,
            "lines": self.lines,
            "head": self.head,
            "tail": self.tail,
            "groups": [[*g.key, g.rows, [rg for _, rg in g.row_groups]] for g in self.groups],
            "skipped": {str(k): v for k, v in sorted(self.skipped.items())},
            "pid": self.pid,
        }

    @classmethod
    def of_entry(cls, entry: dict[str, Any]) -> Part:
        """A part from its index entry (KeyError, TypeError or ValueError when malformed)."""
        groups = tuple(
            Group(str(p), str(e), str(m), str(c), int(n), tuple((0, int(i)) for i in rg))
            for p, e, m, c, n, rg in entry["groups"]
        )
        name = str(entry["file"])
        if "/" in name or not name.endswith(".parquet"):
            raise ValueError(f"not a part's file name: {name!r}")
        return cls(
            name,
            int(entry["start"]),
            int(entry["end"]),
            int(entry["lines"]),
            str(entry["head"]),
            str(entry["tail"]),
            groups,
            {int(k): str(v) for k, v in entry["skipped"].items()},
            int(entry["pid"]),
        )


def _fingerprint(fh: BinaryIO, start: int, end: int) -> tuple[str, str]:
    """A digest of the first and of the last `EDGE_BYTES` of bytes [start, end) of `fh`."""
    fh.seek(start)
    head = fh.read(min(EDGE_BYTES, end - start))
    fh.seek(max(start, end - EDGE_BYTES))
    tail = fh.read(min(EDGE_BYTES, end - start))
    return (
        hashlib.blake2b(head, digest_size=8).hexdigest(),
        hashlib.blake2b(tail, digest_size=8).hexdigest(),
    )


def _valid_parts(index: Any, records: Path) -> tuple[list[Part], dict[str, Any]] | None:
    """The index's parts, when each still covers the bytes it was made from: the ranges
    follow each other from byte 0; each lies inside records.jsonl, ends a line (or ends the
    file), and its first and last KiB are as they were; and a file no longer than the parts
    is as it was when the last was made (its modification time: a same-size rewrite); each
    part file's Parquet footer matches its entry (rows, row groups). None when one does not
    (records.jsonl truncated or rewritten, a part file damaged: everything is rebuilt)."""
    try:
        if not isinstance(index, dict) or index.get("version") != VERSION:
            return None
        parts = [Part.of_entry(e) for e in index["parts"]]
        with records.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            mtime = os.fstat(fh.fileno()).st_mtime_ns
            at = 0
            for part in parts:
                if part.start != at or part.end <= part.start or part.end > size:
                    return None
                if _fingerprint(fh, part.start, part.end) != (part.head, part.tail):
                    return None
                fh.seek(part.end - 1)
                if fh.read(1) != b"\n" and part.end != size:
                    return None  # a cut last line since continued
                at = part.end
        if at == size and parts and index.get("mtime_ns") != mtime:
            return None
        folder = records.parent / SIDECAR_DIR
        for part in parts:
            # A part file cut short or overwritten has no footer that matches its entry.
            meta = pq.read_metadata(folder / part.file)
            last = max((i for g in part.groups for _, i in g.row_groups), default=-1)
            if meta.num_rows != sum(g.rows for g in part.groups) or meta.num_row_groups <= last:
                return None
        return parts, index
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None


#: The largest index.json read (a 10⁷-record run's is some hundreds of KiB): a larger one
#: is not an index this module wrote, and the sidecar is rebuilt.
MAX_INDEX_BYTES = 64 << 20


def _read_index(run_dir: Path) -> Any:
    """index.json, or None when it is missing, too large, not UTF-8, not JSON or nested too
    deep to read (the sidecar is then rebuilt from records.jsonl)."""
    try:
        with (run_dir / SIDECAR_INDEX).open("rb") as fh:
            data = fh.read(MAX_INDEX_BYTES + 1)
        if len(data) > MAX_INDEX_BYTES:
            return None
        return json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def _line_end(records: Path, size: int) -> int:
    """The end of the last whole line of the first `size` bytes of `records` (0: none)."""
    step = 1 << 16
    with records.open("rb") as fh:
        at = size
        while at > 0:
            begin = max(0, at - step)
            fh.seek(begin)
            chunk = fh.read(at - begin)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return begin + newline + 1
            at = begin
    return 0


def _copy_range(records: Path, start: int, end: int, target: Path) -> None:
    """Bytes [start, end) of `records` into `target` (in the kernel where it can)."""
    with records.open("rb") as src, target.open("wb") as dst:
        left, at = end - start, start
        while left > 0:
            try:
                n = os.copy_file_range(src.fileno(), dst.fileno(), left, at)
            except OSError:
                n = 0
            if n <= 0:  # not supported here: by reads and writes
                src.seek(at)
                data = src.read(min(left, 8 << 20))
                if not data:
                    raise OSError(f"{records} is shorter than {end} bytes")
                dst.write(data)
                n = len(data)
            left -= n
            at += n


def _lines_in(
    records: Path,
    start: int,
    end: int,
    numbers: np.ndarray,
    lengths: np.ndarray,
    offsets: np.ndarray,
) -> int:
    """The lines of bytes [start, end) of `records` (a cut last one counted), given the
    range's non-blank lines (numbers from 1 within the range, offsets within it)."""
    after = start + (int(offsets[-1] + lengths[-1]) if numbers.size else 0)
    count = int(numbers[-1]) if numbers.size else 0
    with records.open("rb") as fh:
        fh.seek(after)
        while after < end:
            chunk = fh.read(min(end - after, 8 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            after += len(chunk)
            if after == end and not chunk.endswith(b"\n"):
                count += 1
    return count


def _convert_range(
    run_dir: Path, start: int, end: int, lines_before: int, number: int
) -> Part | None:
    """Bytes [start, end) of records.jsonl as part `number` of the sidecar (see `Part`);
    None when DuckDB cannot read the range as a whole (its reader reads it as before)."""
    records = run_dir / _load.RECORDS_FILE
    folder = run_dir / SIDECAR_DIR
    tag = f".{os.getpid()}.tmp"
    name = f"part-{number:05d}.parquet"
    part_tmp = folder / (name + tag)
    range_tmp = folder / f"range{tag}.jsonl"
    try:
        if start == 0 and end == records.stat().st_size:
            source = records
        else:
            _copy_range(records, start, end, range_tmp)
            source = range_tmp
        lines = _load.record_lines(source)
        numbers, offsets, lengths = lines
        skipped: dict[int, str] = {}
        with pq.ParquetWriter(part_tmp, _schema()) as writer:
            groups = _GroupWriter(writer)

            def write(first_row: int, batch: pa.RecordBatch, valid: np.ndarray) -> None:
                at = offsets[first_row : first_row + batch.num_rows]
                if at.size == batch.num_rows:  # else the file and the rows differ: refused
                    groups.add(_batch_table(batch, valid, at + start))

            scanned = _load.scan_batches(source, None, write, lines)
            if scanned is None:
                return None
            doubtful = _doubtful_table(source, scanned, run_dir, skipped, lines_before, start)
            if doubtful is not None:
                groups.add(doubtful)
            found = groups.groups()
        count = _lines_in(records, start, end, numbers, lengths, offsets)
        with records.open("rb") as fh:
            head, tail = _fingerprint(fh, start, end)
        os.replace(part_tmp, folder / name)
        return Part(name, start, end, count, head, tail, tuple(found), skipped, os.getpid())
    finally:
        part_tmp.unlink(missing_ok=True)
        range_tmp.unlink(missing_ok=True)


def _write_index(
    run_dir: Path, parts: Sequence[Part], repeated: dict[str, Any] | None, mtime_ns: int
) -> None:
    """The index, replaced whole (a reader sees the old one or the new one); files of the
    folder no part names (a rebuilt sidecar's, a killed converter's) removed after."""
    folder = run_dir / SIDECAR_DIR
    index = {
        "version": VERSION,
        "parts": [p.entry() for p in parts],
        "mtime_ns": mtime_ns,
        "repeated": repeated,
    }
    tmp = folder / f"{INDEX_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(index), encoding="utf-8")
    os.replace(tmp, folder / INDEX_FILE)
    keep = {p.file for p in parts} | {INDEX_FILE, LOCK_FILE}
    for child in folder.iterdir():
        if child.name not in keep and not child.name.endswith(f".{os.getpid()}.tmp"):
            with contextlib.suppress(OSError):
                child.unlink()


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """The sidecar's folder, made if missing, held by this process alone (a converter of
    the runner's and a reader never convert at once: the second waits, then converts only
    what the first left)."""
    folder = run_dir / SIDECAR_DIR
    folder.mkdir(exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def convert(run_dir: Path | str, *, final: bool = True) -> bool:
    """Convert what the sidecar's parts do not cover yet: the function the runner's
    converter (a child process) and the first reader both call.

    The parts are checked first (`_valid_parts`): when records.jsonl no longer holds the
    bytes they were made from, or the sidecar is of another format (yesterday's single
    file among them), they are removed and everything is converted again. Then the bytes
    after the last part become one new part: up to the last whole line while the run is
    recording (`final` False), or to the end of the file (`final`: a finished run, the
    first reader; then the repeated records are found too). False when the folder cannot
    be written or DuckDB cannot read the records as a whole (the reader then reads
    records.jsonl as before)."""
    import duckdb

    folder = Path(run_dir)
    records = folder / _load.RECORDS_FILE
    try:
        for old in OLD_FILES:  # yesterday's single-file sidecar: never read, replaced
            (folder / old).unlink(missing_ok=True)
        with _locked(folder):
            found = _valid_parts(_read_index(folder), records)
            parts, index = found if found is not None else ([], {})
            repeated = index.get("repeated") if found is not None else None
            st = records.stat()
            covered = parts[-1].end if parts else 0
            end = st.st_size if final else _line_end(records, st.st_size)
            whole = covered == 0 and end == st.st_size  # one part, read in place
            while covered < end:
                stop = end
                if not whole and end - covered > MAX_PART_BYTES:  # a copy: bounded
                    stop = _line_end(records, covered + MAX_PART_BYTES)
                    stop = end if stop <= covered else stop
                lines_before = sum(p.lines for p in parts)
                part = _convert_range(folder, covered, stop, lines_before, len(parts))
                if part is None:
                    return False
                parts.append(part)
                repeated = None
                covered = stop
                _write_index(folder, parts, repeated, st.st_mtime_ns)  # kept if killed
            if final and (repeated is None or repeated.get("end") != end):
                paths = [folder / SIDECAR_DIR / p.file for p in parts]
                repeated = {**_repeated(paths), "end": end}
                _write_index(folder, parts, repeated, st.st_mtime_ns)
            elif found is None:
                _write_index(folder, parts, repeated, st.st_mtime_ns)
    except (OSError, duckdb.Error, pa.ArrowException) as exc:
        log.info("%s: no columnar sidecar (%s); records.jsonl is read whole", folder, exc)
        return False
    return True


def build_sidecar(run_dir: Path) -> Sidecar | None:
    """The run's sidecar made complete (`convert`, final): what the first reader does."""
    return open_sidecar(run_dir) if convert(run_dir, final=True) else None


def _repeated(paths: Sequence[Path]) -> dict[str, Any]:
    """The lines that repeat a record_id read before (their byte offsets), how many, and
    how many records they repeat (DuckDB, over the parts' record_id columns)."""
    import duckdb

    files = [str(p) for p in paths]
    if not files:
        return {"lines": 0, "records": 0, "offsets": []}
    with duckdb.connect(config={"memory_limit": SORT_MEMORY}) as con:
        con.execute("SET enable_progress_bar = false")
        (total, distinct) = con.execute(
            "SELECT count(*), count(DISTINCT record_id) FROM read_parquet(?)", [files]
        ).fetchone() or (0, 0)
        if total == distinct:
            return {"lines": 0, "records": 0, "offsets": []}
        again = con.execute(
            "SELECT file_offset, record_id FROM (SELECT file_offset, record_id, row_number() "
            "OVER (PARTITION BY record_id ORDER BY file_offset) AS n FROM read_parquet(?)) "
            "WHERE n > 1 ORDER BY file_offset",
            [files],
        ).fetchall()
    return {
        "lines": len(again),
        "records": len({rid for _, rid in again}),
        "offsets": [int(at) for at, _ in again],
    }


# --- Opening it ----------------------------------------------------------------------------


def open_sidecar(run_dir: Path) -> Sidecar | None:
    """`run_dir`'s sidecar when it is there, complete and fresh (its parts cover
    records.jsonl as it is now, by this version, its repeated records found); None
    otherwise."""
    records = run_dir / _load.RECORDS_FILE
    found = _valid_parts(_read_index(run_dir), records)
    if found is None:
        return None
    parts, index = found
    try:
        size = records.stat().st_size
        repeated = index.get("repeated")
        if (parts[-1].end if parts else 0) != size or not isinstance(repeated, dict):
            return None
        if repeated.get("end") != size:
            return None
        merged: dict[tuple[str, str, str, str], tuple[int, list[tuple[int, int]]]] = {}
        skipped: dict[int, str] = {}
        for k, part in enumerate(parts):
            for g in part.groups:
                rows, ids = merged.get(g.key, (0, []))
                merged[g.key] = (rows + g.rows, ids + [(k, i) for _, i in g.row_groups])
            skipped.update(part.skipped)
        groups = [Group(*key, rows, tuple(ids)) for key, (rows, ids) in sorted(merged.items())]
        paths = [run_dir / SIDECAR_DIR / p.file for p in parts]
        if not all(p.is_file() for p in paths):
            return None
        return Sidecar(
            run_dir,
            paths,
            groups,
            skipped,
            int(repeated["lines"]),
            int(repeated["records"]),
            [int(x) for x in repeated["offsets"]],
            [p.pid for p in parts],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def sidecar(run_dir: Path | str, *, min_bytes: int | None = None) -> Sidecar | None:
    """The sidecar of a run of at least `min_bytes` (`SIDECAR_MIN_BYTES`) of records:
    opened when complete and fresh, else completed (only what its parts lack converted);
    None for a smaller run or where it cannot be made."""
    folder = Path(run_dir)
    records = folder / _load.RECORDS_FILE
    limit = SIDECAR_MIN_BYTES if min_bytes is None else min_bytes
    try:
        if records.stat().st_size < limit:
            return None
    except OSError:
        return None
    return open_sidecar(folder) or build_sidecar(folder)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m labkit.report.columnar RUN_DIR [--final]`: the runner's converter (run in
    a child process at the lowest priority: see `labkit.runner.sidecar`)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m labkit.report.columnar")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--final", action="store_true", help="to the end of the file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return 0 if convert(args.run_dir, final=args.final) else 1


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
