"""HTTP as servers speak it: each reply names what arrived and what to change, on both transports.

Real servers on 127.0.0.1 and ::1: an HTTP/1.0 (or `Connection: close`) reply the lean
transport must not keep; a body in a Content-Encoding this install cannot decode; `https://`
to a plain-HTTP port; a TLS server demanding a client certificate; a proxy answering 407; a
loopback URL written as `::ffff:127.0.0.1` or `[::1]` with a dead `HTTP_PROXY`; and the
in-process fake provider under an unusable `ALL_PROXY`.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme

from labkit.measurement import recorder as recorder_module
from labkit.measurement.recorder import BaseRecorder, RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import Provider, provider_class
from labkit.records import ErrorKind, RequestRecord
from tests.providers.streams import chat, oa_usage, openai_events
from tests.support.misbehaving import MisbehavingServer, Reply, http_head, record_requests

pytestmark = pytest.mark.integration

HOSTS = ["127.0.0.1", "::1"]
TRANSPORTS = ["httpx", "lean"]
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)
EVENTS = b"".join(openai_events(["Hel", "lo"], usage=oa_usage(3, 2)))


@pytest.fixture(autouse=True)
def _no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _provider(base_url: str, transport: str = "httpx", kind: str = "openai_compatible") -> Provider:
    cls = provider_class(kind)
    data = {
        "id": "p",
        "kind": kind,
        "model": "m",
        "base_url": base_url,
        "transport": transport,
        "timeouts": {"connect": 2.0, "read": 5.0, "total": 30.0},
    }
    return cls(cls.settings_model.model_validate(data), api_key="k-http-spoken")


def _records(
    base_url: str, transport: str, recorder: BaseRecorder, n: int = 1
) -> list[RequestRecord]:
    return record_requests(lambda: _provider(base_url, transport), recorder, n)


def _recorders() -> Iterator[tuple[str, Callable[[], BaseRecorder]]]:
    """(transport, recorder) for every path a request can take: wire on both, and the SDK."""
    yield "httpx", StreamRecorder
    yield "lean", StreamRecorder
    yield "httpx", SDKRecorder


PATHS = ["wire-httpx", "wire-lean", "sdk"]


def _path(name: str) -> tuple[str, Callable[[], BaseRecorder]]:
    return dict(zip(PATHS, _recorders(), strict=True))[name]


# --- HTTP/1.0 and Connection: close -----------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("reply_kind", ["http1.0", "connection-close"])
def test_a_connection_the_server_means_to_close_is_not_reused(
    reply_kind: str, host: str, transport: str
) -> None:
    headers = {"content-type": "text/event-stream", "content-length": str(len(EVENTS))}
    if reply_kind == "http1.0":
        head = http_head(200, headers).replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    else:
        head = http_head(200, {**headers, "connection": "close"})
    # The server lingers before it closes: a request sent on the old connection would wait
    # for it, fail and be resent.
    reply: Reply = [head, EVENTS, 1.0]
    with MisbehavingServer(lambda _: reply, host=host) as server:
        records = _records(server.base_url, transport, StreamRecorder(), n=2)
        connections = server.connections
    for rec in records:
        assert rec.error is None, rec.error
        assert rec.output_text == "Hello"
        assert "stale_connection_resent" not in rec.tags
    assert connections == 2


# --- Content-Encoding -------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("encoding", ["br", "compress", "gzip, x-unknown"])
def test_a_body_in_an_encoding_labkit_cannot_decode_is_named(
    encoding: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `br` as it reads on an install without a brotli decoder, whether or not this one has it.
    wire = recorder_module._DECODABLE - {"br"}
    monkeypatch.setattr(recorder_module, "_DECODABLE", wire)
    import httpx2._decoders

    monkeypatch.delitem(httpx2._decoders.SUPPORTED_DECODERS, "br", raising=False)
    head = http_head(
        200,
        {
            "content-type": "text/event-stream",
            "content-encoding": encoding,
            "content-length": "16",
            "connection": "close",
        },
    )
    transport, recorder = _path(path)
    with MisbehavingServer(lambda _: [head, b"\x8b\x00compressed\xff\xfe\x01\x02"]) as server:
        (rec,) = _records(server.base_url, transport, recorder())
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert f"Content-Encoding {encoding!r}" in rec.error.message
    assert "cannot decode" in rec.error.message and "empty response body" not in rec.error.message
    if encoding == "br":
        assert "pip install brotli" in rec.error.message


# --- TLS --------------------------------------------------------------------------------


class _RawServer:
    """Accepts connections and hands each socket to `answer` in a thread of its own."""

    def __init__(self, answer: Callable[[socket.socket], None], host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, 0), family=family)
        self._sock.settimeout(0.2)
        self._answer = answer
        self._stop = threading.Event()
        port = self._sock.getsockname()[1]
        self.https_url = f"https://{f'[{host}]' if ':' in host else host}:{port}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> _RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._answer(conn)
            except OSError:
                return


def _plain_http_answers_at_once(conn: socket.socket) -> None:
    conn.settimeout(5)
    conn.recv(65536)  # the ClientHello, read as a malformed request line
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")


def _plain_http_waits_for_a_request(conn: socket.socket) -> None:
    conn.settimeout(10)
    while conn.recv(65536):  # no blank line ever comes: it waits, as many servers do
        pass


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize(
    "answer", [_plain_http_answers_at_once, _plain_http_waits_for_a_request], ids=["400", "waits"]
)
def test_https_to_a_plain_http_port_says_tls_and_what_to_do(
    answer: Callable[[socket.socket], None], host: str, path: str
) -> None:
    transport, recorder = _path(path)
    with _RawServer(answer, host) as server:
        (rec,) = _records(server.https_url, transport, recorder())
    assert rec.error is not None
    assert rec.error.kind in (ErrorKind.CONNECTION, ErrorKind.TIMEOUT), rec.error
    assert "TLS" in rec.error.message and "http://" in rec.error.message, rec.error.message


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("host", HOSTS)
def test_a_server_demanding_a_client_certificate_says_so(
    path: str, host: str, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # the server's own certificate is trusted
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "::1", "localhost").configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED

    def answer(conn: socket.socket) -> None:
        conn.settimeout(5)
        with context.wrap_socket(conn, server_side=True) as tls:  # fails: no client certificate
            tls.recv(65536)

    transport, recorder = _path(path)
    with _RawServer(lambda c: _quietly(answer, c), host) as server:
        (rec,) = _records(server.https_url, transport, recorder())
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION, rec.error
    assert "TLS" in rec.error.message and "client certificate" in rec.error.message


def _quietly(answer: Callable[[socket.socket], None], conn: socket.socket) -> None:
    try:
        answer(conn)
    except ssl.SSLError:
        return


# --- Proxies ----------------------------------------------------------------------------


def _proxy_407(_: bytes) -> Reply:
    body = b"proxy login needed"
    head = http_head(
        407,
        {
            "proxy-authenticate": 'Basic realm="corp"',
            "content-length": str(len(body)),
            "connection": "close",
        },
        reason="Proxy Authentication Required",
    )
    return [head, body]


@pytest.mark.parametrize("sdk", [False, True], ids=["wire", "sdk"])
@pytest.mark.parametrize(
    ("target", "variable"),
    [
        ("http://api.remote.test/v1", "HTTP_PROXY"),
        ("http://api.remote.test/v1", "ALL_PROXY"),
        ("https://api.remote.test/v1", "HTTPS_PROXY"),
        ("https://api.remote.test/v1", "all_proxy"),
    ],
)
def test_a_proxys_407_names_the_proxy_and_its_variable_not_its_password(
    target: str, variable: str, sdk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MisbehavingServer(_proxy_407) as proxy:
        monkeypatch.setenv(variable, f"http://corp:s3cretproxypw@127.0.0.1:{proxy.port}")
        recorder = SDKRecorder() if sdk else StreamRecorder()
        (rec,) = _records(target, "auto", recorder)
        seen = b"".join(proxy.requests)
    assert rec.error is not None, rec
    message = rec.error.message
    assert "407" in message, message
    assert f"proxy http://127.0.0.1:{proxy.port} (from {variable})" in message, message
    assert "s3cretproxypw" not in rec.to_json_line()
    assert b"api.remote.test" in seen  # the request did reach the proxy


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("written", ["::ffff:127.0.0.1", "::1"])
def test_loopback_in_any_spelling_bypasses_the_proxy(
    written: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as dead:  # a proxy port nothing listens on
        dead.bind(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead_port}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{dead_port}")
    head = http_head(
        200,
        {
            "content-type": "text/event-stream",
            "content-length": str(len(EVENTS)),
            "connection": "close",
        },
    )
    serve_on = "::1" if written == "::1" else "127.0.0.1"
    transport, recorder = _path(path)
    with MisbehavingServer(lambda _: [head, EVENTS], host=serve_on) as server:
        (rec,) = _records(f"http://[{written}]:{server.port}", transport, recorder())
    assert rec.error is None, rec.error
    assert rec.output_text == "Hello"


@pytest.mark.parametrize("proxy", ["gopher://proxy.corp:70", "socks4://proxy.corp:1080", "::"])
def test_an_unusable_all_proxy_does_not_stop_the_in_process_fake(
    proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALL_PROXY", proxy)
    cls = provider_class("fake")
    settings = cls.settings_model.model_validate({"id": "f", "kind": "fake"})
    assert settings.check_available() is None

    async def main() -> RequestRecord:
        provider = cls(settings)
        try:
            return await StreamRecorder().record(provider, chat(), RecordContext("r", "t"))
        finally:
            await provider.aclose()

    rec = asyncio.run(main())
    assert rec.error is None, rec.error
    assert rec.output_text


@pytest.mark.parametrize("path", PATHS)
def test_a_certificate_not_trusted_here_says_tls_and_where_to_trust_it(
    path: str, ca: trustme.CA, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)  # the throwaway CA is trusted nowhere
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)

    def answer(conn: socket.socket) -> None:
        conn.settimeout(5)
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)

    transport, recorder = _path(path)
    with _RawServer(lambda c: _quietly(answer, c)) as server:
        (rec,) = _records(server.https_url, transport, recorder())
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION, rec.error
    assert "TLS" in rec.error.message and "SSL_CERT_FILE" in rec.error.message, rec.error.message
