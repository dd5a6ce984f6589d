"""The truth server against hostile clients, over real sockets on 127.0.0.1: a schedule
override past labkit's limits, a request head that never ends or holds too many headers, a
body too large, a request that stops arriving, and fuzzed bytes. Each is answered with a
4xx and a one-line JSON body (or the connection closed); the server keeps serving, and the
next good request is served."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.truth import server as truth_server
from labkit.truth.process import TruthServer
from labkit.truth.schedule import MAX_REPLY_TOKENS, TruthSchedule

pytestmark = pytest.mark.integration

_CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false}'


@pytest.fixture(scope="module")
def srv() -> Iterator[TruthServer]:
    with TruthServer(first_token_ms=1, token_interval_ms=0, tokens=2) as server:
        yield server


def _exchange(port: int, data: bytes, timeout: float = 10.0, half_close: bool = False) -> bytes:
    """Send `data` (then half-close: the server reads the end of the connection) and read
    until the server closes (or `timeout`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server answered and closed while we were still sending
            pass
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return out


def _post(path: str, body: bytes = _CHAT) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


def _status_and_body(reply: bytes) -> tuple[int, bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _serves(srv: TruthServer) -> None:
    status, body = _status_and_body(_exchange(srv.port, _post("/v1/chat/completions")))
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]


def _one_line_error(body: bytes) -> str:
    message = json.loads(body)["error"]["message"]
    assert isinstance(message, str) and "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/tokens=1000000000/v1/chat/completions", "tokens"),
        ("/first_token_ms=inf/v1/chat/completions", "first_token_ms"),
        ("/first_token_ms=nan/v1/chat/completions", "first_token_ms"),
        ("/token_interval_ms=1e300/v1/chat/completions", "token_interval_ms"),
        ("/keepalive_ms=0.000001/v1/chat/completions", "keepalive_ms"),
        ("/event_bytes=1000000000/v1/chat/completions", "event_bytes"),
        ("/cache_tokens=99999999999/v1/chat/completions", "cache_tokens"),
        ("/" + "k" * 5000 + "=1/v1/chat/completions", "unknown schedule keys"),
    ],
)
def test_an_override_past_the_limits_is_a_400_and_the_server_serves_on(
    srv: TruthServer, path: str, says: str
) -> None:
    status, body = _status_and_body(_exchange(srv.port, _post(path)))
    assert status == 400 and says in _one_line_error(body)
    assert len(body) < 2000  # the message names the key, never echoes 5000 bytes of it
    _serves(srv)


def test_max_tokens_with_ignore_eos_past_the_limit_is_a_400(srv: TruthServer) -> None:
    body = json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**9, "ignore_eos": True}
    ).encode()
    status, reply = _status_and_body(_exchange(srv.port, _post("/v1/chat/completions", body)))
    assert status == 400 and str(MAX_REPLY_TOKENS) in _one_line_error(reply)
    _serves(srv)


def test_a_body_nested_too_deeply_is_a_400(srv: TruthServer) -> None:
    body = b"[" * 100_000 + b"]" * 100_000
    status, reply = _status_and_body(_exchange(srv.port, _post("/v1/chat/completions", body)))
    assert status == 400 and "nested" in _one_line_error(reply)
    _serves(srv)


def test_a_head_that_never_ends_is_a_431_and_the_close(srv: TruthServer) -> None:
    head = b"GET /health HTTP/1.1\r\nx-long: " + b"a" * (truth_server.MAX_HEAD_BYTES + 10)
    status, body = _status_and_body(_exchange(srv.port, head))
    assert status == 431 and "too long" in _one_line_error(body)
    _serves(srv)


def test_too_many_header_lines_is_a_431(srv: TruthServer) -> None:
    lines = "".join(f"x-h{i}: v\r\n" for i in range(truth_server.MAX_HEADERS + 1))
    status, body = _status_and_body(
        _exchange(srv.port, f"GET /health HTTP/1.1\r\n{lines}\r\n".encode())
    )
    assert status == 431 and "header lines" in _one_line_error(body)
    _serves(srv)


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 99999999999\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"
        b"FFFFFFFFFF\r\n0\r\n",
    ],
)
def test_a_body_too_large_is_a_413(srv: TruthServer, head: bytes) -> None:
    status, body = _status_and_body(_exchange(srv.port, head))
    assert status == 413 and "bytes" in _one_line_error(body)
    _serves(srv)


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: +5\r\n\r\nhello",
        b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 1_0\r\n\r\n0123456789",
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0x5\r\n0\r\n",
    ],
)
def test_lengths_python_reads_but_http_does_not_are_a_400(srv: TruthServer, head: bytes) -> None:
    status, body = _status_and_body(_exchange(srv.port, head))
    assert status == 400 and "malformed" in _one_line_error(body)
    _serves(srv)


@pytest.fixture()
def quick_timeout(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A truth server in a thread of this process, with a request timeout of 0.3 s."""
    monkeypatch.setattr(truth_server, "REQUEST_TIMEOUT_S", 0.3)
    server = truth_server.Server(
        "127.0.0.1", 0, TruthSchedule(first_token_ms=1, token_interval_ms=0, tokens=2)
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.port
    server.stop_soon()
    with socket.create_connection(("127.0.0.1", server.port)):
        pass  # wakes the loop so it sees stopping
    thread.join(10)
    for key in list(server.sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    server.sel.close()


def test_a_request_that_stops_arriving_is_a_408_and_the_close(quick_timeout: int) -> None:
    port = quick_timeout
    for partial in (b"GET /health HTTP/1.1\r\nhost: x\r\n", _post("/v1/chat/completions")[:-5]):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(partial)  # and nothing more, the socket left open
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        status, body = _status_and_body(reply)
        assert status == 408 and "in time" in _one_line_error(body)
    status, _ = _status_and_body(_exchange(port, _post("/v1/chat/completions")))
    assert status == 200


_HEAD_PARTS = st.sampled_from(
    [
        b"GET ",
        b"POST ",
        b"/v1/chat/completions",
        b"/health",
        b"/tokens=",
        b"/first_token_ms=",
        b" HTTP/1.1",
        b"\r\n",
        b"\r\n\r\n",
        b"content-length: ",
        b"transfer-encoding: chunked",
        b"connection: close",
        b":",
        b"0",
        b"99999999999999999999",
        b"-1",
        b"nan",
        b"\xff\xfe",
        b"{",
        b"[",
        _CHAT,
    ]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.one_of(_HEAD_PARTS, st.binary(max_size=64)), max_size=24))
def test_fuzzed_request_bytes_get_a_4xx_or_an_answer_and_the_server_lives(
    srv: TruthServer, parts: list[bytes]
) -> None:
    reply = _exchange(srv.port, b"".join(parts) + b"\r\n\r\n", half_close=True)
    if reply:
        status, _ = _status_and_body(reply)
        assert 200 <= status < 500
    assert srv.proc is not None and srv.proc.poll() is None
    _serves(srv)
