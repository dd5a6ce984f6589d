"""Run folders → pandas DataFrames, one row per record, columns named as in the contract.

A run folder holds ``records.jsonl`` (one `RequestRecord` per line), ``manifest.json`` and
perhaps ``lab.json``. Each record is read once, into columns (DuckDB's JSON reader over the
whole file; Arrow's over blocks of lines where DuckDB cannot; `json.loads` for a line either
refuses), keeping only the scalar fields, under dotted names (``client.ttft_ms``,
``tags.variant``...). Each row keeps its line's byte offset (``file_offset``), so
`load_event_offsets` reads the per-event arrays back for the few records a timeline needs. A
line that is not a record is skipped with a logged warning, counted and named (`RunData`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import io
import json
import logging
import math
import os
import re
import types
import typing
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from json import JSONDecodeError
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import BaseModel, ValidationError

from labkit.errors import RunError
from labkit.records import (
    AppTimings,
    ClientTimings,
    LabResults,
    ProviderTimings,
    RecordError,
    RequestRecord,
    Usage,
)

__all__ = [
    "RECORDS_FILE",
    "RunData",
    "load_event_offsets",
    "load_run",
    "load_runs",
    "records_frame",
]

log = logging.getLogger(__name__)

RECORDS_FILE = "records.jsonl"
MANIFEST_FILE = "manifest.json"
LAB_FILE = "lab.json"

# Fields of the contract that are arrays or free-form objects: never in the main frame.
_ARRAY_FIELDS = {"event_offsets_ms", "event_tokens", "stamp_lateness_ms", "raw"}

_TOP_STR = [
    "run_id",
    "record_id",
    "experiment",
    "provider",
    "provider_kind",
    "model",
    "prompt_id",
    "started_at",
    "stop_reason",
    "stop_reason_raw",
    "server_build",
    "system_fingerprint",
    "plan_key",
    "host",
]
_TOP_NUM = ["trial", "attempt", "prompt_chars", "prompt_bytes"]
_ERROR_STR = ["kind", "message"]
_ERROR_NUM = ["status", "retry_after_s"]


def _arrow_type(annotation: Any) -> pa.DataType | None:
    """The Arrow type of a scalar field's annotation (None: not a scalar)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _arrow_type(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is typing.Literal:
        return pa.string() if all(isinstance(a, str) for a in args) else None
    if annotation is bool:
        return pa.bool_()
    if annotation in (int, float):
        return pa.float64()
    if annotation in (str, datetime) or (
        isinstance(annotation, type) and issubclass(annotation, Enum)
    ):
        return pa.string()
    return None


#: The text fields of the timing and usage sections, read from the contract's annotations
#: (a list kept by hand missed each new one: they read as numbers, all NaN).
_STR_FIELDS = {
    name
    for model in (ClientTimings, ProviderTimings, AppTimings, Usage)
    for name, info in model.model_fields.items()
    if name not in _ARRAY_FIELDS and _arrow_type(info.annotation) == pa.string()
}

# A line is taken as a record only when it has the required fields of the contract, of the
# right JSON type (a full validation per line would be far slower than the whole load).
# `run_id` may be missing: the manifest's is used then.
_REQUIRED: list[tuple[str, type]] = [
    (name, int if info.annotation is int else str)
    for name, info in RequestRecord.model_fields.items()
    if info.is_required() and name != "run_id"
]


def _sub_fields(model: type[Any]) -> tuple[list[str], list[str]]:
    """Numeric and string scalar field names of one timing/usage model (arrays left out)."""
    num: list[str] = []
    txt: list[str] = []
    for name in model.model_fields:
        if name in _ARRAY_FIELDS:
            continue
        (txt if name in _STR_FIELDS else num).append(name)
    return num, txt


# (section in the record, numeric fields, string fields), taken from the records module so
# the frame follows the contract when a field is added.
_SECTIONS: list[tuple[str, list[str], list[str]]] = [
    ("client", *_sub_fields(ClientTimings)),
    ("provider_timings", *_sub_fields(ProviderTimings)),
    ("app", *_sub_fields(AppTimings)),
    ("usage", *_sub_fields(Usage)),
]


@dataclass
class RunData:
    """One run folder, loaded: its records frame, manifest and lab answers.

    `skipped_lines` counts the lines that are not records (typically the last one, cut short
    when a run was killed; or a JSON line without a record's required fields), each skipped
    with a logged warning and named, with why, in `problems`.
    """

    run_dir: Path
    records: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    lab: LabResults | None = None
    skipped_lines: int = 0
    problems: list[str] = field(default_factory=list)
    #: Lines that repeat a record already read (the same `record_id`): each counted once.
    repeated_records: int = 0

    @property
    def label(self) -> str:
        """A short name for this run: the manifest's name, else the folder's."""
        name = self.manifest.get("name")
        return str(name) if name else self.run_dir.name


def _columns() -> list[str]:
    cols = ["run_id", "run_dir", "file_offset", "ok", "warmup"]
    cols += [c for c in _TOP_STR if c != "run_id"] + _TOP_NUM
    cols += [f"error.{c}" for c in _ERROR_STR + _ERROR_NUM]
    for section, num, txt in _SECTIONS:
        cols += [f"{section}.{c}" for c in num + txt]
    cols.append("client.n_events")
    return cols


def _as_float(v: int | float) -> float:
    """`v` as a float; an integer beyond a float's range as ±inf, as DuckDB reads it."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _num(v: Any) -> float | None:
    """One value as a number column holds it, whatever its neighbours: a number (true 1,
    false 0), an ASCII text numpy reads as one ("12.5", as DuckDB does), else None."""
    if isinstance(v, int | float):
        return _as_float(v)
    if isinstance(v, str) and v.isascii():
        try:
            return float(np.array(v, dtype=float))
        except (ValueError, OverflowError):
            return None
    return None


def _floats(values: list[Any]) -> Any:
    """A float64 array, one value a row (None → NaN, and anything `_num` does not read).

    numpy casts the whole list at once; where it cannot (a value that is no number), or
    casts an array of arrays into more dimensions, each value is read alone, so that one
    record's reading never depends on another's (a "12.5" read NaN beside an "x" in the
    same chunk, and a list in every row raised). So is a chunk with a text not ASCII in it:
    numpy reads other scripts' digits ("١٢", "１２") as a number, DuckDB (at once) does not."""
    try:
        out = np.array(values, dtype=float)
    except (TypeError, ValueError, OverflowError):
        out = None
    if out is None or out.ndim != 1 or not _ascii_texts(values):
        out = np.array([_num(v) for v in values], dtype=float)
    return out


