"""`labkit.jsonlines`: a JSON Lines file read a line at a time, every bad line one
`ConfigError` naming ``file:line`` (too long, not UTF-8, not JSON, NaN or Infinity, nested
too deeply), never another exception, whatever the bytes."""

from __future__ import annotations

import inspect
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from labkit.errors import ConfigError
from labkit.jsonlines import MAX_DEPTH, _too_deep, iter_json_lines, iter_lines, one_line

pytestmark = pytest.mark.unit

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab[]{}"\\\n\u00e9'), max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=400, deadline=None)
@given(_JSON, st.integers(0, 6))
def test_the_depth_check_agrees_with_the_decoder(value: Any, limit: int) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert _too_deep(text.encode(), limit) == (_depth(value) > limit)


def _lines(tmp_path: Path, data: bytes, **options: Any) -> list[Any]:
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    return [line.value for line in iter_json_lines(path, "test file", **options)]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"a": 1}\n{"a": NaN}\n', ":2: not JSON (NaN is not a JSON number)"),
        (b'{"a": -Infinity}\n', ":1: not JSON (-Infinity is not a JSON number)"),
        (b"[" * 200_000 + b"]" * 200_000, f":1: JSON nested deeper than {MAX_DEPTH} levels"),
        (b'\n\n{"a": "\xc3\x28"}\n', ":3: not UTF-8 text (byte 0xc3 at column 8)"),
        (b'{"a": 1', ":1: not JSON (Expecting ',' delimiter, column 8)"),
    ],
)
def test_each_bad_line_is_one_line_naming_it(tmp_path: Path, data: bytes, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _lines(tmp_path, data)
    assert str(caught.value).endswith(says) and "\n" not in str(caught.value)


def test_a_line_past_the_cap_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=":2: a line longer than 10 bytes"):
        _lines(tmp_path, b"[1]\n" + b"1" * 1000 + b"\n", max_line_bytes=10)


def test_a_missing_file_fails_at_the_call_and_lines_come_one_at_a_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the test file"):
        iter_lines(tmp_path / "none.jsonl", "test file")
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"[1]\n" * 3 + b"\xff\n")
    lines = iter_json_lines(path, "test file")
    assert inspect.isgenerator(lines)
    assert next(lines).value == [1]  # the bad fourth line is not read yet
    lines.close()


def test_a_cut_last_line_is_marked(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": \xe2\x82')
    cut = [(line.number, line.cut) for line in iter_lines(path, "f", last_may_be_cut=True)]
    assert cut == [(1, False), (2, True)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_give_values_or_one_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            values = _lines(Path(tmp), data)
        except ConfigError as exc:
            assert "\n" not in str(exc)
            return
    for value in values:
        assert not (isinstance(value, float) and not math.isfinite(value))


def test_a_validation_error_is_one_line() -> None:
    class Model(BaseModel):
        a: int
        b: list[int]

    with pytest.raises(ValidationError) as caught:
        Model.model_validate({"a": "x", "b": ["y", "z"]})
    assert one_line(caught.value) == (
        "a: Input should be a valid integer, unable to parse string as an integer "
        "(and 2 more problems)"
    )
