"""The failure taxonomy: every way a request can fail, as one `RecordError` of the contract.

Beside the recorder, not inside it: the recorders (wire and SDK path) decide *when* a
request failed; this module decides *what* the failure is called — an HTTP status and the
provider's message from its body, a redirect not followed, a reply that is no event stream,
a malformed stream, a request that cannot be built (`config`), or labkit's own bug
(`internal`). Each message has the provider's secrets scrubbed (`redactor`) and is at most
300 characters. The kinds are defined in docs/measurement.md (`error.kind`).
"""

from __future__ import annotations

import email.utils
import errno
import json
import re
import socket
import ssl
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime

import httpx

from labkit.errors import MalformedStream
from labkit.providers.base import Provider, ResponseHeaders, StreamParser
from labkit.records import ErrorKind, RecordError

__all__ = [
    "REQUEST_INVALID",
    "connect_failure",
    "error_for",
    "exception_message",
    "http_error",
    "internal_error",
    "looks_like_a_document",
    "no_parser_no_error",
    "not_a_stream",
    "proxy_refused",
    "redactor",
    "redirect_error",
    "sole_cause",
    "stream_error",
    "tls_problem",
    "undecodable_body",
]

_BODY_EXCERPT_CHARS = 500


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_message_from_body(body: str) -> str | None:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message")
            etype = err.get("type")
            if isinstance(msg, str):
                return f"{etype}: {msg}" if isinstance(etype, str) else msg
        elif isinstance(err, str):
            return err
    return None


def http_error(
    status: int, headers: ResponseHeaders, body: bytes, redact: Callable[[str], str]
) -> RecordError:
    """A `RecordError` for an HTTP error response (status >= 400)."""
    text = redact(body.decode("utf-8", errors="replace"))
    detail = _error_message_from_body(text)
    message = f"HTTP {status}" + (f": {detail}" if detail else "")
    return RecordError(
        kind=ErrorKind.HTTP_STATUS,
        message=message[:300],
        status=status,
        retry_after_s=_retry_after_s(headers.get("retry-after")),
        body_excerpt=text[:_BODY_EXCERPT_CHARS] or None,
    )


def not_a_stream(
    status: int, headers: ResponseHeaders, body: bytes, redact: Callable[[str], str]
) -> RecordError:
    """A `RecordError` naming what arrived instead of an event stream."""
    content_type = headers.get("content-type") or "no content-type"
    text = redact(body.decode("utf-8", errors="replace"))
    head = text.lstrip()[:1]
    if head == "<":
        title = re.search(r"<title[^>]*>([^<]{0,120})", text, re.IGNORECASE)
        what = "an HTML page" + (f" ({title.group(1).strip()!r})" if title else "")
        hint = "is base_url the API root?"
    elif head in ("{", "["):
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        completion = isinstance(obj, dict) and ("choices" in obj or obj.get("type") == "message")
        what = "a JSON completion (not streamed)" if completion else "a JSON body"
        hint = "the server ignored `stream: true`" if completion else "not a chat stream"
    else:
        what, hint = "a body that is not an event stream", "not a chat stream"
    return RecordError(
        kind=ErrorKind.PROTOCOL,
        message=f"HTTP {status} with {what} instead of an event stream ({content_type}): {hint}"[
            :300
        ],
        status=status,
        body_excerpt=text[:_BODY_EXCERPT_CHARS] or None,
    )


def redirect_error(
    status: int, headers: ResponseHeaders, redact: Callable[[str], str]
) -> RecordError:
    """A `RecordError` for a redirect: labkit never follows one."""
    location = redact(headers.get("location") or "no location")
    return RecordError(
        kind=ErrorKind.PROTOCOL,
        message=f"HTTP {status} redirect to {location}, not followed: labkit measures the URL it "
        "is given; set base_url to the final one"[:300],
        status=status,
    )


def looks_like_a_document(content_type: str, first_chunk: bytes) -> bool:
    """True when a 2xx reply is plainly no event stream: not labelled as one and starting
    like HTML or JSON (an SSE body starts with a field name or a comment)."""
    if content_type.startswith("text/event-stream"):
        return False
    return first_chunk.lstrip()[:1] in (b"<", b"{", b"[")


#: Exceptions raised while a request is built or written that mean the request itself is not
#: valid (an impossible URL or port, a header value that is no header value, a proxy whose
#: package is missing): `error.kind = config`.
REQUEST_INVALID: tuple[type[BaseException], ...] = (
    httpx.InvalidURL,
    OverflowError,  # a port above 65535 reaches the socket layer
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
    UnicodeEncodeError,
    ImportError,
)


