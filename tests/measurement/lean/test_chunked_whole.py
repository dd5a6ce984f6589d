"""The chunked decoder's fast path for reads that are whole chunks (one, or several a late
read gathered): the same payloads as the general decoder, and the same refusals."""

from __future__ import annotations

import pytest

from labkit.measurement.lean.http11 import _Chunked

pytestmark = pytest.mark.unit


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def _byte_by_byte(data: bytes) -> bytes:
    decoder = _Chunked()
    return b"".join(decoder.feed(data[i : i + 1])[0] for i in range(len(data)))


def test_a_read_of_several_whole_chunks_gives_all_their_payloads() -> None:
    events = [b'data: {"n": %d}\n\n' % i for i in range(5)]
    read = b"".join(_chunk(e) for e in events)
    assert _Chunked().feed(read) == (b"".join(events), b"", False)
    assert _byte_by_byte(read) == b"".join(events)


def test_whole_chunks_then_the_last_chunk_end_the_body() -> None:
    read = _chunk(b"a" * 300) + _chunk(b"b") + b"0\r\n\r\nNEXT"
    assert _Chunked().feed(read) == (b"a" * 300 + b"b", b"NEXT", True)


def test_a_read_that_cuts_its_last_chunk_keeps_the_rest_for_the_next() -> None:
    decoder = _Chunked()
    read = _chunk(b"first") + _chunk(b"second")
    payload, rest, done = decoder.feed(read[:-4])
    assert (rest, done) == (b"", False)
    assert payload + decoder.feed(read[-4:])[0] == b"firstsecond"


@pytest.mark.parametrize("size", [b"0x5", b"0X5"])
def test_a_hex_prefix_is_broken_framing_as_in_the_general_decoder(size: bytes) -> None:
    read = _chunk(b"ok") + size + b"\r\nhello\r\n"
    with pytest.raises(ValueError, match="chunk size"):
        _Chunked().feed(read)
    with pytest.raises(ValueError, match="chunk size"):
        _Chunked().feed(size + b"\r\nhello\r\n")
