"""`labkit.records.validated(Model, fields)` is ``Model(**fields)``: the same instance (its
fields, the fields set, its JSON line to the byte) for whatever fields a recorder passes,
and the same validation error for fields it could not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from labkit.records import (
    AppTimings,
    ClientTimings,
    RecordError,
    RequestRecord,
    StopReason,
    Usage,
    validated,
)

pytestmark = pytest.mark.unit

_ms = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 9))
_odd = st.one_of(st.just("x"), st.just(float("nan")), st.just([1]), st.just(True))

_client = st.fixed_dictionaries(
    {"event_offsets_ms": st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=5)},
    optional={
        name: _ms
        for name in (
            "queue_ms",
            "connect_ms",
            "send_ms",
            "ttft_ms",
            "e2e_ms",
            "decode_ms_per_token",
            "itl_ms_p99",
            "stamp_lateness_ms_p50",
        )
    }
    | {
        "new_connection": st.one_of(st.none(), st.booleans()),
        "stamp_source": st.sampled_from([None, "kernel", "user"]),
        "decode_null_reason": st.sampled_from([None, "one_token", "no_output"]),
        "event_tokens": st.one_of(st.none(), st.lists(st.integers(1, 3), max_size=3)),
        "stamp_lateness_ms": st.one_of(st.none(), st.lists(st.floats(0, 5), max_size=3)),
    },
)


def _same(model: type[BaseModel], fields: dict[str, Any]) -> None:
    try:
        want = model(**fields)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as got:
            validated(model, fields)
        assert got.value.errors() == exc.errors()
        assert got.value.title == exc.title
        return
    got_model = validated(model, fields)
    assert type(got_model) is model
    assert got_model == want
    assert got_model.model_fields_set == want.model_fields_set
    assert got_model.model_dump_json() == want.model_dump_json()


@settings(max_examples=200, deadline=None)
@given(_client, st.dictionaries(st.sampled_from(["ttft_ms", "new_connection", "x"]), _odd))
def test_client_timings_the_same_either_way(fields: dict[str, Any], odd: dict[str, Any]) -> None:
    """Client timings as the recorder derives them, and fields no recorder passes (a wrong
    type, NaN, an unknown name): the same model, or the same error."""
    _same(ClientTimings, fields)
    _same(ClientTimings, {**fields, **odd})


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "parse_cpu_ms": st.one_of(st.none(), st.floats(0, 10)),
            "cpu_ms": st.floats(0, 10),
            "client_path": st.sampled_from(["wire", "sdk", "bus"]),
        }
    ),
    st.dictionaries(st.sampled_from(["tags", "params", "error", "trial"]), _odd, max_size=2),
    st.sampled_from([None, StopReason.END, StopReason.LENGTH, StopReason.ERROR]),
    st.booleans(),
)
def test_records_the_same_either_way(
    app: dict[str, Any], odd: dict[str, Any], stop: StopReason | None, failed: bool
) -> None:
    """A request's record as `assemble_record` fills it (nested models, a datetime, an
    error or not), and with fields it never passes: the same record or the same error."""
    _same(AppTimings, app)
    fields: dict[str, Any] = {
        "run_id": "r",
        "record_id": "a" * 32,
        "experiment": "load",
        "provider": "p",
        "provider_kind": "openai_compatible",
        "model": "m",
        "params": {"max_tokens": 4, "temperature": 0.0},
        "prompt_id": "p1",
        "prompt_chars": 5,
        "prompt_bytes": 5,
        "started_at": datetime(2026, 12, 6, tzinfo=UTC),
        "t_start_mono_ns": 123,
        "client": ClientTimings(event_offsets_ms=[1.0, 2.5], ttft_ms=1.0),
        "app": AppTimings(**app) if app["client_path"] != "bus" else None,
        "stop_reason": stop,
        "tags": {"level": "c32", "target": 32.0},
        "error": RecordError(kind="protocol", message="x") if failed else None,
        "usage": Usage(output_tokens=4),
        "output_text": None,
    }
    _same(RequestRecord, fields)
    _same(RequestRecord, {**fields, **odd})