def _ascii_texts(values: list[Any]) -> bool:
    """Whether every text among `values` is ASCII (true where there is none: the common
    case, one pass over the types in C)."""
    return str not in map(type, values) or all(v.isascii() for v in values if type(v) is str)


def _texts(values: list[Any]) -> Any:
    if any(v is not None and not isinstance(v, str) for v in values):
        values = [None if v is None else str(v) for v in values]
    return pd.array(values, dtype="object")


_OFFSETS_KEY = b'"event_offsets_ms":['


def _strip_offsets(raw: bytes) -> tuple[bytes, int | None]:
    """Cut the event-offset array out of a line before parsing it, and count its items.

    The array holds only numbers, so its end is the next ``]``. A key inside a JSON string
    is escaped (``\\"event_offsets_ms\\"``) and cannot match. Lines written another way
    (spaces after the colon) are simply parsed whole.
    """
    i = raw.find(_OFFSETS_KEY)
    if i < 0:
        return raw, None
    start = i + len(_OFFSETS_KEY)
    end = raw.find(b"]", start)
    if end < 0:
        return raw, None
    count = raw.count(b",", start, end) + 1 if raw[start:end].strip() else 0
    return raw[:start] + raw[end:], count


_CHUNK = 20_000


def _missing_field(rec: dict[str, Any]) -> str | None:
    """The first required record field `rec` lacks (or holds with the wrong type)."""
    for name, kind in _REQUIRED:
        value = rec.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return name
    return None


def _parse_lines(
    path: Path, run_dir: Path, columns: Collection[str] | None = None
) -> tuple[pd.DataFrame, dict[int, str]]:
    """Read records.jsonl into a typed frame; return it and the skipped lines (number: why).

    The file is read at once into columns by DuckDB (`read_at_once`); the
    lines it could not read as records are read again one by one by the line reader
    (`_parse_block`), which names each and says why. A file DuckDB cannot read as a whole
    is read in blocks of whole lines (`BLOCK_BYTES`) instead, each parsed into columns by
    Arrow's JSON reader (`block_columns`) or, a block Arrow refuses, line by line, so a
    bad line costs that line only and is named. `columns`: only these (and the record's
    identity, `_ALWAYS`, and its tags) are kept.
    """
    wanted = None if columns is None else frozenset(columns) | _ALWAYS
    skipped: dict[int, str] = {}
    at_once = read_at_once(path, wanted)
    if at_once is not None:
        blocks = at_once.pieces
        kept_doubtful = False
        with path.open("rb") as fh:
            for number, offset, length in at_once.doubtful:
                fh.seek(offset)
                doubted = fh.read(length)
                frame = _parse_block(doubted, number - 1, offset, path, run_dir, skipped)
                if len(frame):  # a record after all: put back in its place below
                    blocks.append(_frame_pieces(frame, wanted))
                    kept_doubtful = True
        frame = _assemble(blocks, run_dir, wanted)
        if kept_doubtful:
            frame = frame.sort_values("file_offset", kind="stable", ignore_index=True)
        return frame, dict(sorted(skipped.items()))
    blocks = []
    lines_before = 0
    bytes_before = 0
    with path.open("rb") as fh:
        while True:
            # A block of whole lines: BLOCK_BYTES, then the rest of the line they end in.
            block = bytearray(BLOCK_BYTES)
            size = fh.readinto(block)
            del block[size:]
            if size == BLOCK_BYTES:
                block += fh.readline()
            if not block:
                break
            read = block_columns(block, bytes_before, wanted)
            if read is None:
                frame = _parse_block(
                    bytes(block), lines_before, bytes_before, path, run_dir, skipped
                )
                lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
                read = (_frame_pieces(frame, wanted), [], lines)
            pieces, lacking, lines = read
            for line, name in lacking:
                skipped[lines_before + line] = f"no valid {name!r} field"
                log.warning(
                    "%s line %d: skipped, not a record (no valid %r field)",
                    path,
                    lines_before + line,
                    name,
                )
            blocks.append(pieces)
            lines_before += lines
            bytes_before += len(block)
    return _assemble(blocks, run_dir, wanted), dict(sorted(skipped.items()))


def _first_value_of_each_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # each key where it first came, with its last value
    if len(out) != len(pairs):
        for key, value in reversed(pairs):
            out[key] = value
    return out


#: A line's JSON as the reader at once reads it: a key sent twice keeps its first value
#: (RFC 8259 leaves it open; Python's decoder would keep the last, DuckDB keeps the first).
_load_first_wins = functools.partial(json.loads, object_pairs_hook=_first_value_of_each_key)


