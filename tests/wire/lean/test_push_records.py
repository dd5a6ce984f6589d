"""The lean transport's pushed reads (`Body.deliver`: each read handed to the recorder in the
socket's reader callback) record every corpus stream exactly as its pulled reads (iterating
the body in the reading task) do: the same record, field for field, but for the clock's
own readings (stamps, when, CPU); and so does the C read path (`labkit.wire.readpath`)
against the Python one."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.providers.base import Provider
from labkit.records import ErrorKind, RequestRecord
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from labkit.wire import readpath, sse
from labkit.wire.lean import http11, tcp
from labkit.wire.lean.http11 import Body
from tests.measurement.test_real_socket import measure_at
from tests.providers.streams import chat
from tests.providers.streams.corpus import Fixture, load_corpus
from tests.providers.test_corpus import replay
from tests.support.truth import assert_agrees_with_truth
from tests.wire.lean.test_lean import Handler, read_request, serve

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


@pytest.mark.parametrize("fixture", CORPUS, ids=lambda f: f.name)
def test_the_c_read_path_records_what_the_python_read_path_records(
    fixture: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert readpath.IMPLEMENTATION == "c", "labkit was built without its C read path"
    compiled = replay(fixture, "wire", "lean")
    with monkeypatch.context() as patch:
        patch.setattr(tcp, "RECV_STAMPED", None)
        patch.setattr(http11, "whole_chunks", readpath.py_whole_chunks)
        patch.setattr(sse, "whole_data_events", readpath.py_whole_data_events)
        # and the two as a pushed read's chunked_data_events chains them
        patch.setattr(readpath, "whole_chunks", readpath.py_whole_chunks)
        patch.setattr(readpath, "whole_data_events", readpath.py_whole_data_events)
        python = replay(fixture, "wire", "lean")
    assert _facts(compiled) == _facts(python)
    assert compiled.client.stamp_source == python.client.stamp_source


@pytest.mark.parametrize("fixture", CORPUS, ids=lambda f: f.name)
def test_the_common_chat_read_records_what_the_general_path_records(
    fixture: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: the plain chat content chunk read in one call (C, and its Python twin)
    gives the record the general path gives, field for field, on every corpus stream."""
    fused = replay(fixture, "wire", "lean")
    with monkeypatch.context() as patch:
        patch.setattr(readpath, "COMMON_CHUNKS", {})
        general = replay(fixture, "wire", "lean")
    with monkeypatch.context() as patch:
        twin = {readpath.CHAT_CONTENT: readpath.py_chat_content_events}
        patch.setattr(readpath, "COMMON_CHUNKS", twin)
        python = replay(fixture, "wire", "lean")
    assert _facts(fused) == _facts(general) == _facts(python)
    assert fused.client.stamp_source == general.client.stamp_source == python.client.stamp_source


_TRUTH_SCHEDULES: list[dict[str, Any]] = [
    {},
    {"system_fingerprint": "fp_truth"},
    {"tokens_per_event": 3},
    {"server_timings": "llamacpp"},
    {"reasoning_tokens": 4},
    {"fail": "stream_error", "fail_after_tokens": 7},
    {"fail": "drop", "fail_after_tokens": 7},
]


