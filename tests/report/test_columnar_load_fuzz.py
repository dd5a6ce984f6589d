"""The reader that reads a run at once (DuckDB) reads what the line reader reads, whatever the
file holds: records.jsonl with lines mangled at random (cut, bytes that are not UTF-8 or not
JSON, values of the wrong type, keys doubled or unknown, blank lines, a line split in two)
gives the same frame, the same count of lines skipped and the same lines named, read at once
as read line by line (and by Arrow's blocks), and never an exception.

Left out, as the readers still differ there: an integer beyond 64 bits as a section's value
(at once it reads as missing, line by line as the float it is)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.report import load, load_run
from tests.report.report_builders import write_run
from tests.report.test_columnar_load import _varied

pytestmark = pytest.mark.unit

LINES = [r.to_json_line() for r in _varied()[:12]]


def _cut(line: str, at: int, _: str) -> str:
    return line[: at % max(1, len(line))]


def _insert(line: str, at: int, junk: str) -> str:
    at %= max(1, len(line))
    return line[:at] + junk + line[at:]


def _retype(line: str, at: int, junk: str) -> str:
    """One value of the record replaced by another JSON value (a wrong type, often)."""
    try:
        obj = json.loads(line)
        section = [k for k, v in obj.items() if isinstance(v, dict)][at % 3]
    except (ValueError, AttributeError, IndexError):  # mangled already
        return line
    keys = sorted(obj[section]) or ["x"]
    values = [junk, None, True, 1e308, -(2**53), {"k": junk}, "12.5", 7]
    obj[section][keys[at % len(keys)]] = values[at % len(values)]
    return json.dumps(obj)


def _doubled_key(line: str, at: int, junk: str) -> str:
    """A key sent twice (JSON allows it; the last one counts for Python's json)."""
    return line[:-1] + f', "record_id": {json.dumps(junk)}' + "}"


def _unknown_key(line: str, at: int, junk: str) -> str:
    return line[:-1] + f", {json.dumps('x_' + junk)}: {at}" + "}"


def _blank(line: str, at: int, junk: str) -> str:
    return " " * (at % 4)


def _split(line: str, at: int, junk: str) -> str:
    at %= max(1, len(line))
    return line[:at] + "\n" + line[at:]


MUTATIONS = [_cut, _insert, _retype, _doubled_key, _unknown_key, _blank, _split]

_mutation = st.tuples(
    st.integers(0, len(LINES) - 1),
    st.sampled_from(MUTATIONS),
    st.integers(0, 10_000),
    st.text(max_size=8),
)


def _read(run_dir: Path, reader: str) -> load.RunData:
    with pytest.MonkeyPatch.context() as patch:
        if reader != "at once":
            patch.setattr(load, "read_at_once", lambda *args: None)
        if reader == "line by line":
            patch.setattr(load, "block_columns", lambda *args: None)
        return load_run(run_dir)


def _lines_named(run: load.RunData) -> list[str]:
    return [m for p in run.problems for m in re.findall(r"\(line [^)]*\)", p)]


# The profile's example count (tests/conftest.py: 60 in CI, 600 with HYPOTHESIS_PROFILE=dev):
# each example reads a run three ways, the unit tier's slowest test at 100.
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutation, max_size=4), st.binary(max_size=6))
def test_a_mangled_run_reads_at_once_as_line_by_line(
    mutations: list[tuple[int, object, int, str]], raw_tail: bytes
) -> None:
    lines = list(LINES)
    for index, mutate, at, junk in mutations:
        lines[index] = mutate(lines[index], at, junk)  # type: ignore[operator]
    body = "\n".join(lines).encode("utf-8", "surrogatepass") + b"\n" + raw_tail
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = write_run(Path(tmp) / "run", [])
        (run_dir / "records.jsonl").write_bytes(body)
        by_line = _read(run_dir, "line by line")
        for reader in ("at once", "blocks"):
            read = _read(run_dir, reader)
            assert read.skipped_lines == by_line.skipped_lines, reader
            assert _lines_named(read) == _lines_named(by_line), reader
            pd.testing.assert_frame_equal(
                read.records.drop(columns=["run_dir"]), by_line.records.drop(columns=["run_dir"])
            )
