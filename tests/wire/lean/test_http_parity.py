"""labkit's own HTTP/1.1 reader (`labkit.wire.lean`) reads a response as httpx does.

httpx reads HTTP/1.1 with h11; the lean reader parses the head with h11 too and frames a
chunked body by h11's rules (`labkit.wire.lean.http11`). The differential test serves
generated responses — status lines, header fields with odd line ends, folds, NUL and other
controls, Content-Length and Transfer-Encoding spellings, chunked and Content-Length bodies
of SSE events, framing faults — from a real server on 127.0.0.1, reads each once through
httpx's own transport and once through the lean one, and asserts the same outcome: the same
status and header fields, the same body bytes handed on (before an error too), the same
class of error. The record-level tests check that the events decoded before broken framing
reach the record on both transports.

Shapes: RFC 9112 (status line §4, fields §5, obsolete line folding §5.2, chunked §7.1) and
what h11 0.16 accepts of them (h11/_abnf.py, h11/_readers.py, h11/_headers.py); the SSE
events are OpenAI Chat Completions chunks (API reference, "chat.completion.chunk").
"""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import h11
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.records import ErrorKind, RequestRecord
from labkit.wire.lean import LeanTransport
from labkit.wire.lean.http11 import CHUNK_HEADER, HEADER_FIELD, HeadParser, check_field_lines
from tests.providers.streams import chat, oa_chunk, sse
from tests.support.misbehaving import MisbehavingServer

# --- h11's patterns, as the lean reader copies them -----------------------------------------

_LINE_BYTES = st.sampled_from(
    [
        b"a",
        b"Z",
        b"0",
        b"f",
        b"-",
        b":",
        b";",
        b" ",
        b"\t",
        b"\r",
        b"\n",
        b"\x00",
        b"\x0b",
        b"\x7f",
        b"\x80",
        b"=",
        b"x",
    ]
)


def _h11_pattern(name: str) -> re.Pattern[bytes]:
    from h11 import _abnf  # private: the source of the copies, compared here only

    return re.compile(str(getattr(_abnf, name)).encode("ascii"))


@pytest.mark.unit
@given(line=st.lists(_LINE_BYTES, max_size=24).map(b"".join))
def test_the_copied_patterns_match_exactly_what_h11s_match(line: bytes) -> None:
    assert bool(HEADER_FIELD.fullmatch(line)) == bool(_h11_pattern("header_field").fullmatch(line))
    assert bool(CHUNK_HEADER.fullmatch(line)) == bool(_h11_pattern("chunk_header").fullmatch(line))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("lines", "valid"),
    [
        ([b"a: 1", b"  folded"], True),
        ([b" a: 1"], False),  # a fold with nothing before it
        ([b"a: 1\x002"], False),
        ([b"a : 1"], False),
        ([b"a:\t1 \t"], True),
        ([b"a: \x01 in a cookie"], True),  # controls but NUL pass, as in h11
    ],
)
def test_trailer_lines_are_checked_as_h11_checks_header_lines(
    lines: list[bytes], valid: bool
) -> None:
    try:
        check_field_lines(lines)
    except ValueError:
        assert not valid
    else:
        assert valid


# --- the differential test: one response, both transports -----------------------------------

_EVENTS = [
    sse(oa_chunk(role="assistant")),
    sse(oa_chunk("Hello")),
    sse(oa_chunk(" world", finish="stop")),
    b"data: [DONE]\n\n",
]

_STATUS_LINES = [
    b"HTTP/1.1 200 OK",
    b"HTTP/1.1 200",  # no reason phrase: h11 takes it
    b"HTTP/1.0 200 OK",
    b"HTTP/1.1 404 Not Found",
    b"HTTP/1.1 204 No Content",
    b"HTTP/1.1 20 OK",
    b"HTTP/1.1 200OK",
    b"HTTP/1.1  200 OK",
    b"HTTP/12 200 OK",
    b"ICY 200 OK",
    b"HTTP/1.1 200 \x00K",
]

_FIELDS = [
    b"content-type: text/event-stream",
    b"X-Request-Id: req_123",
    b"x-ok:value  ",
    b"x-fold: one",
    b" folded on",  # obs-fold: joined to the line before (or refused first)
    b"\tfolded with a tab",
    b"x-nul: a\x00b",
    b"x-vt: a\x0bb",
    b"x-ctl: a\x01b",
    b"x-bad : space before the colon",
    b"no colon at all",
    b"x-obs: caf\xe9",
    b"connection: keep-alive",
]

