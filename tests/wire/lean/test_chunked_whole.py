"""The chunked decoder's fast path for reads that are whole chunks (one, or several a late
read gathered): the same payloads as the general decoder, and the same refusals."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.wire.lean.http11 import _Chunked

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


def _decoded(reads: list[bytes]) -> tuple[bytes, bytes, bool, bool]:
    """The payload of `reads` fed in order, what followed the last chunk, whether the body
    ended, and whether the framing was refused."""
    decoder, payload = _Chunked(), b""
    for k, read in enumerate(reads):
        try:
            got, rest, done = decoder.feed(read)
        except ValueError:
            return payload, b"", False, True
        payload += got
        if done:
            return payload, rest + b"".join(reads[k + 1 :]), True, False
    return payload, b"", False, False


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    ending=st.sampled_from([b"0\r\n\r\nNEXT", b"", b"0x5\r\nhello\r\n", b"zz\r\n", b"5\r\nab"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_any_body_cut_into_any_reads_decodes_as_one_byte_reads(
    payloads: list[bytes], ending: bytes, cuts: list[int]
) -> None:
    """Fuzzed: chunks of any bytes, then the last chunk, nothing, or broken framing; however
    the reads cut them, the fast paths decode what one-byte reads decode, or refuse too."""
    data = b"".join(_chunk(p) for p in payloads) + ending
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    reads = [data[a:b] for a, b in itertools.pairwise(bounds)]
    payload, rest, done, refused = _decoded(reads)
    by_bytes = _decoded([data[i : i + 1] for i in range(len(data))])
    assert (done, refused) == by_bytes[2:]
    # A read that holds broken framing is refused whole: the payload before it in that read
    # is not handed on (one-byte reads hand it on first).
    assert by_bytes[0].startswith(payload) if refused else payload == by_bytes[0]
    if done:
        assert rest == by_bytes[1] == data[data.index(b"0\r\n\r\n", len(data) - 9) + 5 :]