def _parse_block(
    block: bytes,
    lines_before: int,
    offset: int,
    path: Path,
    run_dir: Path,
    skipped: dict[int, str],
) -> pd.DataFrame:
    """Parse a block of whole lines one by one with the standard JSON decoder (the path for
    a block Arrow's reader refused, or a line DuckDB's); the lines that are not records go
    into `skipped` (number: why).

    Values are appended raw to per-column lists and typed every `_CHUNK` rows, so memory
    holds at most one chunk of Python objects whatever the size of the run.
    """
    frames: list[pd.DataFrame] = []
    cols: dict[str, list[Any]] = {c: [] for c in _columns()}
    tags: dict[str, list[Any]] = {}
    n = 0
    loads = _load_first_wins
    empty: dict[str, Any] = {}
    # Bind the lists once: this loop runs once per record.
    c_off = cols["file_offset"]
    c_ok = cols["ok"]
    c_warm = cols["warmup"]
    top = [(k, cols[k]) for k in _TOP_STR + _TOP_NUM]
    err = [(k, cols[f"error.{k}"]) for k in _ERROR_STR + _ERROR_NUM]
    sections = [(s, [(k, cols[f"{s}.{k}"]) for k in num + txt]) for s, num, txt in _SECTIONS]
    c_events = cols["client.n_events"]
    for lineno, raw in enumerate(io.BytesIO(block), start=lines_before + 1):
        here = offset
        offset += len(raw)
        if not raw.strip():
            continue
        line, n_events = _strip_offsets(raw)
        try:
            rec = loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            lacking = _missing_field(rec)
            if lacking is not None:
                raise ValueError(f"no valid {lacking!r} field")
        except ValueError as exc:
            why = (
                f"not JSON: {exc.msg}: byte {exc.pos}"
                if isinstance(exc, JSONDecodeError)
                else str(exc)
            )
            skipped[lineno] = why
            log.warning("%s line %d: skipped, not a record (%s)", path, lineno, why)
            continue
        c_off.append(here)
        error = rec.get("error")
        c_ok.append(error is None)
        c_warm.append(rec.get("warmup") is True)
        get = rec.get
        for k, lst in top:
            lst.append(get(k))
        err_sub = error if isinstance(error, dict) else empty
        for k, lst in err:
            lst.append(err_sub.get(k))
        for s, pairs in sections:
            sub = get(s)
            if not isinstance(sub, dict):
                sub = empty
            for k, lst in pairs:
                lst.append(sub.get(k))
        client = get("client")
        offsets = client.get("event_offsets_ms") if isinstance(client, dict) else None
        if not isinstance(offsets, list):
            n_events = None  # an array cut out of the line was not the client's
        elif n_events is None or offsets:  # parsed whole, or the one cut out was another's
            n_events = len(offsets)
        c_events.append(n_events)
        rec_tags = get("tags")
        if rec_tags and isinstance(rec_tags, dict):
            for tk, tv in rec_tags.items():
                tag_list = tags.get(tk)
                if tag_list is None:
                    tag_list = tags[tk] = [None] * n
                tag_list.append(tv)
        n += 1
        for tag_list in tags.values():
            if len(tag_list) < n:
                tag_list.append(None)
        if n == _CHUNK:
            frames.append(records_frame(cols, tags, run_dir))
            for lst in cols.values():
                lst.clear()
            tags = {}
            n = 0
    if n or not frames:
        frames.append(records_frame(cols, tags, run_dir))
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True)


def _tag_column(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        try:
            return np.array(values, dtype=float)
        except OverflowError:  # an integer beyond a float's range: each value alone
            return np.array([math.nan if v is None else _as_float(v) for v in values], float)
    return pd.array([None if v is None else str(v) for v in values], dtype="object")


def records_frame(
    cols: dict[str, list[Any]], tags: dict[str, list[Any]], run_dir: Path
) -> pd.DataFrame:
    """Build the typed frame from column lists (numeric → float64, text → object)."""
    n = len(cols["ok"])
    data: dict[str, Any] = {}
    for name, values in cols.items():
        if name in ("ok", "warmup"):
            data[name] = np.array(values, dtype=bool)
        elif name == "file_offset":
            data[name] = np.array(values, dtype=np.int64)
        elif _is_text(name):
            data[name] = _texts(values)
        else:
            data[name] = _floats(values)
    data["run_dir"] = pd.array([str(run_dir)] * n, dtype="object")
    for tk, values in tags.items():
        data[f"tags.{tk}"] = _tag_column(values)
    return pd.DataFrame(data)


def _is_text(column: str) -> bool:
    name = column.rsplit(".", 1)[-1]
    if column.startswith("error."):
        return name in _ERROR_STR
    if "." not in column:
        return column in _TOP_STR or column == "run_dir"
    return name in _STR_FIELDS


def _read_json(path: Path, problems: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} could not be read ({exc}); it was ignored.")
        return None


def run_folder(path: Path | str) -> Path:
    """`path` as a run folder; raises `RunError` when it is not one."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a run folder (no such directory)")
    if not (run_dir / RECORDS_FILE).is_file():
        raise RunError(f"{run_dir} is not a run folder: {RECORDS_FILE} is missing")
    return run_dir


def skipped_note(skipped: dict[int, str]) -> list[str]:
    """The problem to state for the lines of records.jsonl that are not records."""
    if not skipped:
        return []
    numbers = list(skipped)
    where = ", ".join(str(n) for n in numbers[:5]) + (", ..." if len(numbers) > 5 else "")
    return [
        f"{len(skipped)} line(s) of {RECORDS_FILE} are not valid records and were skipped "
        f"(line {where}); line {numbers[0]}: {skipped[numbers[0]]}. A run cut short "
        "leaves a truncated last line."
    ]


def repeated_note(count: int, requests: int) -> str:
    """The problem to state for the lines that repeat a record read before."""
    return (
        f"{count} line(s) of {RECORDS_FILE} repeat {requests} record(s) already read (the "
        "same record_id); each record is counted once."
    )


def run_meta(run_dir: Path, problems: list[str]) -> tuple[dict[str, Any], LabResults | None]:
    """The run's manifest and lab answers (what cannot be read: said in `problems`)."""
    manifest: dict[str, Any] = {}
    if (run_dir / MANIFEST_FILE).is_file():
        raw = _read_json(run_dir / MANIFEST_FILE, problems)
        if isinstance(raw, dict):
            manifest = raw
        elif raw is not None:
            problems.append(f"{MANIFEST_FILE} is not a JSON object; it was ignored.")
    else:
        problems.append(f"{MANIFEST_FILE} is missing: run metadata is not shown.")
    lab: LabResults | None = None
    if (run_dir / LAB_FILE).is_file():
        raw = _read_json(run_dir / LAB_FILE, problems)
        if raw is not None:
            try:
                lab = LabResults.model_validate(raw)
            except ValidationError as exc:
                problems.append(
                    f"{LAB_FILE} does not match the LabResults model "
                    f"({exc.error_count()} error(s)); the lab answers are not shown."
                )
    return manifest, lab


#: How a run is read through its columnar sidecar: the frame (`columns` of it) and the
#: skipped lines, or None where the run has no sidecar and should have none (a small run).
#: `labkit.report.columnar` sets it when imported (it imports this module, not the other
#: way round), which importing `labkit.report` or any module of it does.
SidecarReader = Callable[[Path, Collection[str] | None], tuple[pd.DataFrame, dict[int, str]] | None]
sidecar_reader: SidecarReader | None = None


def _read_records(
    run_dir: Path, columns: Collection[str] | None
) -> tuple[pd.DataFrame, dict[int, str]]:
    """The records frame and the skipped lines: from the run's columnar sidecar where it
    has one, or should (`sidecar_reader`), else from records.jsonl itself."""
    read = sidecar_reader(run_dir, columns) if sidecar_reader is not None else None
    if read is not None:
        return read
    return _parse_lines(run_dir / RECORDS_FILE, run_dir, columns)


def load_run(path: Path | str, columns: Collection[str] | None = None) -> RunData:
    """Load one run folder. Raises `RunError` when it is not a run folder.

    `columns`: keep only these columns of the frame (with the record's identity and its
    tags), for a reader of a large run that needs a few.
    """
    run_dir = run_folder(path)
    records_path = run_dir / RECORDS_FILE
    problems: list[str] = []
    try:
        frame, skipped = _read_records(run_dir, columns)
    except OSError as exc:
        raise RunError(f"cannot read {records_path}: {exc}") from exc
    problems += skipped_note(skipped)
    repeated = _drop_repeated_records(frame)
    if repeated:
        frame = frame[~repeated.mask].reset_index(drop=True)
        problems.append(repeated.note)
    manifest, lab = run_meta(run_dir, problems)
    if len(frame) and frame["run_id"].isna().all():
        frame["run_id"] = str(manifest.get("run_id", run_dir.name))
    return RunData(
        run_dir, frame, manifest, lab, len(skipped), problems, repeated.count if repeated else 0
    )


@dataclass(frozen=True)
class _Repeated:
    mask: pd.Series
    count: int
    note: str


def _drop_repeated_records(frame: pd.DataFrame) -> _Repeated | None:
    """The lines that repeat a `record_id` read before (a records file concatenated or a line
    copied twice): one request, so it is counted once, the first line kept."""
    if "record_id" not in frame.columns or not len(frame):
        return None
    ids = frame["record_id"]
    mask = ids.notna() & ids.duplicated(keep="first")
    count = int(mask.sum())
    if not count:
        return None
    return _Repeated(mask, count, repeated_note(count, ids[mask].nunique()))


def load_runs(paths: Iterable[Path | str]) -> pd.DataFrame:
    """Load one or more run folders into one frame (one row per record, `run_dir` set)."""
    frames = [load_run(p).records for p in paths]
    if not frames:
        return records_frame({c: [] for c in _columns()}, {}, Path("."))
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True)