def sole_cause(exc: Exception) -> Exception:
    """The one exception inside a group of one (anyio's connect wraps what failed in a
    TaskGroup), so it is classified for what it is."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def no_parser_no_error() -> RecordError:
    """The error of a request that ended with neither a parser nor an error (a labkit bug)."""
    return RecordError(kind=ErrorKind.INTERNAL, message="internal error: no parser and no error")


def internal_error(exc: BaseException, redact: Callable[[str], str]) -> RecordError:
    """`error.kind = internal`: an exception that is labkit's own bug, named as one."""
    return RecordError(
        kind=ErrorKind.INTERNAL,
        message=f"internal error (a labkit bug): {exception_message(exc, redact)}"[:300],
    )


def error_for(exc: Exception, redact: Callable[[str], str]) -> RecordError:
    """The record error for an exception that is no transport's own: a malformed stream,
    a request that could not be built, or labkit's own bug."""
    if isinstance(exc, MalformedStream):
        return RecordError(
            kind=ErrorKind.PROTOCOL, message=f"malformed stream: {redact(str(exc))}"[:300]
        )
    if isinstance(exc, RecursionError):
        return RecordError(
            kind=ErrorKind.PROTOCOL, message="malformed stream: JSON nested too deeply to read"
        )
    if isinstance(exc, UnicodeDecodeError):
        return RecordError(
            kind=ErrorKind.PROTOCOL,
            message=f"malformed stream: not valid UTF-8 ({redact(exc.reason)} at byte {exc.start})",
        )
    if isinstance(exc, json.JSONDecodeError):
        return RecordError(
            kind=ErrorKind.PROTOCOL,
            message=f"malformed stream: an event is not valid JSON ({redact(exc.msg)} at "
            f"position {exc.pos})"[:300],
        )
    if isinstance(exc, REQUEST_INVALID):
        return RecordError(
            kind=ErrorKind.CONFIG,
            message=f"request not sendable as configured: {exception_message(exc, redact)}"[:300],
        )
    return internal_error(exc, redact)


def stream_error(parser: StreamParser, redact: Callable[[str], str]) -> RecordError | None:
    """The error event the parser saw, if any, with secrets scrubbed from its text.

    An error event's message comes from the provider and may echo the key.
    """
    if parser.error is None:
        return None
    return parser.error.model_copy(update={"message": redact(parser.error.message)})


def exception_message(exc: BaseException, redact: Callable[[str], str]) -> str:
    """`Type: message` of an exception, secrets scrubbed, at most 300 characters."""
    text = str(exc) or type(exc).__name__
    return redact(f"{type(exc).__name__}: {text}")[:300]


def redactor(provider: Provider) -> Callable[[str], str]:
    """A function that replaces the provider's secrets in a text (early, per record; the
    output sinks scrub again, in every encoding)."""
    secrets = provider.secrets()

    def redact(text: str) -> str:
        for s in secrets:
            text = text.replace(s, "***")
        return text

    return redact


# --- HTTP as servers speak it: encodings, TLS, proxies (issue 25) ----------------------------

#: What an SSL error's text says about the server, and what to change (first match wins).
_TLS_READINGS: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("certificate_required", "certificate required", "alert bad certificate"),
        "the server demands a client certificate (mutual TLS), which labkit does not send: "
        "measure an endpoint that does not require one",
    ),
    (
        ("certificate_verify_failed", "certificate verify failed"),
        "the server's certificate is not trusted here: set SSL_CERT_FILE to its CA bundle",
    ),
    (
        (
            "wrong_version_number",
            "wrong version number",
            "record_layer_failure",
            "record layer failure",
            "packet_length_too_long",
            "packet length too long",
            "http_request",
            "unexpected_eof",
            "unexpected eof",
            "eof occurred in violation of protocol",
            "closed during the tls handshake",
        ),
        "the port does not speak TLS (a plain-HTTP server?): use http:// in base_url",
    ),
)


