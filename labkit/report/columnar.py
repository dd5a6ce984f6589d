"""A block of records.jsonl read once into the records frame's columns, by Arrow's JSON reader.

Why Arrow (pyarrow): labkit already depends on it (summary.parquet), its reader parses
newline-delimited JSON in C++ on every core straight into typed columns, and with an
explicit schema it only tokenizes the fields the frame leaves out (output text, params,
logprobs) and converts no number it does not keep. DuckDB would read as fast but is a
large new dependency whose reader skips a malformed line without naming it; polars is a
new dependency too.

The schema comes from the record models, so the frame follows the contract. Arrow refuses
the whole block when one line is not JSON or holds a value of another JSON type than the
contract's (`block_frame` returns None): the loader then parses that block line by line and
names the bad lines. A line of the right types but without a required field is named here.
Tags (free-form) are read by a second, inferring pass over the block's ``"tags"`` objects.
"""

from __future__ import annotations

import re
import types
import typing
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pydantic import BaseModel

from labkit.records import (
    AppTimings,
    ClientTimings,
    ProviderTimings,
    RecordError,
    RequestRecord,
    Usage,
)
from labkit.report import load

__all__ = ["BLOCK_BYTES", "block_frame"]

#: Bytes of whole lines read and parsed at a time: memory holds about one block's columns.
BLOCK_BYTES = 32 << 20

#: Arrow's unit of parallel parsing; a longer line makes the block fall back to line by line.
_ARROW_BLOCK = 4 << 20

# A record's tags: scalars only, so its object has no nested braces (one that does, or a
# second "tags" key on a line, makes the tags pass fall back).
_TAGS = re.compile(rb'"tags":(\{[^{}]*\})')


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


def _struct(model: type[BaseModel], names: list[str], extra: list[pa.Field]) -> pa.StructType:
    fields = []
    for name in names:
        kind = _arrow_type(model.model_fields[name].annotation)
        if kind is not None:
            fields.append(pa.field(name, kind))
    return pa.struct(fields + extra)


def _schema() -> pa.Schema:
    record = RequestRecord.model_fields
    fields = [pa.field("warmup", pa.bool_())]
    for name in load._TOP_STR + load._TOP_NUM:
        kind = _arrow_type(record[name].annotation)
        if name in ("prompt_chars", "prompt_bytes"):  # required integers
            kind = pa.int64()
        fields.append(pa.field(name, kind or pa.string()))
    fields.append(pa.field("error", _struct(RecordError, load._ERROR_STR + load._ERROR_NUM, [])))
    models = {
        "client": ClientTimings,
        "provider_timings": ProviderTimings,
        "app": AppTimings,
        "usage": Usage,
    }
    for section, num, txt in load._SECTIONS:
        extra = [pa.field("event_offsets_ms", pa.list_(pa.float64()))] if section == "client" else []
        fields.append(pa.field(section, _struct(models[section], num + txt, extra)))
    return pa.schema(fields)


_SCHEMA = _schema()
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="ignore")
_READ = pj.ReadOptions(block_size=_ARROW_BLOCK)


def _numbers(column: Any) -> np.ndarray:
    """A column as float64, NaN where missing; text is not a number (NaN), as in the
    line-by-line path."""
    if pa.types.is_string(column.type) or pa.types.is_null(column.type):
        return np.full(len(column), np.nan)
    values: np.ndarray = pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
    return values


def _texts(column: Any) -> np.ndarray:
    values: np.ndarray = column.to_numpy(zero_copy_only=False)
    return values.astype(object, copy=False)


def _tags(block: bytes, line_starts: np.ndarray, rows: int) -> dict[str, Any] | None:
    """Each row's tags as columns (`load._tag_column`'s types); None: read line by line."""
    found = list(_TAGS.finditer(block))
    if len(found) != rows:
        return None
    positions = np.fromiter((m.start() for m in found), dtype=np.int64, count=rows)
    if rows and not np.array_equal(np.searchsorted(line_starts, positions, "right") - 1,
                                   np.arange(rows)):
        return None
    objects = [m.group(1) for m in found]
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
    for field in tags.type:
        column = pc.struct_field(tags, field.name)
        kind = field.type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind):
            out[field.name] = _numbers(column)
        elif pa.types.is_boolean(kind) or pa.types.is_string(kind):
            out[field.name] = load._tag_column(column.to_pylist())
        else:  # a type Arrow inferred from text (a timestamp): keep the text, line by line
            return None
    return out


def block_frame(
    block: bytes, offset: int, run_dir: Path
) -> tuple[pd.DataFrame, list[tuple[int, str]]] | None:
    """The records frame of a block of whole lines starting at byte `offset` of the file,
    and the lines left out for lacking a required field: (line number within the block,
    field). None when Arrow refuses the block (the caller parses it line by line)."""
    try:
        table = pj.read_json(pa.py_buffer(block), read_options=_READ, parse_options=_PARSE)
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
    tags = _tags(block, starts[lines], table.num_rows)
    if tags is None:
        return None
    data: dict[str, Any] = {}
    sections = {s: table.column(s) for s in ("error", *(s for s, _, _ in load._SECTIONS))}
    for name in load._columns():
        if name == "run_dir":
            data[name] = np.full(table.num_rows, str(run_dir), dtype=object)
        elif name == "file_offset":
            data[name] = offset + starts[lines].astype(np.int64)
        elif name == "ok":
            data[name] = sections["error"].is_null().to_numpy(zero_copy_only=False)
        elif name == "warmup":
            data[name] = pc.fill_null(table.column("warmup"), False).to_numpy(
                zero_copy_only=False
            )
        elif name == "client.n_events":
            offsets = pc.struct_field(sections["client"], "event_offsets_ms")
            data[name] = _numbers(pc.list_value_length(offsets))
        else:
            section, _, field = name.rpartition(".")
            column = (
                pc.struct_field(sections[section], field) if section else table.column(name)
            )
            data[name] = _texts(column) if load._is_text(name) else _numbers(column)
    for key, values in tags.items():
        data[f"tags.{key}"] = values
    frame = pd.DataFrame(data)
    keep = np.ones(len(frame), dtype=bool)
    lacking: list[tuple[int, str]] = []
    for field, _kind in load._REQUIRED:
        missing = table.column(field).is_null().to_numpy(zero_copy_only=False) & keep
        for row in np.flatnonzero(missing):
            lacking.append((int(lines[row]) + 1, field))
        keep &= ~missing
    if lacking:
        frame = frame[keep].reset_index(drop=True)
    return frame, sorted(lacking)