def load_event_offsets(df: pd.DataFrame) -> dict[str, list[float]]:
    """Read `client.event_offsets_ms` back for the rows of `df` (keyed by `record_id`).

    Only the lines of those rows are read (by their byte offset), so this stays cheap for a
    handful of records whatever the size of the run.
    """
    return load_client_array(df, "event_offsets_ms")


def load_client_array(df: pd.DataFrame, name: str) -> dict[str, list[float]]:
    """Read the per-event array ``client.<name>`` back for the rows of `df` (keyed by
    `record_id`; rows without it are left out), from their lines in records.jsonl."""
    out: dict[str, list[float]] = {}
    for run_dir, rows in df.groupby("run_dir", sort=False):
        path = Path(str(run_dir)) / RECORDS_FILE
        with path.open("rb") as fh:
            for off, rid in zip(rows["file_offset"], rows["record_id"], strict=True):
                fh.seek(int(off))
                try:
                    rec = json.loads(fh.readline())
                    values = rec["client"][name]
                except (ValueError, KeyError, TypeError):
                    continue
                if isinstance(values, list):
                    out[str(rid)] = [float(x) for x in values if isinstance(x, int | float)]
    return out


def ensure_columns(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Return `df` with any missing column added as all-NaN (for frames built by hand)."""
    missing = [c for c in columns if c not in df.columns]
    if not missing:
        return df
    extra = pd.DataFrame({c: np.full(len(df), np.nan) for c in missing}, index=df.index)
    return pd.concat([df, extra], axis=1)


# --- Reading a block at once, with Arrow -------------------------------------------------
#
# Why Arrow (pyarrow): labkit already depends on it (summary.parquet), its reader parses
# newline-delimited JSON in C++ on every core straight into typed columns, and with an
# explicit schema it only tokenizes the fields the frame leaves out (output text, params,
# logprobs) and converts no number it does not keep. DuckDB would read as fast but is a
# large new dependency whose reader skips a malformed line without naming it; polars is a
# new dependency too.
#
# The schema comes from the record models, so the frame follows the contract. Arrow refuses
# the whole block when one line is not JSON or holds a value of another JSON type than the
# contract's (`block_frame` returns None): the loader then parses that block line by line and
# names the bad lines. A line of the right types but without a required field is named here.
# Tags (free-form) are read by a second, inferring pass over the block's ``"tags"`` objects.

#: Bytes of whole lines read and parsed at a time: memory holds about one block's columns.
BLOCK_BYTES = 16 << 20

#: Arrow's unit of parallel parsing; a longer line makes the block fall back to line by line.
_ARROW_BLOCK = 4 << 20

# A record's tags: scalars only, so its object has no nested braces (one that does, or a
# second "tags" key on a line, makes the tags pass fall back).
_TAGS = re.compile(rb'"tags":(\{[^{}]*\})')


def _struct(model: type[BaseModel], names: list[str], extra: list[pa.Field]) -> pa.StructType:
    fields = []
    for name in names:
        kind = _arrow_type(model.model_fields[name].annotation)
        if kind is not None:
            fields.append(pa.field(name, kind))
    return pa.struct(fields + extra)


def _schema(wanted: frozenset[str] | None) -> pa.Schema:
    """The Arrow schema of the frame's fields (`wanted` of them; the required ones always)."""
    required = {name for name, _ in _REQUIRED}

    def keep(name: str) -> bool:
        return wanted is None or name in wanted or name in required

    record = RequestRecord.model_fields
    fields = [pa.field("warmup", pa.bool_()), pa.field("tags", pa.struct([]))]
    for name in _TOP_STR + _TOP_NUM:
        kind = _arrow_type(record[name].annotation)
        if name in ("prompt_chars", "prompt_bytes"):  # required integers
            kind = pa.int64()
        if keep(name):
            fields.append(pa.field(name, kind or pa.string()))
    error = [name for name in _ERROR_STR + _ERROR_NUM if keep(f"error.{name}")]
    fields.append(pa.field("error", _struct(RecordError, error, [])))
    models: dict[str, type[BaseModel]] = {
        "client": ClientTimings,
        "provider_timings": ProviderTimings,
        "app": AppTimings,
        "usage": Usage,
    }
    for section, num, txt in _SECTIONS:
        names = [name for name in num + txt if keep(f"{section}.{name}")]
        offsets = [pa.field("event_offsets_ms", pa.list_(pa.float64()))]
        extra = offsets if section == "client" and keep("client.n_events") else []
        fields.append(pa.field(section, _struct(models[section], names, extra)))
    return pa.schema(fields)


@functools.cache
def _parse_options(wanted: frozenset[str] | None) -> pj.ParseOptions:
    return pj.ParseOptions(explicit_schema=_schema(wanted), unexpected_field_behavior="ignore")


_READ = pj.ReadOptions(block_size=_ARROW_BLOCK)

#: Columns every frame keeps, whatever columns a reader asks for.
_ALWAYS = frozenset({"run_id", "run_dir", "file_offset", "ok", "warmup", "record_id"})


def _arrow_numbers(column: Any) -> np.ndarray:
    """A column as float64, NaN where missing; text is not a number (NaN), as in the
    line-by-line path."""
    if pa.types.is_string(column.type) or pa.types.is_null(column.type):
        return np.full(len(column), np.nan)
    values: np.ndarray = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
    return values


def _arrow_texts(column: Any) -> pa.Array:
    """A text column as one Arrow string array (no Python object per value)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column if pa.types.is_string(column.type) else column.cast(pa.string())


def _tags(
    block: Any, line_starts: np.ndarray, rows: int, every_row_tagged: bool
) -> dict[str, Any] | None:
    """Each row's tags as columns (`_tag_column`'s types); None: read line by line.

    The i-th tags object found must be row i's. It is when every row has a ``tags`` object
    (`every_row_tagged`, from the parse) and the block holds as many ``"tags":`` keys as
    rows: one per line. Otherwise each object's place is checked against the lines.
    """
    objects: list[bytes] = _TAGS.findall(block)
    if len(objects) != rows:
        return None
    if not (every_row_tagged and block.count(b'"tags":') == rows):
        positions = np.fromiter(
            (m.start() for m in _TAGS.finditer(block)), dtype=np.int64, count=rows
        )
        if rows and not np.array_equal(
            np.searchsorted(line_starts, positions, "right") - 1, np.arange(rows)
        ):
            return None
    if all(o == b"{}" for o in objects):
        return {}
    try:
        table = pj.read_json(
            pa.py_buffer(b"\n".join(b'{"t":' + o + b"}" for o in objects)), read_options=_READ
        )
    except pa.ArrowInvalid:
        return None
    tags = table.column("t")
    out: dict[str, Any] = {}
    for tag in tags.type:
        column = pc.struct_field(tags, tag.name)
        kind = tag.type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind):
            out[tag.name] = _arrow_numbers(column)
        elif pa.types.is_boolean(kind) or pa.types.is_string(kind):
            out[tag.name] = pa.array(_tag_column(column.to_pylist()), pa.string(), from_pandas=True)
        else:  # a type Arrow inferred from text (a timestamp): keep the text, line by line
            return None
    return out


def block_columns(
    block: bytearray, offset: int, wanted: frozenset[str] | None
) -> tuple[dict[str, Any], list[tuple[int, str]], int] | None:
    """The frame's columns (`wanted` of them, all when None) of a block of whole lines
    starting at byte `offset` of the file, the lines left out for lacking a required
    field: (line number within the block, field), and the block's number of lines.

    Numbers come as float64 arrays, text as Arrow string arrays. None when Arrow refuses
    the block (the caller parses it line by line)."""
    try:
        table = pj.read_json(
            pa.py_buffer(block), read_options=_READ, parse_options=_parse_options(wanted)
        )
    except pa.ArrowInvalid:
        return None
    raw = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(raw == 10)
    starts = np.concatenate(([0], ends + 1))
    if starts[-1] == len(block):
        starts = starts[:-1]
    lengths = np.append(ends, len(block))[: starts.size] - starts
    lines = np.flatnonzero(lengths > 0)  # Arrow skips empty lines; a blank one refuses
    if lines.size != table.num_rows or (lines.size and (raw[starts[lines]] != ord("{")).any()):
        return None
    tagged = table.column("tags").null_count == 0
    tags = _tags(block, starts[lines], table.num_rows, tagged)
    if tags is None:
        return None
    data: dict[str, Any] = {}
    sections = {s: table.column(s) for s in ("error", *(s for s, _, _ in _SECTIONS))}
    for name in _columns():
        if name == "run_dir" or (wanted is not None and name not in wanted):
            continue  # the run folder: set once for the whole frame
        if name == "file_offset":
            data[name] = offset + starts[lines].astype(np.int64)
        elif name == "ok":
            data[name] = sections["error"].is_null().to_numpy(zero_copy_only=False)
        elif name == "warmup":
            data[name] = pc.fill_null(table.column("warmup"), False).to_numpy(zero_copy_only=False)
        elif name == "client.n_events":
            offsets = pc.struct_field(sections["client"], "event_offsets_ms")
            data[name] = _arrow_numbers(pc.list_value_length(offsets))
        else:
            section, _, member = name.rpartition(".")
            column = pc.struct_field(sections[section], member) if section else table.column(name)
            data[name] = _arrow_texts(column) if _is_text(name) else _arrow_numbers(column)
    for key, values in tags.items():
        data[f"tags.{key}"] = values
    keep = np.ones(table.num_rows, dtype=bool)
    lacking: list[tuple[int, str]] = []
    for required, _kind in _REQUIRED:
        missing = table.column(required).is_null().to_numpy(zero_copy_only=False) & keep
        for row in np.flatnonzero(missing):
            lacking.append((int(lines[row]) + 1, required))
        keep &= ~missing
    if lacking:
        mask = pa.array(keep)
        data = {k: v.filter(mask) if isinstance(v, pa.Array) else v[keep] for k, v in data.items()}
    return data, sorted(lacking), int(starts.size)


def _frame_pieces(frame: pd.DataFrame, wanted: frozenset[str] | None) -> dict[str, Any]:
    """A block read line by line, as `block_columns` gives one."""
    out: dict[str, Any] = {}
    for name in frame.columns:
        if name == "run_dir" or (
            wanted is not None and name not in wanted and not name.startswith("tags.")
        ):
            continue
        values = frame[name]
        if values.dtype.kind in "fbiu":
            out[name] = values.to_numpy()
        else:
            out[name] = pa.array(values.to_numpy(dtype=object), pa.string(), from_pandas=True)
    return out


def _joined(pieces: list[Any], lengths: list[int]) -> Any:
    """One frame column from its blocks' pieces (a block without it: missing there)."""
    present = [p for p in pieces if p is not None]
    if all(isinstance(p, pa.Array) for p in present):
        chunks = [
            p if p is not None else pa.nulls(n, pa.string())
            for p, n in zip(pieces, lengths, strict=True)
        ]
        text = pa.chunked_array(chunks, pa.string())
        if text.null_count == len(text):  # as pandas types a column of None: object
            return np.full(len(text), None, dtype=object)
        return text.to_pandas().array
    if all(isinstance(p, np.ndarray) and p.dtype == float and np.isnan(p).all() for p in present):
        # Never observed in this run: one NaN seen as the whole column, no memory per row.
        return np.broadcast_to(np.float64(np.nan), (sum(lengths),))
    if all(isinstance(p, np.ndarray) for p in present):
        filled = [
            p if p is not None else np.full(n, np.nan) for p, n in zip(pieces, lengths, strict=True)
        ]
        return np.concatenate(filled) if len(filled) != 1 else filled[0]
    # A tag that is a number in some blocks and text in others: objects, as pandas joins them.
    parts = []
    for p, n in zip(pieces, lengths, strict=True):
        if p is None:
            parts.append(np.full(n, np.nan, dtype=object))
        elif isinstance(p, pa.Array):
            parts.append(np.array(p.to_pylist(), dtype=object))
        else:
            parts.append(p.astype(object))
    return np.concatenate(parts)


