"""The lean transport's chunked-body decoder (`labkit.lean._Chunked`), on bytes it did not
write: any body cut into any reads decodes to the same payload and the same bytes past it,
and broken framing is a ValueError (which the transport turns into one
httpx.RemoteProtocolError, so one record) — never another exception, never a wrong payload.

Framing per RFC 9112 §7.1: hex chunk sizes (either case, leading zeros), chunk extensions
after ``;``, a last chunk of size 0, then optional trailer fields and a blank line.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.wire.lean.http11 import FramingError, _Chunked

pytestmark = pytest.mark.unit


def _encode(chunks: list[bytes], upper: bool, zeros: int, ext: bool, trailer: bool) -> bytes:
    out = b""
    for chunk in chunks:
        size = (b"%X" if upper else b"%x") % len(chunk)
        out += b"0" * zeros + size + (b";name=value" if ext else b"") + b"\r\n" + chunk + b"\r\n"
    out += b"0\r\n" + (b"X-Trailer: 1\r\n" if trailer else b"") + b"\r\n"
    return out


def _cuts(data: bytes, positions: list[int]) -> list[bytes]:
    bounds = sorted({0, len(data), *(p % (len(data) + 1) for p in positions)})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def _decode(reads: list[bytes]) -> tuple[bytes, bytes, bool]:
    decoder = _Chunked()
    out, rest, done = b"", b"", False
    for i, read in enumerate(reads):
        payload, rest, done = decoder.feed(read)
        out += payload
        if done:
            rest += b"".join(reads[i + 1 :])
            break
    return out, rest, done


@given(
    chunks=st.lists(st.binary(min_size=1, max_size=300), max_size=8),
    upper=st.booleans(),
    zeros=st.integers(0, 3),
    ext=st.booleans(),
    trailer=st.booleans(),
    after=st.binary(max_size=20),
    positions=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_any_body_cut_anywhere_decodes_to_its_payload(
    chunks: list[bytes],
    upper: bool,
    zeros: int,
    ext: bool,
    trailer: bool,
    after: bytes,
    positions: list[int],
) -> None:
    body = _encode(chunks, upper, zeros, ext, trailer)
    out, rest, done = _decode(_cuts(body + after, positions))
    assert done
    assert out == b"".join(chunks)
    assert rest == after


@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda size, sep, data: size + sep + data,
            st.sampled_from([b"zz", b"-5", b"+5", b"1_0", b" ", b"", b"5 5", b"\xff", b"0x5"]),
            st.sampled_from([b"\r\n", b"\n", b""]),
            st.binary(max_size=40),
        ),
    ),
    positions=st.lists(st.integers(0, 1000), max_size=6),
)
def test_arbitrary_bytes_are_decoded_or_refused_with_a_value_error(
    body: bytes, positions: list[int]
) -> None:
    try:
        out, _, _ = _decode(_cuts(body, positions))
    except ValueError:
        return
    assert len(out) <= len(body)  # a payload is never more than the bytes that carried it


@pytest.mark.parametrize("size", [b"-5", b"+5", b"1_0", b"0x5", b" 5 5", b"zz"])
def test_sizes_python_would_accept_but_http_does_not_are_refused(size: bytes) -> None:
    # int(b"+5", 16), int(b"1_0", 16) and int(b" 5", 16) all parse in Python.
    with pytest.raises(ValueError):
        _decode([size + b"\r\nabcde\r\n0\r\n\r\n"])


def _handed_on(reads: list[bytes]) -> tuple[bytes, bool]:
    """Every payload handed on, the one a FramingError carries included; whether it broke."""
    decoder = _Chunked()
    out = b""
    for read in reads:
        try:
            payload, _, done = decoder.feed(read)
        except FramingError as exc:
            return out + exc.payload, True
        out += payload
        if done:
            break
    return out, False


@given(
    chunks=st.lists(st.binary(min_size=1, max_size=60), min_size=1, max_size=5),
    fault=st.sampled_from([b"zz\r\n", b" 5\r\nabcde\r\n", b"1" * 21 + b"\r\n", b"3\r\nabcXY"]),
    positions=st.lists(st.integers(0, 1000), max_size=6),
)
def test_the_payload_before_broken_framing_is_handed_on_wherever_the_reads_end(
    chunks: list[bytes], fault: bytes, positions: list[int]
) -> None:
    # As h11 hands on each chunk before the one that breaks: the same bytes, then the error,
    # whether the fault came in the read of the chunks before it or in one of its own.
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + fault
    whole = _handed_on([body])
    assert whole == _handed_on(_cuts(body, positions))
    assert whole[1]
    assert whole[0] in (b"".join(chunks), b"".join(chunks) + b"abc")
