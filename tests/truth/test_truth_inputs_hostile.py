"""Truth logs and per-request schedule files that are wrong: each is one `ConfigError` line
naming ``file:line`` (wrong JSON types, NaN/inf, deep nesting, bytes that are not UTF-8),
never a traceback nor pydantic's multi-line dump, through the readers and the real CLI
(`labkit score`, `labkit fake-server --schedule-file`); fuzzed files end in one error or a
valid result. The truth log is read a line at a time; `fake-server` writes no log through a
planted link."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from labkit.cli.app import app
from labkit.errors import ConfigError
from labkit.truth.log import TruthLog, read_truth_log
from labkit.truth.schedule import (
    MAX_REPLY_TOKENS,
    MAX_WAIT_MS,
    TruthSchedule,
    load_request_schedules,
    plan,
)

pytestmark = pytest.mark.unit

_ANCHOR = json.dumps({"truth_log": 1, "mono_ns": 5, "wall_ns": 7, "schedule": {}})


def _request(**change: Any) -> dict[str, Any]:
    """A truth record as the server writes one (the required fields)."""
    row: dict[str, Any] = {
        "id": "r1",
        "api": "chat",
        "stream": True,
        "model": "m",
        "t_read_ns": 1,
        "t_start_ns": 2,
        "events_ns": [3, 4],
        "events_sent_ns": [3, 4],
        "event_tokens": [1, 1],
        "t_end_ns": 5,
        "prompt_tokens": 3,
        "output_tokens": 2,
        "capped": False,
        "steps": [{"token": " a", "candidates": [[" a", 0.75], [" b", 0.25]]}],
    }
    row.update(change)
    return row


def _log(tmp_path: Path, *lines: str | bytes, end: bytes = b"\n") -> Path:
    path = tmp_path / "truth.jsonl"
    data = b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines)
    path.write_bytes(data + end)
    return path


def _refused(path: Path, says: str) -> str:
    with pytest.raises(ConfigError) as caught:
        read_truth_log(path)
    message = str(caught.value)
    assert "\n" not in message and says in message, message
    return message


def test_a_good_log_reads_and_a_cut_last_line_is_left_out(tmp_path: Path) -> None:
    good = json.dumps(_request())
    log = read_truth_log(_log(tmp_path, _ANCHOR, good, good[:40], end=b""))
    (request,) = log.requests
    assert request.steps[0].token == " a" and dict(request.steps[0].candidates)[" b"] == 0.25
    assert request.steps[0].probability == 0.75 and (log.mono_ns, log.wall_ns) == (5, 7)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (json.dumps(_request(events_ns="soon")), ":2: not a truth record: events_ns: Input"),
        (json.dumps(_request(t_end_ns=None)), ":2: not a truth record: t_end_ns"),
        (json.dumps(_request(temperature=float("nan"))), ":2: not a truth record: temperature"),
        (json.dumps(_request(queue_ms=float("inf"))), ":2: not a truth record: queue_ms"),
        (json.dumps(_request(reported=[[[[[[[[]]]]]]]] * 2)), ":2: not a truth record: reported"),
        (b"[" * 100_000 + b"]" * 100_000, ":2: not a truth record: "),
        (b'{"id": "\xff"}', ":2: not UTF-8 text (byte 0xff"),
        ("[1, 2]", ":2: not a truth record: Input should be an object"),
    ],
)
def test_a_bad_record_is_one_line(tmp_path: Path, line: str | bytes, says: str) -> None:
    _refused(_log(tmp_path, _ANCHOR, line, json.dumps(_request())), says)


@pytest.mark.parametrize(
    "first",
    [b"", b"\xff\xfe", b"[1]", b'{"truth_log": 2}', b"[" * 100_000],
)
def test_a_file_that_is_no_truth_log_is_one_line(tmp_path: Path, first: bytes) -> None:
    _refused(_log(tmp_path, first, json.dumps(_request())), "is not a truth log")


def test_an_anchor_without_whole_clocks_is_one_line(tmp_path: Path) -> None:
    anchor = json.dumps({"truth_log": 1, "mono_ns": "5", "wall_ns": 7})
    _refused(_log(tmp_path, anchor), ":1: the clock anchor's mono_ns and wall_ns")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_records_give_one_error_or_a_log(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "truth.jsonl"
        path.write_bytes(_ANCHOR.encode() + b"\n" + data)
        try:
            assert isinstance(read_truth_log(path), TruthLog)
        except ConfigError as exc:
            assert "\n" not in str(exc)


_FIELDS = st.sampled_from([*_request(), "reported", "tool_calls"])
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=3),
    st.lists(st.lists(st.one_of(st.text(max_size=2), st.floats()), max_size=3), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_FIELDS, _VALUES, max_size=4))
def test_fuzzed_fields_give_one_error_or_a_log(change: dict[str, Any]) -> None:
    line = json.dumps(_request(**change))  # NaN and Infinity written as Python writes them
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "truth.jsonl"
        path.write_text(_ANCHOR + "\n" + line + "\n" + json.dumps(_request()) + "\n")
        try:
            log = read_truth_log(path)
        except ConfigError as exc:
            assert "\n" not in str(exc) and ":2: " in str(exc)
            return
    assert len(log.requests) == 2


def test_labkit_score_with_a_bad_truth_log_is_one_line(tmp_path: Path) -> None:
    path = _log(tmp_path, _ANCHOR, json.dumps(_request(events_ns=["x", "y"])))
    result = CliRunner().invoke(app, ["score", str(path), str(tmp_path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert f"{path}:2: not a truth record: events_ns.0" in line


# --- per-request schedule files -----------------------------------------------------------


def _schedules(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"tokens": 4}\n{"tokens": -1}\n', ":2: bad schedule value for tokens"),
        (b'{"tokens": 1000000000}\n', f"less than or equal to {MAX_REPLY_TOKENS}"),
        (b'{"first_token_ms": NaN}\n', ":1: not JSON (NaN is not a JSON number)"),
        (b'{"first_token_ms": 1e300}\n', ":1: bad schedule value for first_token_ms"),
        (b'{"keepalive_ms": 0.001}\n', "keepalive_ms must be 0 (none) or at least 1"),
        (b'{"tokens": "many"}\n', ":1: bad schedule value for tokens"),
        (b'{"fail": ["drop"]}\n', ":1: bad schedule value for fail"),
        (b"[" * 20_000 + b"]" * 20_000 + b"\n", ":1: JSON nested deeper than"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", ":1: a line longer than 65536 bytes"),
        (b'{"finish_reason": "\xff"}\n', ":1: not UTF-8 text"),
        (b'"tokens"\n', ":1: not a JSON object"),
        (b"\n\n", "has no schedules"),
    ],
)
def test_a_bad_schedule_file_is_one_line(tmp_path: Path, data: bytes, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_request_schedules(_schedules(tmp_path, data), TruthSchedule())
    assert says in str(caught.value) and "\n" not in str(caught.value)


_SCHEDULE_KEYS = st.sampled_from([*TruthSchedule.model_fields, "ttft_ms", "speed"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_SCHEDULE_KEYS, _VALUES, max_size=3), max_size=3))
def test_fuzzed_schedule_files_give_one_error_or_schedules(rows: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        try:
            schedules = load_request_schedules(path, TruthSchedule())
        except ConfigError as exc:
            assert "\n" not in str(exc)
            return
    for s in schedules:  # what a valid schedule plans stays within the limits
        p = plan(s, 10**6, None, random.Random(0), ignore_eos=True)
        assert p.output_tokens <= MAX_REPLY_TOKENS and p.first_ms <= MAX_WAIT_MS + s.jitter_ms


def test_fake_server_with_a_bad_schedule_file_is_one_line(tmp_path: Path) -> None:
    path = _schedules(tmp_path, b'{"tokens": 3}\n{"first_token_ms": Infinity}\n')
    result = CliRunner().invoke(
        app, ["fake-server", "--schedule-file", str(path), "--log", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert f"{path}:2: not JSON (Infinity is not a JSON number)" in line


def test_fake_server_writes_no_truth_log_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "t.jsonl").symlink_to(victim)
    result = CliRunner().invoke(
        app, ["fake-server", "--port", "0", "--log", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 1 and "is a symbolic link" in result.output
    assert victim.read_text() == "keep me"


def test_candidates_are_compact_pairs_that_dump_as_read(tmp_path: Path) -> None:
    request = read_truth_log(_log(tmp_path, _ANCHOR, json.dumps(_request()))).requests[0]
    candidates = request.steps[0].candidates
    assert list(candidates) == [(" a", 0.75), (" b", 0.25)] and candidates[1] == (" b", 0.25)
    assert json.loads(request.model_dump_json())["steps"] == _request()["steps"]
    nan = b'{"token": " a", "candidates": [[" a", NaN]]}'
    line = (
        json.dumps(_request(steps=[])).encode().replace(b'"steps": []', b'"steps": [' + nan + b"]")
    )
    _refused(_log(tmp_path, _ANCHOR, line), ":2: not a truth record: steps.0.candidates")