def _give_back() -> None:
    """Return the freed blocks' memory to the system: their small arrays sit between others
    in the C heap, which keeps freed pages otherwise (glibc's malloc_trim, where present)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _c_library() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _c_library()


def _assemble(
    blocks: list[dict[str, Any]], run_dir: Path, wanted: frozenset[str] | None
) -> pd.DataFrame:
    """The frame from its blocks' columns, joined one column at a time (each block's piece
    freed as it is joined, so memory holds the frame and one column's pieces)."""
    if not blocks:
        frame = records_frame({c: [] for c in _columns()}, {}, run_dir)
        return frame if wanted is None else frame[[c for c in frame.columns if c in wanted]]
    lengths = [len(b["ok"]) for b in blocks]
    n = sum(lengths)
    names = [c for c in _columns() if wanted is None or c in wanted]
    tags = dict.fromkeys(k for b in blocks for k in b if k.startswith("tags."))
    data: dict[str, Any] = {}
    for i, name in enumerate([*names, *tags]):
        if name == "run_dir":
            data[name] = pa.repeat(pa.scalar(str(run_dir)), n).to_pandas().array
            continue
        data[name] = _joined([b.pop(name, None) for b in blocks], lengths)
        if i % 8 == 7:
            _give_back()
    _give_back()
    pa.default_memory_pool().release_unused()  # the blocks' text, joined: give it back
    return pd.DataFrame(data, copy=False)  # each column kept as it is, not copied into blocks


