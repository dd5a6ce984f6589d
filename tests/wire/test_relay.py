"""labkit's delaying relay (`labkit.wire.relay`): bytes arrive whole and in order both ways,
whatever the jitter, and each chunk's delay is drawn from the configured range, the same
for the same seed."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from labkit.wire.relay import DelayRelay, RelayRoute

pytestmark = pytest.mark.integration  # real sockets on 127.0.0.1


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP echo server on 127.0.0.1 that echoes until the client half-closes."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    srv.close()


def _round_trip(port: int, pieces: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        for piece in pieces:
            s.sendall(piece)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while data := s.recv(65536):
            got += data
    return got


def test_bytes_arrive_whole_and_in_order_through_a_jittery_relay(echo: int) -> None:
    relay = DelayRelay(("127.0.0.1", echo), RelayRoute(delay_ms=4, jitter_ms=4, seed=7))
    port = relay.start()
    try:
        pieces = [bytes([i % 251]) * (1 + i * 37 % 3000) for i in range(60)]
        assert _round_trip(port, pieces) == b"".join(pieces)
        assert _round_trip(port, [b"again"]) == b"again"
        assert relay.connections == 2
    finally:
        relay.close()
    relay.close()  # idempotent


def test_a_zero_delay_relay_is_a_plain_pipe(echo: int) -> None:
    relay = DelayRelay(("127.0.0.1", echo), RelayRoute())
    port = relay.start()
    try:
        assert _round_trip(port, [b"GET / HTTP/1.1\r\n\r\n"]) == b"GET / HTTP/1.1\r\n\r\n"
    finally:
        relay.close()


def test_a_refused_upstream_closes_the_client_connection() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    dead = free.getsockname()[1]
    free.close()
    relay = DelayRelay(("127.0.0.1", dead), RelayRoute(delay_ms=2))
    port = relay.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(30)  # a hang guard
            got = b""
            with contextlib.suppress(ConnectionResetError):  # reset: closed before the read
                got = s.recv(1)
            assert got == b""  # closed by the relay
    finally:
        relay.close()


def test_each_chunks_delay_is_half_the_round_trip_within_half_the_jitter() -> None:
    route = RelayRoute(delay_ms=40, jitter_ms=8, seed=3)
    a, b = DelayRelay(("127.0.0.1", 1), route), DelayRelay(("127.0.0.1", 1), route)
    drawn = [a._one_way_s() for _ in range(500)]
    assert drawn == [b._one_way_s() for _ in range(500)]  # seeded
    assert all(0.016 <= d <= 0.024 for d in drawn)
    assert min(drawn) < 0.017 and max(drawn) > 0.023  # the whole range is used
    plain = DelayRelay(("127.0.0.1", 1), RelayRoute(delay_ms=40))
    assert {plain._one_way_s() for _ in range(10)} == {0.02}
