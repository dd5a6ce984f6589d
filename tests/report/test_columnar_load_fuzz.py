"""The reader that reads a run at once (DuckDB) reads what the line reader reads, whatever the
file holds: records.jsonl with lines mangled at random (cut, bytes that are not UTF-8 or not
JSON, values of the wrong type, keys doubled or unknown, blank lines, a line split in two)
gives the same frame, the same count of lines skipped and the same lines named, read at once
as read line by line (and by Arrow's blocks), and never an exception.

Left out, as the readers still differ there: an integer beyond 64 bits as a section's value
(at once it reads as missing, line by line as the float it is)."""

from __future__ import annotations

import json
import math
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
    values = [junk, None, True, 1e308, -(2**53), {"k": junk}, "12.5", 7, [7], -(10**400), "١٢"]
    obj[section][keys[at % len(keys)]] = values[at % len(values)]
    return json.dumps(obj)


def _retype_warmup(line: str, at: int, junk: str) -> str:
    """The record's `warmup` given another JSON value: only JSON's true is a warm-up."""
    try:
        obj = json.loads(line)
        obj["warmup"] = [junk, None, True, False, 1, 7, 1e308, "true"][at % 8]
    except (ValueError, TypeError):  # mangled already
        return line
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


MUTATIONS = [_cut, _insert, _retype, _retype_warmup, _doubled_key, _unknown_key, _blank, _split]

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


def _read_lines_three_ways(objs: list[dict[str, object]], column: str) -> dict[str, list[object]]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = write_run(Path(tmp) / "run", [])
        (run_dir / "records.jsonl").write_text("".join(json.dumps(o) + "\n" for o in objs))
        return {
            reader: _read(run_dir, reader).records[column].tolist()
            for reader in ("line by line", "at once", "blocks")
        }


@pytest.mark.parametrize(
    ("value", "warm"),
    [
        (True, True),
        (False, False),
        (None, False),
        (1, False),
        (7, False),
        (1e308, False),
        ("true", False),
    ],
)
def test_only_json_true_makes_a_warm_up_whichever_reader(value: object, warm: bool) -> None:
    """DuckDB's BOOLEAN took 1, 7, 1e308 and "true" for a warm-up (left out of every figure)
    where the line reader and Arrow's blocks read them as not one."""
    obj = json.loads(LINES[0])
    obj["warmup"] = value
    read = _read_lines_three_ways([obj], "warmup")
    assert read == {reader: [warm] for reader in read}


@pytest.mark.parametrize(
    ("value", "number"), [(True, 1.0), (False, 0.0), (7, 7.0), (1e308, 1e308), ("12.5", 12.5)]
)
def test_a_boolean_field_holding_a_number_reads_alike(value: object, number: float) -> None:
    """`client.new_connection` (a boolean) holding a number: read at once it was 1.0 (DuckDB's
    BOOLEAN), line by line and by blocks the number itself."""
    obj = json.loads(LINES[0])
    obj["client"]["new_connection"] = value
    read = _read_lines_three_ways([obj], "client.new_connection")
    assert read == {reader: [number] for reader in read}


@pytest.mark.parametrize(("value", "number"), [(10**400, math.inf), (-(10**400), -math.inf)])
@pytest.mark.parametrize("where", ["client.ttft_ms", "tags.big"])
def test_an_integer_beyond_a_float_reads_as_infinite_not_an_exception(
    value: int, number: float, where: str
) -> None:
    """An integer too large for a float (a number field, or a tag) raised OverflowError in
    the line reader (and for a tag at once too): the whole run unreadable for one value."""
    obj = json.loads(LINES[0])
    section, key = where.split(".")
    obj.setdefault(section, {})[key] = value
    read = _read_lines_three_ways([obj], where)
    assert read == {reader: [number] for reader in read}


@pytest.mark.parametrize("value", [[1], [1, 2], []])
def test_an_array_in_a_number_field_reads_as_missing_not_an_exception(value: object) -> None:
    """A JSON array where a number is due, in every row of a chunk: numpy cast the column
    into two dimensions and the frame raised (line by line and by blocks)."""
    obj = json.loads(LINES[0])
    obj["client"]["ttft_ms"] = value
    read = _read_lines_three_ways([obj], "client.ttft_ms")
    assert all(len(v) == 1 and math.isnan(v[0]) for v in read.values()), read


def test_a_value_reads_the_same_whatever_its_neighbours_hold() -> None:
    """A numeric text read as its number alone and as NaN beside a text that is none (the
    line reader cast a chunk at once, else read every text as NaN); at once it was 12.5."""
    first, second = json.loads(LINES[0]), json.loads(LINES[1])
    first["client"]["ttft_ms"], second["client"]["ttft_ms"] = "12.5", "x"
    read = _read_lines_three_ways([first, second], "client.ttft_ms")
    for got in read.values():
        assert got[0] == 12.5 and math.isnan(got[1]), read


@pytest.mark.parametrize(
    ("value", "number"),
    [("١٢", None), ("１２", None), (" 12.5 ", 12.5), ("1e400", math.inf), ("0x10", None)],
)
def test_a_text_in_a_number_field_reads_as_duckdb_casts_it(
    value: str, number: float | None
) -> None:
    """Digits of another script ("١٢" Arabic-Indic, "１２" full-width) were 12 line by line
    and by blocks (numpy's float reads them) and missing at once (DuckDB's cast does not):
    now missing whichever reader, alone or beside a number."""
    first, second = json.loads(LINES[0]), json.loads(LINES[1])
    first["client"]["ttft_ms"], second["client"]["ttft_ms"] = value, 3.0
    for objs in ([first], [first, second]):
        read = _read_lines_three_ways(objs, "client.ttft_ms")
        for got in read.values():
            assert got[0] == number if number is not None else math.isnan(got[0]), read