# --- Reading the whole file at once, with DuckDB -----------------------------------------
#
# Why DuckDB: its JSON reader parses newline-delimited records in parallel threads, reads
# only the fields of an explicit projection into typed columns and streams them out as Arrow
# batches, so a 3 GB file is never held whole nor turned into Python objects. On 10⁶ records
# (3.4 GiB) it took 8-11 s of CPU and about 500 MiB beside the frame; Arrow's JSON reader
# (the block reader above) 15-17 s; polars 14 s and 4.4 GiB (it holds the file). See
# docs/report.md.
#
# A line that is not a record (not JSON, cut short, a required field missing or of another
# JSON type than the contract's) comes out as a row without a valid identity: the loader
# reads that line again with its line reader (`_parse_block`), which names it and says why.
# Rows and lines are matched by a scan for the line ends (which also gives each row's byte
# offset); when they do not match, or DuckDB cannot read the file, `read_at_once` returns
# None and the loader reads the file block by block.

#: Rows per Arrow batch taken from DuckDB: memory holds about one batch's columns at a time.
BATCH_ROWS = 1 << 17

#: More doubtful lines than this: the file is read block by block instead (each doubtful
#: line is read again on its own, which is cheap for a few only).
MAX_DOUBTFUL = 1000

#: DuckDB's threads (at most) and memory per thread: the reader's buffers grow with its
#: threads; below about 100 MiB a thread it fails (and the file is read block by block).
MAX_THREADS = 8
MIB_PER_THREAD = 160

_SCAN_BYTES = 8 << 20

#: Characters DuckDB reads as a file name pattern, not as the name.
_GLOB = frozenset("*?[")
_BLANK_START = frozenset(b" \t\r\v\f")


@dataclass
class AtOnce:
    """What `read_at_once` read: the columns of the records, in batches (each a mapping
    from frame column to a float64 array, a bool array or an Arrow string array), and the
    lines to read again one by one: (line number from 1, byte offset, length)."""

    pieces: list[dict[str, Any]]
    doubtful: list[tuple[int, int, int]]


_FRAME_COLUMNS = frozenset(_columns())


