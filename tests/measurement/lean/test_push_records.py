"""The lean transport's pushed reads (`Body.deliver`: each read handed to the recorder in the
socket's reader callback) record every corpus stream exactly as its pulled reads (iterating
the body in the reading task) do: the same record, field for field, but for the clock's
own readings (stamps, when, CPU)."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.measurement.lean.http11 import Body
from labkit.records import RequestRecord
from tests.providers.streams.corpus import Fixture, load_corpus
from tests.providers.test_corpus import replay

pytestmark = pytest.mark.integration

CORPUS = load_corpus()
#: What differs between two recordings of one stream whatever the reading: the clock's.
_CLOCK_FIELDS = {"record_id", "started_at", "t_start_mono_ns", "client", "app"}


def _facts(record: RequestRecord) -> dict[str, Any]:
    data = record.model_dump(mode="json", exclude=_CLOCK_FIELDS)
    client = record.client
    data["output_events"] = len(client.event_offsets_ms)
    data["stamp_source"] = client.stamp_source
    data["ttft_present"] = client.ttft_ms is not None
    data["ttft_is_text"] = client.ttft_ms is not None and client.ttft_text_ms == client.ttft_ms
    data["e2e_present"] = client.e2e_ms is not None
    timings = data["provider_timings"]
    # A keep-alive comment's time from t_start is the clock's too; whether there was one is not.
    timings["keepalive_last_ms"] = timings["keepalive_last_ms"] is not None
    return data


@pytest.mark.parametrize("fixture", CORPUS, ids=lambda f: f.name)
def test_pushed_reads_record_what_pulled_reads_record(
    fixture: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushed = replay(fixture, "wire", "lean")
    with monkeypatch.context() as patch:
        patch.setattr(Body, "pushes", property(lambda self: False))
        pulled = replay(fixture, "wire", "lean")
    assert _facts(pushed) == _facts(pulled)
