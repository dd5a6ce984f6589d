"""How a failure of HTTP as servers speak it is named: the rules behind the socket tests.

`tests/measurement/test_http_as_spoken.py` meets each case on real servers; here the naming
rules are checked on their own: which hosts are loopback for the proxy rule, which TLS
failures say what, which encodings are undecodable, and a 407's wording.
"""

from __future__ import annotations

import ssl

import httpx
import pytest

from labkit.measurement.failures import proxy_refused, tls_problem, undecodable_body
from labkit.records import ErrorKind, RecordError
from labkit.wire.proxies import is_loopback

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.8.7", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("[::ffff:127.0.0.1]", True),
        ("::ffff:7f00:1", True),
        ("localhost", True),
        ("api.localhost", True),
        ("::ffff:10.0.0.1", False),
        ("10.0.0.1", False),
        ("::2", False),
        ("example.com", False),
    ],
)
def test_which_hosts_are_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _caused_by(outer: Exception, inner: BaseException) -> Exception:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (
            _caused_by(
                httpx.ConnectError("x"),
                ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            ),
            "use http://",
        ),
        (
            httpx.ConnectError("[SSL: RECORD_LAYER_FAILURE] record layer failure (_ssl.c:1006)"),
            "use http://",
        ),
        (
            httpx.ReadError("TLS: [SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert"),
            "client certificate",
        ),
        (
            httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
            "SSL_CERT_FILE",
        ),
        (httpx.ConnectTimeout("timed out in the TLS handshake (TCP connected)"), "use http://"),
    ],
)
def test_tls_failures_say_tls_and_what_to_do(exc: Exception, says: str) -> None:
    problem = tls_problem(exc, {})
    assert problem is not None and problem.startswith("TLS") and says in problem


def test_a_handshake_stalled_after_tcp_is_a_plain_http_port() -> None:
    phases = {"connection.connect_tcp.complete": 1, "connection.start_tls.started": 2}
    problem = tls_problem(httpx.ConnectTimeout(""), phases)
    assert problem is not None and "TLS handshake timed out" in problem


def test_a_fresh_tls_connection_closed_before_the_response_suggests_a_client_certificate() -> None:
    phases = {"connection.connect_tcp.complete": 1, "connection.start_tls.complete": 2}
    problem = tls_problem(httpx.RemoteProtocolError("Server disconnected"), phases)
    assert problem is not None and "client certificate" in problem


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("All connection attempts failed"),
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("Server disconnected"),  # plain http, or a reused connection
    ],
)
def test_failures_that_are_not_tls_are_not_named_tls(exc: Exception) -> None:
    assert tls_problem(exc, {"connection.connect_tcp.complete": 1}) is None


@pytest.mark.parametrize(
    ("encoding", "named"),
    [
        ("identity", False),
        ("gzip", False),
        ("", False),
        ("br", True),
        ("compress", True),
        ("gzip, x-new", True),
    ],
)
def test_undecodable_encodings_are_named(encoding: str, named: bool) -> None:
    headers = httpx.Headers({"content-encoding": encoding} if encoding else {})
    error = undecodable_body(200, headers, frozenset({"identity", "gzip", "deflate"}))
    assert (error is not None) is named
    if error is not None:
        assert error.kind == ErrorKind.PROTOCOL and "cannot decode" in error.message


def test_a_407_names_the_proxy_and_other_statuses_are_left_alone() -> None:
    via = "proxy http://10.0.0.9:3128 (from HTTPS_PROXY)"
    refused = proxy_refused(
        RecordError(kind=ErrorKind.HTTP_STATUS, message="HTTP 407", status=407), via
    )
    assert via in refused.message and "NO_PROXY" in refused.message
    other = RecordError(kind=ErrorKind.HTTP_STATUS, message="HTTP 500", status=500)
    assert proxy_refused(other, via) is other