def _duck_type(kind: pa.DataType) -> str:
    if pa.types.is_struct(kind):
        members = ", ".join(f'"{f.name}" {_duck_type(f.type)}' for f in kind)
        return f"STRUCT({members})" if kind.num_fields else "JSON"
    if pa.types.is_string(kind):
        return "VARCHAR"
    if pa.types.is_boolean(kind):
        # Read as a number, as the line reader and Arrow's blocks read it (true 1, false 0):
        # DuckDB's BOOLEAN would take any number for true (a malformed 7 or 1e308 read 1).
        return "DOUBLE"
    if pa.types.is_list(kind):  # the event offsets: only their count is read
        return "JSON"
    return "DOUBLE"


def _duck_query(wanted: frozenset[str] | None) -> tuple[str, list[str]]:
    """The SQL reading the frame's columns (named as in the frame), and the required ones.

    Required fields are read as JSON so that their JSON type is checked as the line
    reader checks it (a number where text is due is not taken as its text)."""
    schema = _schema(wanted)
    required = dict(_REQUIRED)
    types: dict[str, str] = {}
    select: list[str] = []
    for top in schema:
        name = top.name
        if name in required:
            types[name] = "JSON"
            if required[name] is int:
                check, value = "('BIGINT', 'UBIGINT')", f'CAST("{name}" AS DOUBLE)'
            else:
                check, value = "('VARCHAR')", f""""{name}"->>'$'"""
            select.append(f'CASE WHEN json_type("{name}") IN {check} THEN {value} END AS "{name}"')
        elif name == "warmup":
            # Only JSON's true is a warm-up, as the line reader takes it (`is True`): a
            # BOOLEAN column would take 1, 7 or "true" for one and leave the record out.
            types[name] = "JSON"
            select.append(
                """coalesce(json_type("warmup") = 'BOOLEAN' AND "warmup"::VARCHAR = 'true',"""
                ' false) AS "warmup"'
            )
        elif name == "tags":
            types[name] = "JSON"
            select.append('"tags"')
        elif pa.types.is_struct(top.type):
            members = list(top.type)
            if name == "error" and not members:  # a record's error: present or not
                members = [pa.field("kind", pa.string())]
            types[name] = _duck_type(pa.struct(members))
            for member in members:
                if member.name == "event_offsets_ms":
                    offsets = f'"{name}"."{member.name}"'
                    select.append(
                        f"CASE WHEN json_type({offsets}) = 'ARRAY' THEN "
                        f'json_array_length({offsets})::DOUBLE END AS "client.n_events"'
                    )
                elif f"{name}.{member.name}" in _FRAME_COLUMNS:
                    select.append(f'"{name}"."{member.name}" AS "{name}.{member.name}"')
        else:
            types[name] = _duck_type(top.type)
            select.append(f'"{name}"')
    select.append('"error" IS NULL AS "ok"')
    columns = "{" + ", ".join(f"'{k}': '{v}'" for k, v in types.items()) + "}"
    sql = (
        f"SELECT {', '.join(select)} FROM read_json(?, format='newline_delimited', "
        f"columns={columns}, ignore_errors=true)"
    )
    return sql, list(required)