def tls_problem(exc: BaseException, phases: Mapping[str, int] | None = None) -> str | None:
    """`TLS ...: what to do` when `exc` (or what caused it) is a TLS failure of an https
    request, else None. A handshake that timed out after TCP connected (`phases` has
    ``connection.connect_tcp.complete`` and no ``start_tls.complete``, or the lean
    transport's "TLS handshake" timeout) is most often a plain-HTTP port waiting for a
    request line that never comes; a fresh TLS connection closed before any response is most
    often a server demanding a client certificate."""
    texts: list[str] = []
    timed_out = False
    seen: BaseException | None = exc
    while seen is not None and len(texts) < 8:  # the SDKs wrap httpx2's exceptions
        texts.append(f"{type(seen).__name__} {seen}".lower())
        timed_out = timed_out or isinstance(seen, httpx.TimeoutException | TimeoutError)
        timed_out = timed_out or "timeout" in type(seen).__name__.lower()
        seen = seen.__cause__ or seen.__context__
    text = " ".join(texts)
    if "ssl" in text or "tls" in text:
        for needles, advice in _TLS_READINGS:
            if any(n in text for n in needles):
                return f"TLS failed: {advice}"
    stalled = phases is not None and (
        "connection.connect_tcp.complete" in phases
        and "connection.start_tls.started" in phases
        and "connection.start_tls.complete" not in phases
    )
    handshaken = phases is not None and "connection.start_tls.complete" in phases
    lost = ("reset", "disconnected", "readerror", "brokenresource", "closed", "eof")
    if handshaken and not timed_out and any(word in text for word in lost):
        # The server's alert is often lost to the reset of its close (the request unread).
        return (
            "TLS connection closed by the server right after the handshake, before any "
            "response: a server that demands a client certificate (mutual TLS) does this, and "
            "labkit sends none; measure an endpoint that does not require one"
        )
    if timed_out and (stalled or "tls handshake" in text):
        return (
            "TLS handshake timed out after TCP connected: the port may speak plain HTTP "
            "(use http:// in base_url)"
        )
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc`, what caused it, and every exception inside a group, depth first."""
    seen: set[int] = set()
    out: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        inner = list(e.exceptions) if isinstance(e, BaseExceptionGroup) else []
        todo.extend(x for x in (e.__context__, e.__cause__) if x is not None)
        todo.extend(reversed(inner))
    return out


def _is_connect_error(exc: BaseException) -> bool:
    """httpx's ConnectError, or the same class of the copy of httpx an SDK bundles."""
    kind = type(exc)
    return isinstance(exc, httpx.ConnectError) or (
        kind.__name__ == "ConnectError" and kind.__module__.startswith("httpx")
    )


def _target(connect: BaseException) -> str:
    """`HOST:PORT` the failed connect was for (the request's URL), or "the server"."""
    try:
        url = httpx.URL(str(connect.request.url))  # type: ignore[attr-defined]
    except (RuntimeError, AttributeError, httpx.InvalidURL):
        return "the server"  # raised without its request (a proxy's wrapper)
    port = url.port or (443 if url.scheme == "https" else 80)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{port}"


def connect_failure(exc: BaseException, redact: Callable[[str], str]) -> str | None:
    """A connect that failed, in words a user acts on (``connection refused by
    127.0.0.1:9``), not the transport's (httpx says "All connection attempts failed" for a
    refusal): None where `exc` is no failed connect (`httpx.ConnectError` anywhere in its
    chain, as the SDKs wrap theirs). A connect through a proxy names the proxy."""
    chain = _chain(exc)
    connect = next((e for e in chain if _is_connect_error(e)), None)
    if connect is None or any(isinstance(e, ssl.SSLError) for e in _chain(connect)):
        return None  # TLS failures have their own words (`tls_problem`)
    text = str(connect)
    proxied = text.find(" (through ")  # `_ProxiedTransport`: the proxy refused, not the host
    where = text[proxied + len(" (through ") : -1] if proxied >= 0 else _target(connect)
    errors = [e for e in _chain(connect) if isinstance(e, OSError)]
    cause = next((e for e in errors if e.errno is not None), errors[0] if errors else None)
    code = cause.errno if cause is not None else None
    detail = (cause.strerror if cause is not None else None) or str(cause or connect)
    if isinstance(cause, socket.gaierror):
        host = where if proxied >= 0 else where.rpartition(":")[0] or where
        said = f"{host}: no such host (name lookup failed: {detail})"
    elif code == errno.ECONNREFUSED:
        said = f"connection refused by {where} (nothing listens on that port)"
    elif code in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        said = f"{where} unreachable: no route to it ({detail})"
    else:
        said = f"could not connect to {where}: {detail}"
    return redact(said)[:300]


def undecodable_body(
    status: int, headers: ResponseHeaders, decodable: Collection[str]
) -> RecordError | None:
    """The error of a body in a Content-Encoding this install cannot decode (labkit asks
    for identity; a server or proxy may compress all the same), or None. Read as it is, such
    a body would pass as an "empty response body"."""
    value = headers.get("content-encoding") or ""
    encodings = [e.strip().lower() for e in value.split(",") if e.strip()]
    unknown = [e for e in encodings if e != "identity" and e not in decodable]
    if not unknown:
        return None
    install = {"br": "pip install brotli", "zstd": "pip install zstandard"}.get(unknown[0])
    fix = f"{install}, or " if install else ""
    message = (
        f"HTTP {status} body in Content-Encoding {value.strip()!r}, which this install cannot "
        f"decode (labkit asked for identity): {fix}have the server or proxy send it uncompressed"
    )
    return RecordError(kind=ErrorKind.PROTOCOL, message=message[:300], status=status)


def proxy_refused(error: RecordError, via_proxy: str | None) -> RecordError:
    """An HTTP 407 named for what it is: the proxy (and the variable that set it) wants
    credentials; `via_proxy` is `ProxyChoice.describe()`, which never holds them."""
    if error.status != 407:
        return error
    where = via_proxy or "a proxy between labkit and the server"
    message = (
        f"HTTP 407 from {where}: the proxy refused the request (Proxy Authentication "
        "Required); put user:password in the proxy URL of that variable, or add the host "
        "to NO_PROXY"
    )
    return error.model_copy(update={"message": message[:300]})