_LENGTHS = [b"%d", b"0%d", b"%d, %d", b"%d,%d", b" %d", b"+%d", b"%d, 1", b"0x%d", b"%d.0"]
_TRANSFER_ENCODINGS = [b"chunked", b"Chunked", b"gzip, chunked", b"chunked, chunked", b"identity"]
_SIZES = [
    b"%x",
    b"%X",
    b"000%x",
    b"%x;ext=1",
    b"%x ",
    b"%x\t",
    b" %x",
    b"0" * 31 + b"%x",
    b"0" * 19 + b"%x",
    b"+%x",
    b"%x;a\nb",
]
_AFTER_DATA = [b"\r\n", b"\r\n", b"\r\n", b"\n", b"XX", b""]
_LAST = [
    b"0\r\n\r\n",
    b"0\r\n\n",
    b"0\r\nx-t: 1\r\n\r\n",
    b"0\r\nx-t: 1\n\n",
    b"0\r\nbad trailer\r\n\r\n",
    b"0\r\n",
    b"",
]
_LINE_ENDS = [b"\r\n", b"\r\n", b"\n"]


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """One response's bytes, well formed or not."""
    status = draw(st.sampled_from(_STATUS_LINES))
    fields = draw(st.lists(st.sampled_from(_FIELDS), max_size=4))
    events = draw(st.lists(st.sampled_from(_EVENTS), min_size=1, max_size=4))
    framing = draw(st.sampled_from(["chunked", "length", "close"]))
    if framing == "chunked":
        fields.append(b"transfer-encoding: " + draw(st.sampled_from(_TRANSFER_ENCODINGS)))
        body = b""
        for event in events:
            size = draw(st.sampled_from(_SIZES)) % len(event)
            body += size + b"\r\n" + event + draw(st.sampled_from(_AFTER_DATA))
        body += draw(st.sampled_from(_LAST))
    else:
        body = b"".join(events)
        if framing == "length":
            length = len(body) + draw(st.sampled_from([0, 0, -3, 5]))
            spelling = draw(st.sampled_from(_LENGTHS))
            value = spelling % ((length,) * spelling.count(b"%d"))
            fields.append(b"content-length: " + value)
            if draw(st.booleans()):
                fields.append(b"content-length: " + (b"1" * 21 if length > 0 else b"0"))
    fields.insert(draw(st.integers(0, len(fields))), b"connection: close")
    lines = [status, *fields, b""]
    head = b"".join(line + draw(st.sampled_from(_LINE_ENDS)) for line in lines)
    if draw(st.booleans()):
        head = b"HTTP/1.1 100 Continue\r\n\r\n" + head
    return head + body


Outcome = tuple[Any, ...]


async def _read(base_url: str, transport: httpx.AsyncBaseTransport) -> Outcome:
    """(status, header fields, body bytes, error class or None) as a client read them."""
    status: int | None = None
    fields: list[tuple[bytes, bytes]] = []
    body = b""
    async with httpx.AsyncClient(transport=transport, timeout=10) as client:
        try:
            async with client.stream("POST", base_url + "/v1", content=b"{}") as response:
                status = response.status_code
                fields = [(name.lower(), value) for name, value in response.headers.raw]
                async for payload in response.aiter_raw():
                    body += payload
        except httpx.TransportError as exc:
            return status, fields, body, type(exc).__name__
    return status, fields, body, None


@pytest.mark.integration
@settings(max_examples=150)
@given(reply=responses(), writes=st.lists(st.integers(1, 400), max_size=4))
def test_the_lean_reader_and_httpx_read_any_response_alike(reply: bytes, writes: list[int]) -> None:
    # Each response is written in a few pieces (cut anywhere), then the server closes.
    bounds = sorted({0, len(reply), *(w % (len(reply) + 1) for w in writes)})
    steps = [reply[a:b] for a, b in itertools.pairwise(bounds)]

    async def both(base_url: str) -> tuple[Outcome, Outcome]:
        by_httpx = await _read(base_url, httpx.AsyncHTTPTransport())
        by_lean = await _read(base_url, LeanTransport())
        return by_httpx, by_lean

    with MisbehavingServer(lambda _: steps) as server:
        by_httpx, by_lean = asyncio.run(both(server.base_url))
    assert by_lean == by_httpx


_OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
_BODY = sse(oa_chunk("Hello"))


def _chunked(size_line: bytes) -> bytes:
    return _OK_HEAD + b"transfer-encoding: chunked\r\n\r\n" + size_line + b"\r\n" + _BODY