def _record_lines(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The line number (from 1), byte offset and length (its newline included) of each
    line of the file that holds more than white space."""
    starts: list[np.ndarray] = []
    firsts: list[np.ndarray] = []
    buffer = bytearray(_SCAN_BYTES)
    size = 0
    at_line_start = True
    with path.open("rb", buffering=0) as fh:
        while n := fh.readinto(buffer):
            chunk = np.frombuffer(buffer, np.uint8, n)
            here = np.flatnonzero(chunk == 10) + 1
            here = here[here < n]
            if at_line_start:
                here = np.concatenate(([0], here))
            starts.append(here + size)
            firsts.append(chunk[here])
            at_line_start = bool(chunk[n - 1] == 10)
            size += n
    offsets = np.concatenate([np.zeros(0, np.int64), *starts])
    first = np.concatenate([np.zeros(0, np.uint8), *firsts])
    lengths = np.append(offsets[1:], size) - offsets
    blank = first == 10
    # Only a line that starts with white space can be blank, and those are few: each is
    # looked at.
    spaced = np.flatnonzero(np.isin(first, list(_BLANK_START)))
    if spaced.size:
        with path.open("rb") as fh:
            for i in spaced:
                fh.seek(int(offsets[i]))
                blank[i] = not fh.read(int(lengths[i])).strip()
    numbers = np.flatnonzero(~blank) + 1
    return numbers, offsets[~blank], lengths[~blank]


def _tag_values(values: list[Any], text: bool = False) -> tuple[np.ndarray, bool]:
    """One tag's values (None where missing) as the line reader types them: numbers when
    every present value is one (float64, NaN where missing), else (or when `text`: the tag
    is text elsewhere in the run) text (objects)."""
    present = [v for v in values if v is not None]
    if not text and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return np.array([math.nan if v is None else _as_float(v) for v in values], float), False
    return np.array([None if v is None else str(v) for v in values], dtype=object), True


def _tags_of_json(column: pa.Array, text_keys: Collection[str] = ()) -> dict[str, Any]:
    """Each row's tags (JSON text, null where none) as columns, `tags.<key>`: each distinct
    tags object parsed once (a run's tags repeat), in the order they first appear; the
    keys of `text_keys` as text whatever their values here."""
    encoded = pc.dictionary_encode(column)
    objects = [json.loads(text) for text in encoded.dictionary.to_pylist()]
    objects = [o if isinstance(o, dict) else {} for o in objects]
    # Rows without tags point past the objects, at a missing value.
    rows = encoded.indices.fill_null(len(objects)).to_numpy(zero_copy_only=False)
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for o in objects for k in o):
        values, is_text = _tag_values([o.get(key) for o in objects] + [None], key in text_keys)
        taken = values[rows]
        out[f"tags.{key}"] = pa.array(taken, pa.string(), from_pandas=True) if is_text else taken
    return out


def _batch_columns(batch: pa.RecordBatch, names: list[str], valid: np.ndarray) -> dict[str, Any]:
    """One batch's rows where `valid` holds as the frame's pieces, as `block_columns` gives
    (less their byte offsets).

    Each piece is copied out of the batch: an array that shares the batch's memory keeps
    all of it (every column DuckDB gave, the tags' text) for as long as the frame lives."""
    if not valid.all():
        batch = batch.filter(pa.array(valid))
    data: dict[str, Any] = {}
    for name in names:
        column = batch.column(name)
        if name in ("ok", "warmup"):
            data[name] = column.to_numpy(zero_copy_only=False).astype(bool)
        elif _is_text(name):
            data[name] = pa.concat_arrays([_arrow_texts(column)])
        else:
            data[name] = np.array(_arrow_numbers(column))
    data.update(_tags_of_json(batch.column("tags")))
    return data


def _batches(path: Path, sql: str) -> Iterator[pa.RecordBatch]:
    import duckdb  # a large module: imported by the first read

    threads = min(os.cpu_count() or 1, MAX_THREADS)
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": threads,
        "memory_limit": f"{MIB_PER_THREAD * threads}MiB",
        "preserve_insertion_order": True,  # rows in the order of the lines
    }
    with duckdb.connect(config=config) as con:
        con.execute("SET enable_progress_bar = false")  # a long read draws none on stdout
        yield from con.sql(sql, params=[str(path)]).to_arrow_reader(BATCH_ROWS)


@dataclass
class Scanned:
    """What `scan_batches` read besides the batches: the number of rows DuckDB gave (one
    per line holding more than white space), each such line's number (from 1), byte offset
    and length, and the rows to read again one by one (their lines are in doubt)."""

    rows: int
    numbers: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    doubted: list[int]


def record_lines(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The line number (from 1), byte offset and length of each line of `path` that holds
    more than white space (DuckDB gives one row for each)."""
    return _record_lines(path)


def _texts_in_doubt(batch: pa.RecordBatch, required: Collection[str]) -> np.ndarray:
    """The rows where a text column (not a required one: those are read as JSON and their
    type checked) holds what may have been another JSON value. DuckDB gives an object, an
    array or a boolean in a text field as its JSON text (``{"k":""}``, ``true``), the line
    reader as Python's ``str()`` of it (``{'k': ''}``, ``True``): such rows are read again
    line by line, which reads a real text that only looks so the same way."""
    doubt = np.zeros(batch.num_rows, dtype=bool)
    for field_, column in zip(batch.schema, batch.columns, strict=True):
        if field_.name in required or field_.name == "tags" or not pa.types.is_string(field_.type):
            continue
        looks = pc.or_(
            pc.or_(pc.starts_with(column, "{"), pc.starts_with(column, "[")),
            pc.is_in(column, value_set=_JSON_WORDS),
        )
        doubt |= pc.fill_null(looks, False).to_numpy(zero_copy_only=False)
    return doubt


#: The JSON literals that read as text through DuckDB but not through the line reader.
_JSON_WORDS = pa.array(["true", "false"])


def scan_batches(
    path: Path,
    wanted: frozenset[str] | None,
    on_batch: Callable[[int, pa.RecordBatch, np.ndarray], None],
    lines: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> Scanned | None:
    """Read `path` with DuckDB, batch by batch: `on_batch(first row, batch, valid)` for
    each batch holding a valid row (`valid`: the rows whose required fields are there).
    None when the file must be read block by block (DuckDB cannot read it, too many lines
    are in doubt, or its rows and the file's lines do not match).

    The scan for the line ends (`record_lines`; `lines` when done already) runs on a
    thread beside DuckDB's (both mostly outside the interpreter)."""
    import duckdb

    path = path.resolve()  # DuckDB would expand a leading "~"
    if any(c in _GLOB for c in str(path)):
        log.info("%s: read block by block (DuckDB reads such a name as a pattern)", path)
        return None
    sql, required = _duck_query(wanted)
    doubted: list[int] = []  # rows
    row = 0
    with ThreadPoolExecutor(1) as pool:
        scan = pool.submit(_record_lines, path) if lines is None else None
        try:
            for batch in _batches(path, sql):
                n = batch.num_rows
                valid = np.ones(n, dtype=bool)
                for name in required:
                    valid &= batch.column(name).is_valid().to_numpy(zero_copy_only=False)
                valid &= ~_texts_in_doubt(batch, required)
                doubted += (np.flatnonzero(~valid) + row).tolist()
                if len(doubted) > MAX_DOUBTFUL:
                    log.info("%s: read block by block (over %d lines in doubt)", path, MAX_DOUBTFUL)
                    return None
                if valid.any():
                    on_batch(row, batch, valid)
                row += n
        except duckdb.Error as exc:  # cannot read the file, or out of its memory: by blocks
            log.info("%s: read block by block (DuckDB: %s)", path, exc)
            return None
        if scan is not None:
            lines = scan.result()
    assert lines is not None
    numbers, offsets, lengths = lines
    if row != offsets.size:
        log.info("%s: read block by block (%d rows, %d lines)", path, row, offsets.size)
        return None
    return Scanned(row, numbers, offsets, lengths, doubted)


def read_at_once(path: Path, wanted: frozenset[str] | None) -> AtOnce | None:
    """The frame's columns (`wanted` of them, all when None) of every record of `path`, and
    the lines to read again one by one; None when the file must be read block by block
    (`scan_batches`)."""
    names = [
        n
        for n in _columns()
        if n not in ("run_dir", "file_offset") and (wanted is None or n in wanted)
    ]
    pieces: list[tuple[int, np.ndarray, dict[str, Any]]] = []  # (first row, kept rows, columns)

    def keep(row: int, batch: pa.RecordBatch, valid: np.ndarray) -> None:
        pieces.append((row, valid, _batch_columns(batch, names, valid)))

    scanned = scan_batches(path, wanted, keep)
    if scanned is None:
        return None
    offsets = scanned.offsets
    for first, valid, columns in pieces:
        columns["file_offset"] = offsets[first : first + valid.size][valid]
    doubtful = [
        (int(scanned.numbers[i]), int(offsets[i]), int(scanned.lengths[i])) for i in scanned.doubted
    ]
    return AtOnce([columns for _, _, columns in pieces], doubtful)