@pytest.mark.parametrize("schedule", _TRUTH_SCHEDULES, ids=lambda s: ",".join(s) or "default")
def test_the_truth_servers_streams_record_the_same_through_the_common_read(
    schedule: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The truth server's chat streams over real sockets, the common read taken (counted)
    in the recorder's reader, in the connection's reader callback (`readpath.CommonPush`,
    C) and not at all: the same record but for the clock's readings, and each in agreement
    with the truth log; an error mid-stream is recorded either way."""
    taken = 0
    inner = readpath.COMMON_CHUNKS[readpath.CHAT_CONTENT]
    pushes: list[readpath.CommonPush] = []

    def kept(make: Any) -> Any:
        def made(*args: Any) -> readpath.CommonPush:
            pushes.append(make(*args))
            return pushes[-1]

        return made

    def counted(*args: Any) -> int | None:
        nonlocal taken
        got = inner(*args)
        taken += got is not None
        return got

    log = tmp_path / "truth.jsonl"
    settings = {"ttft_ms": 5.0, "interval_ms": 2.0, "tokens": 24, **schedule}
    with TruthServer(truth_log=log, **settings) as server:
        with monkeypatch.context() as patch:
            patch.setattr(readpath, "COMMON_CHUNKS", {readpath.CHAT_CONTENT: counted})
            fused = asyncio.run(measure_at(server.base_url, 3, transport="lean"))
        with monkeypatch.context() as patch:
            patch.setattr(readpath, "COMMON_CHUNKS", {})
            general = asyncio.run(measure_at(server.base_url, 3, transport="lean"))
        with monkeypatch.context() as patch:
            made = {reader: kept(make) for reader, make in readpath.COMMON_PUSHES.items()}
            patch.setattr(readpath, "COMMON_PUSHES", made)
            in_callback = asyncio.run(measure_at(server.base_url, 3, transport="lean"))
    exclude = _CLOCK_FIELDS | {"response_id", "request_id", "provider_timings", "trial"}
    for a, b, c in zip(fused, general, in_callback, strict=True):
        assert a.model_dump(exclude=exclude) == b.model_dump(exclude=exclude)
        assert c.model_dump(exclude=exclude) == b.model_dump(exclude=exclude)
        assert len(a.client.event_offsets_ms) == len(b.client.event_offsets_ms)
        assert len(c.client.event_offsets_ms) == len(b.client.event_offsets_ms)
        assert a.client.stamp_source == b.client.stamp_source == c.client.stamp_source
    truth = {t.id: t for t in read_truth_log(log).requests}
    if "fail" in schedule:
        assert all(r.error is not None for r in fused)
    elif readpath.IMPLEMENTATION == "c":
        assert_agrees_with_truth([*fused, *general, *in_callback], read_truth_log(log))
    else:
        # The Python read's kernel stamp is put on the monotonic clock by two clock reads
        # some Python apart (`tcp.Connection._on_readable`), so a preempted read can land
        # microseconds before its send, either path: the counts are held here.
        for r in [*fused, *general]:
            assert r.error is None and r.response_id in truth
            served = truth[r.response_id]
            assert r.usage.output_tokens == served.output_tokens
            assert len(r.client.event_offsets_ms) == len(served.events_ns)
    if schedule.get("reasoning_tokens") is None and schedule.get("fail") != "drop":
        assert taken > 0  # the stream's token reads went the common way
        if readpath.IMPLEMENTATION == "c":  # and in the reader callback, on the C path
            assert sum(p.taken for p in pushes) > 0


def _stream_provider(url: str, read_s: float = 30.0) -> Provider:
    cls = provider_class("openai_compatible")
    settings = cls.settings_model.model_validate(
        {
            "id": "s",
            "kind": "openai_compatible",
            "model": "m",
            "base_url": f"{url}/v1",
            "transport": "lean",
            "timeouts": {"read": read_s},
        }
    )
    return cls(settings, pool_size=2)


_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _event(text: str) -> bytes:
    data = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % text.encode()
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _record_against(handler: Handler, read_s: float = 30.0, cancel_after_s: float = 0.0) -> Any:
    async def main() -> Any:
        async with serve(handler) as url:
            provider = _stream_provider(url, read_s)
            kept: list[RequestRecord] = []
            recorder = StreamRecorder(on_cancelled=kept.append)
            try:
                task = asyncio.ensure_future(
                    recorder.record(provider, chat(), RecordContext("t", "t"))
                )
                if cancel_after_s:
                    await asyncio.sleep(cancel_after_s)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    return kept[0]
                return await task
            finally:
                await provider.aclose()

    return asyncio.run(main())


def test_a_stalled_pushed_stream_times_out_as_a_read_timeout() -> None:
    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(_HEAD + _event("a"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(_event("b"))  # pushed, then nothing more
        await writer.drain()
        await asyncio.sleep(5)

    record = _record_against(stalls, read_s=0.3)
    assert record.error is not None and record.error.kind == ErrorKind.TIMEOUT
    assert len(record.client.event_offsets_ms) == 2
    assert record.output_text == "ab"


def test_a_pushed_stream_cancelled_mid_way_keeps_what_it_read() -> None:
    async def stops(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(_HEAD)
        for text in "abc":  # three of the stream's events, then nothing until cancelled
            writer.write(_event(text))
            await writer.drain()
        await asyncio.sleep(30)

    # Cancelled half a second after the start: a generous wait for three events already sent.
    record = _record_against(stops, cancel_after_s=0.5)
    assert record.error is not None and record.error.kind == ErrorKind.CANCELLED
    assert 1 <= len(record.client.event_offsets_ms) <= 3
    assert record.output_text == "abc"[: len(record.client.event_offsets_ms)]


def test_broken_framing_in_a_pushed_read_costs_one_record() -> None:
    async def breaks(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(_HEAD + _event("a"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"zz\r\nnot a chunk\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    record = _record_against(breaks)
    assert record.error is not None and record.error.kind == ErrorKind.CONNECTION
    assert "chunked framing" in record.error.message
    assert record.output_text == "a"