@pytest.mark.integration
@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (_chunked(b"0" * 30 + b"%02x" % len(_BODY)) + b"\r\n0\r\n\r\n", "RemoteProtocolError"),
        (_chunked(b" %x" % len(_BODY)) + b"\r\n0\r\n\r\n", "RemoteProtocolError"),
        (_chunked(b"0" * 17 + b"%x" % len(_BODY)) + b"\r\n0\r\n\r\n", None),
        (_OK_HEAD + b"content-length: " + b"1" * 21 + b"\r\n\r\n" + _BODY, "RemoteProtocolError"),
        (_OK_HEAD + b"content-length: 18446744073709551616\r\n\r\n" + _BODY, "RemoteProtocolError"),
        (_OK_HEAD + b"x-nul: a\x00b\r\ncontent-length: 5\r\n\r\nhello", "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\nx-a: 1\n  folded\ncontent-length: 5\n\nhello", None),
        (
            b"HTTP/1.1 200 OK\r\n folded first\r\ncontent-length: 5\r\n\r\nhello",
            "RemoteProtocolError",
        ),
        (
            _OK_HEAD + b"transfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "RemoteProtocolError",
        ),
        (_chunked(b"%x" % len(_BODY)) + b"\r\n0\r\n\n", None),
        (_chunked(b"%x" % len(_BODY)) + b"XX", "RemoteProtocolError"),
    ],
    ids=[
        "32-digit-chunk-size",
        "space-before-chunk-size",
        "20-digit-chunk-size",
        "21-digit-content-length",
        "content-length-past-64-bits",  # 20 digits: both take it, then the body is short
        "nul-in-a-header",
        "bare-lf-and-obs-fold",
        "fold-before-any-field",
        "transfer-encoding-not-chunked-alone",
        "trailer-ended-by-bare-lf",
        "payload-then-broken-framing",
    ],
)
def test_the_responses_of_the_issue_are_read_alike(reply: bytes, error: str | None) -> None:
    async def both(base_url: str) -> tuple[Outcome, Outcome]:
        return await _read(base_url, httpx.AsyncHTTPTransport()), await _read(
            base_url, LeanTransport()
        )

    with MisbehavingServer(lambda _: [reply]) as server:
        by_httpx, by_lean = asyncio.run(both(server.base_url))
    assert by_lean == by_httpx
    assert by_lean[3] == error
    if reply.endswith(b"XX"):
        assert by_lean[2] == _BODY  # what was decoded before the break came first


# --- what was decoded before broken framing reaches the record ------------------------------

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


@pytest.mark.integration
@pytest.mark.parametrize(
    "fault",
    [b"20202020202020202020202020202020\r\n", b" 5\r\nabcde\r\n", b"5\r\nabcdeXX", b"zz\r\n"],
    ids=["32-digit-size", "space-before-size", "no-crlf-after-data", "not-hex"],
)
def test_events_before_broken_framing_in_the_same_read_reach_the_record(fault: bytes) -> None:
    # The events and the fault leave in one write, so the lean reader gets them in one read.
    events = sse(oa_chunk(role="assistant")) + sse(oa_chunk("Hello")) + sse(oa_chunk(" world"))
    reply = [_HEAD + _chunk(events[:40]) + _chunk(events[40:]) + fault]
    with MisbehavingServer(lambda _: reply) as server:
        by_httpx = _record(server.base_url, "httpx")
        by_lean = _record(server.base_url, "lean")
    for rec in (by_httpx, by_lean):
        assert rec.output_text == "Hello world"
        assert rec.client.ttft_ms is not None
        assert rec.error is not None and rec.error.kind is ErrorKind.CONNECTION, rec.error
        assert "RemoteProtocolError" in rec.error.message


def _record(base_url: str, transport: str) -> RequestRecord:
    async def main() -> RequestRecord:
        cls = provider_class("openai_compatible")
        settings = cls.settings_model.model_validate(
            {
                "id": "p",
                "kind": "openai_compatible",
                "model": "m",
                "base_url": base_url + "/v1",
                "transport": transport,
            }
        )
        provider = cls(settings)
        try:
            return await StreamRecorder().record(provider, chat(), RecordContext("r", "t"))
        finally:
            await provider.aclose()

    return asyncio.run(main())


@pytest.mark.unit
def test_h11_is_the_parser_httpx_reads_with() -> None:
    # The parity rests on this: httpx 0.28 reads HTTP/1.1 through httpcore's h11 connection.
    from httpcore._async import http11

    assert http11.h11 is h11


@pytest.mark.unit
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.lists(st.sampled_from([*_STATUS_LINES, *_FIELDS, b"", b"content-length: 5"]))
        .flatmap(lambda lines: st.sampled_from(_LINE_ENDS).map(lambda end: end.join(lines)))
        .map(lambda head: head + b"\r\n\r\n"),
    ),
    positions=st.lists(st.integers(0, 400), max_size=4),
)
def test_any_head_is_parsed_or_refused_with_one_protocol_error(
    data: bytes, positions: list[int]
) -> None:
    parser = HeadParser("POST")
    request = httpx.Request("POST", "http://127.0.0.1/")
    bounds = sorted({0, len(data), *(p % (len(data) + 1) for p in positions)})
    try:
        for a, b in itertools.pairwise(bounds):
            head = parser.feed(data[a:b], request)
            if head is not None:
                assert 200 <= head.status_code <= 999
                assert data.endswith(parser.rest)
                return
    except httpx.RemoteProtocolError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 200
