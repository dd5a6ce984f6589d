"""`HeadParser` reads a plain head without h11 (`_plain_head`) to exactly what h11 reads.

Every head, generated as the parity test generates responses (status lines, fields with odd
line ends, folds, NUL and controls, Content-Length and Transfer-Encoding spellings, interim
1xx) and as arbitrary bytes, split into reads anywhere, is fed to `HeadParser` and to one
that reads with h11 alone: the same status, fields, version and rest, or the same error.
"""

from __future__ import annotations

import itertools

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.wire.lean.http11 import HeadParser, ResponseHead, _plain_head
from tests.wire.lean.test_http_parity import _FIELDS, _LINE_ENDS, _STATUS_LINES, responses

pytestmark = pytest.mark.unit

_REQUEST = httpx.Request("POST", "http://127.0.0.1/")
_EXTRA_FIELDS = [
    b"Content-Length: 12",
    b"content-length: 012",
    b"content-length: 1, 1",
    b"content-length: " + b"9" * 20,
    b"content-length: " + b"9" * 21,
    b"Transfer-Encoding: CHUNKED",
    b"transfer-encoding: chunked",
    b"X-Spaces:   a  b\t ",
    b"x-empty:",
    b"x-empty-ows: \t ",
    b"x-tilde~: ~",
    b"x-del: a\x7fb",
    b"x-high: \xff",
]
_PLAIN_STATUS = [
    b"HTTP/1.1 200 OK",
    b"HTTP/1.1 429 Too Many Requests",
    b"HTTP/1.1 503",
    b"HTTP/1.1 200 ",
]


def _read(data: bytes, bounds: list[int], *, h11_only: bool) -> object:
    parser = HeadParser("POST")
    if h11_only:
        parser._start_h11()
    try:
        for a, b in itertools.pairwise(bounds):
            head = parser.feed(data[a:b], _REQUEST)
            if head is not None:
                return head, parser.rest
    except httpx.RemoteProtocolError as exc:
        return "error", str(exc)
    return None


def _same_as_h11(data: bytes, positions: list[int]) -> None:
    bounds = sorted({0, len(data), *(p % (len(data) + 1) for p in positions)})
    assert _read(data, bounds, h11_only=False) == _read(data, bounds, h11_only=True)


@settings(max_examples=400)
@given(data=responses(), positions=st.lists(st.integers(0, 600), max_size=3))
def test_generated_responses_read_as_h11_reads_them(data: bytes, positions: list[int]) -> None:
    _same_as_h11(data, positions)


@settings(max_examples=400)
@given(
    status=st.sampled_from([*_STATUS_LINES, *_PLAIN_STATUS]),
    fields=st.lists(st.sampled_from([*_FIELDS, *_EXTRA_FIELDS]), max_size=6),
    ends=st.sampled_from([[b"\r\n"], _LINE_ENDS]),
    rest=st.sampled_from([b"", b"data: x\n\n", b"5\r\nhello\r\n"]),
    whole=st.booleans(),
    positions=st.lists(st.integers(0, 600), max_size=2),
)
def test_heads_of_any_fields_read_as_h11_reads_them(
    status: bytes,
    fields: list[bytes],
    ends: list[bytes],
    rest: bytes,
    whole: bool,
    positions: list[int],
) -> None:
    lines = [status, *fields, b""]
    head = b"".join(line + ends[i % len(ends)] for i, line in enumerate(lines))
    _same_as_h11(head + rest, [] if whole else positions)


@given(data=st.binary(max_size=300), positions=st.lists(st.integers(0, 400), max_size=3))
def test_any_bytes_read_as_h11_reads_them(data: bytes, positions: list[int]) -> None:
    _same_as_h11(b"HTTP/1.1 200 OK\r\n" + data, positions)
    _same_as_h11(data, positions)


def test_a_plain_head_is_read_without_h11_to_h11s_fields() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: Chunked\r\n"
        b"X-Request-Id:  req_1 \r\n\r\n5\r\nhello"
    )
    assert _plain_head(data) is not None  # the fast path takes it
    parser = HeadParser("POST")
    head = parser.feed(data, _REQUEST)
    assert head == ResponseHead(
        200,
        [
            (b"content-type", b"text/event-stream"),
            (b"transfer-encoding", b"chunked"),
            (b"x-request-id", b"req_1"),
        ],
        b"1.1",
    )
    assert parser.rest == b"5\r\nhello"
    assert parser._h11 is None
    assert _read(data, [0, len(data)], h11_only=True) == (head, b"5\r\nhello")


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",  # interim: h11 skips it
        b"HTTP/1.0 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: caf\xe9\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx: a\r\n folded\r\n\r\n",
        b"HTTP/1.1 200 OK\nx: a\n\n",
        b"HTTP/1.1 200 OK\r\nx: a" + b" " * 20000 + b"\r\n\r\n",
    ],
)
def test_a_head_that_is_not_plain_is_h11s_to_read(data: bytes) -> None:
    assert _plain_head(data) is None
    _same_as_h11(data, [])
