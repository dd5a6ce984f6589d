"""Run folders → pandas DataFrames, one row per record, columns named as in the contract.

A run folder holds ``records.jsonl`` (one `RequestRecord` per line), ``manifest.json`` and
perhaps ``lab.json``. Loading is a fast path: ``json.loads`` per line and only the scalar
fields are kept, under dotted names (``client.ttft_ms``, ``provider_timings.prefill_ms``,
``usage.output_tokens``, ``tags.variant``...). The per-event arrays
(``client.event_offsets_ms``, ``client.event_tokens``) stay out of the frame: each row keeps
the byte offset of its line (``file_offset``) so `load_event_offsets` can read the arrays back
for the few records a timeline plot needs.

A line that is not a record (typically the last one, cut short when a run was killed; or a
JSON line without a record's required fields) is skipped with a logged warning, counted in
`RunData.skipped_lines` and named in `RunData.problems`.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from labkit.errors import RunError
from labkit.records import (
    AppTimings,
    ClientTimings,
    LabResults,
    ProviderTimings,
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
    "plan_key",
    "host",
]
_TOP_NUM = ["trial", "attempt", "prompt_chars", "prompt_bytes"]
_ERROR_STR = ["kind", "message"]
_ERROR_NUM = ["status", "retry_after_s"]

_STR_FIELDS = {"client_path", "tokenizer", "output_tokens_source"}

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
    """One run folder, loaded: its records frame, manifest and lab answers."""

    run_dir: Path
    records: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    lab: LabResults | None = None
    skipped_lines: int = 0
    problems: list[str] = field(default_factory=list)

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


def _num(v: Any) -> float | None:
    if isinstance(v, int | float):
        return float(v)
    return None


def _floats(values: list[Any]) -> Any:
    """A float64 array (None → NaN); anything that is not a number becomes NaN too."""
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        return np.array([_num(v) for v in values], dtype=float)


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


def _parse_lines(path: Path, run_dir: Path) -> tuple[pd.DataFrame, list[int]]:
    """Read records.jsonl into a typed frame; return it and the numbers of skipped lines.

    The file is read in blocks of whole lines (`columnar.BLOCK_BYTES`), each parsed once
    into columns by Arrow's JSON reader (`labkit.report.columnar`); a block Arrow refuses (a
    line that is not JSON, or not a record of the contract's types) is parsed line by line
    here instead, so a bad line costs that line only and is named.
    """
    from labkit.report.columnar import BLOCK_BYTES, block_frame

    frames: list[pd.DataFrame] = []
    skipped: list[int] = []
    lines_before = 0
    bytes_before = 0
    rest = b""
    with path.open("rb") as fh:
        while True:
            data = fh.read(BLOCK_BYTES)
            buffer = rest + data if rest else data
            if data:
                cut = buffer.rfind(b"\n") + 1
                if cut == 0:  # one line longer than a block: read on
                    rest = buffer
                    continue
                block, rest = buffer[:cut], buffer[cut:]
            else:
                block, rest = buffer, b""
            if block:
                lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
                read = block_frame(block, bytes_before, run_dir)
                if read is None:
                    frame = _parse_block(block, lines_before, bytes_before, path, run_dir, skipped)
                else:
                    frame, lacking = read
                    for line, name in lacking:
                        skipped.append(lines_before + line)
                        log.warning(
                            "%s line %d: skipped, not a record (no valid %r field)",
                            path,
                            lines_before + line,
                            name,
                        )
                frames.append(frame)
                lines_before += lines
                bytes_before += len(block)
            if not data:
                break
    skipped.sort()
    frames = [f for f in frames if len(f)] or frames[:1]
    if not frames:
        return records_frame({c: [] for c in _columns()}, {}, run_dir), skipped
    if len(frames) == 1:
        return frames[0], skipped
    return pd.concat(frames, ignore_index=True), skipped


def _parse_block(
    block: bytes,
    lines_before: int,
    offset: int,
    path: Path,
    run_dir: Path,
    skipped: list[int],
) -> pd.DataFrame:
    """Parse a block of whole lines one by one with the standard JSON decoder (the path for
    a block Arrow's reader refused); the numbers of lines that are not records go into
    `skipped`.

    Values are appended raw to per-column lists and typed every `_CHUNK` rows, so memory
    holds at most one chunk of Python objects whatever the size of the run.
    """
    frames: list[pd.DataFrame] = []
    cols: dict[str, list[Any]] = {c: [] for c in _columns()}
    tags: dict[str, list[Any]] = {}
    n = 0
    loads = json.loads
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
            skipped.append(lineno)
            log.warning("%s line %d: skipped, not a record (%s)", path, lineno, exc)
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
        if n_events is None:
            client = get("client")
            offsets = client.get("event_offsets_ms") if isinstance(client, dict) else None
            n_events = len(offsets) if isinstance(offsets, list) else None
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
        return np.array(values, dtype=float)
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


def load_run(path: Path | str) -> RunData:
    """Load one run folder. Raises `RunError` when it is not a run folder."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise RunError(f"{run_dir} is not a run folder (no such directory)")
    records_path = run_dir / RECORDS_FILE
    if not records_path.is_file():
        raise RunError(f"{run_dir} is not a run folder: {RECORDS_FILE} is missing")
    problems: list[str] = []
    try:
        frame, skipped = _parse_lines(records_path, run_dir)
    except OSError as exc:
        raise RunError(f"cannot read {records_path}: {exc}") from exc
    if skipped:
        where = ", ".join(str(n) for n in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        problems.append(
            f"{len(skipped)} line(s) of {RECORDS_FILE} are not valid records and were skipped "
            f"(line {where}); a run cut short leaves a truncated last line."
        )
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
    if len(frame) and frame["run_id"].isna().all():
        frame["run_id"] = str(manifest.get("run_id", run_dir.name))
    return RunData(run_dir, frame, manifest, lab, len(skipped), problems)


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
