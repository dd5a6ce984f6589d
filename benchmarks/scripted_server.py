"""A scripted OpenAI-compatible SSE server that stamps every event with its true send time.

Used by `bench_load.py` as the ground truth for labkit's measurement error. It runs in its
OWN process (`ScriptedServer` starts it with `subprocess`), so it shares neither the GIL
nor the event loop of the client being measured.

The script, per request (``POST .../chat/completions``):

- status line, headers and a role-only chunk as soon as the request is fully received
  (``t_recv``, the clock read right after the `recv` that completed the body);
- output token ``i`` (``i = 0 .. n-1``) due at ``t_recv + ttft_ms + i * interval_ms``, on
  ABSOLUTE times, so a late wake-up never shifts the later tokens; ``n = tokens`` capped by
  the request's ``max_tokens`` / ``max_completion_tokens``; with ``event_bytes`` each token's
  event is padded (its content) to about that many bytes (``--event-bytes 1000000``: 1 MB
  events, which take many reads on the client);
- right after the last token: a finish chunk, a usage chunk (``usage.prompt_tokens`` /
  ``completion_tokens``), ``data: [DONE]`` and the end of the chunked body.

Per-request script: a path segment ``KEY=VALUE`` before ``/chat/completions`` overrides the
server's ``ttft_ms``, ``interval_ms``, ``tokens`` or ``event_bytes`` for that request
(``http://127.0.0.1:PORT/interval_ms=62.5/v1``; `ScriptedServer.url` builds such roots), so
one server serves every level of a benchmark, each at its own rate.

Request bodies are not parsed as JSON: ``max_tokens`` is found with a regular expression and
``usage.prompt_tokens`` is the body's count of spaces, so a 200 KB prompt costs the schedule
one `recv` and a scan, not a parse (the server has one thread for every stream).

Scheduling: one thread, one loop. It waits in `epoll` only while the next due event is more
than ~1.5 ms away (epoll's timeout has 1 ms granularity and rounds up), and sleeps the last
stretch with `time.sleep` (clock_nanosleep, ~50-100 µs slack); each wake-up sends every event
that is due, for every stream. ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, the same clock as
the client's `perf_counter_ns` on this host) is read immediately before each event's bytes
are handed to `send`, and kept per response id (the chunk ``"id"``, unique per stream).
Sockets are non-blocking with TCP_NODELAY; a send the kernel could not take whole is
buffered and counted as a stall (its stamp is then "queued", not "written").

A wake-up that is late (``late_wakeups_ms``: many streams due at once, a 2-core host shared
with the client) sends late, and the stamp says so: the stamps are when the bytes were
handed to the kernel, not when they were due, so a client's stamp error stays measurable
when one Python process cannot keep 1,000 streams on schedule; only the achieved rate drops.

TLS (``--tls-cert``/``--tls-key``, or ``ScriptedServer(tls=True)``, which issues a server
certificate for 127.0.0.1 from a throw-away `trustme` CA written to a temp dir, CA file at
`ScriptedServer.ca_file`): a second listener serves the same script over HTTPS, on the same
loop and schedule. TLS runs on an `ssl.SSLObject` over memory BIOs, the handshake driven
non-blocking in the loop; each event is encrypted first (one TLS record per small event)
and the stamp read right before its ciphertext is handed to `send`, as on plain TCP — so
the server's encryption is not counted as the client's error (through an `ssl.SSLSocket`,
encryption happens inside `send`, after any stamp a server can take). Clients trust the CA through
``SSL_CERT_FILE`` (`httpx.create_ssl_context()`, which labkit's providers use, reads it).

Other endpoints: ``GET /stamps`` returns and clears the stamps as JSON::

    {"streams": {"<id>": {"t_recv": ns, "sends": [ns, ...], "sent": [ns, ...], "tokens": n}},

``sends[i]`` is read right before event ``i`` goes to `send`, ``sent[i]`` right after `send`
returned: on loopback the client's kernel receives (and stamps) the bytes inside that call,
so the true arrival lies between the two, and the client's true lateness is known to within
the call's duration (tens of µs on a busy 2-core host; the bench reports it).
     "stalls": n, "late_wakeups_ms": {"p50": ..., "p99": ..., "max": ...}}

``GET /health`` answers ``ok``. HTTP/1.1 keep-alive, chunked transfer encoding;
``connection: close`` is honoured. The listen backlog is 4096 (the kernel caps it at
``net.core.somaxconn``), so a 1,000-stream wave of connects is not refused; the process
raises its soft open-files limit to the hard one.

Run alone: ``.venv/bin/python benchmarks/scripted_server.py [--port 0] [--ttft-ms 50]
[--interval-ms 2] [--tokens 100] [--event-bytes 0] [--tls-cert PEM --tls-key PEM]``; it
prints ``PORT <n>`` on its first line, and ``TLS_PORT <n>`` on its second with TLS.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import heapq
import itertools
import json
import os
import re
import resource
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["ScriptedServer", "Server", "main", "raise_open_files_limit"]

_WORDS = [
    b" tokens",
    b" are",
    b" the",
    b" pieces",
    b" a",
    b" model",
    b" reads",
    b" and",
    b" writes",
    b" one",
    b" at",
    b" a",
    b" time",
]
_EPOLL_MARGIN_NS = 1_500_000  # wait in epoll only while the next event is further than this
_SLEEP_MIN_NS = 30_000  # below this, spin instead of sleeping
_BACKLOG = 4096
_MAX_TOKENS = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d+)')
_SCRIPT_KEYS = {"ttft_ms": float, "interval_ms": float, "tokens": int, "event_bytes": int}


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's soft open-files limit towards `wanted` (at most the hard limit);
    return the soft limit now in force. Children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


def _frame(payload: bytes) -> bytes:
    """One HTTP chunk holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Stream:
    __slots__ = (
        "conn",
        "head",
        "i",
        "interval_ns",
        "n",
        "pad",
        "prompt_tokens",
        "rid",
        "sends",
        "sent",
        "t_recv",
        "tail",
    )

    def __init__(
        self,
        conn: _Conn,
        rid: str,
        n: int,
        prompt_tokens: int,
        t_recv: int,
        interval_ns: int,
        event_bytes: int,
    ) -> None:
        self.conn = conn
        self.rid = rid
        self.n = n
        self.i = 0
        self.prompt_tokens = prompt_tokens
        self.t_recv = t_recv
        self.interval_ns = interval_ns
        self.sends: list[int] = []
        self.sent: list[int] = []
        base = (
            b'data: {"id":"' + rid.encode() + b'","object":"chat.completion.chunk",'
            b'"created":1700000000,"model":"scripted","system_fingerprint":null,'
            b'"choices":[{"index":0,"delta":{"content":"'
        )
        self.head = base
        self.tail = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
        self.pad = b"x" * max(0, event_bytes - len(base) - len(self.tail) - 8)

    def token_frame(self) -> bytes:
        word = _WORDS[self.i % len(_WORDS)]
        if not self.pad:
            return _frame(self.head + word + self.tail)
        # One copy of a large event (bytes `%` formatting of 1 MB takes milliseconds).
        size = len(self.head) + len(word) + len(self.pad) + len(self.tail)
        return b"".join((b"%x\r\n" % size, self.head, word, self.pad, self.tail, b"\r\n"))

    def end_frames(self) -> bytes:
        prefix = (
            b'data: {"id":"' + self.rid.encode() + b'","object":"chat.completion.chunk",'
            b'"created":1700000000,"model":"scripted","system_fingerprint":null,"choices":'
        )
        finish = prefix + b'[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n'
        usage = (
            prefix
            + b'[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n'
            % (self.prompt_tokens, self.n, self.prompt_tokens + self.n)
        )
        return _frame(finish) + _frame(usage) + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class _Conn:
    __slots__ = (
        "busy",
        "close_after",
        "handshaking",
        "inbuf",
        "outbuf",
        "sock",
        "tls",
        "tls_in",
        "tls_out",
        "want_write",
    )

    def __init__(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        self.sock = sock  # the TCP socket; on TLS it carries ciphertext
        self.tls: ssl.SSLObject | None = None
        self.tls_in = ssl.MemoryBIO()
        self.tls_out = ssl.MemoryBIO()
        if tls is not None:
            self.tls = tls.wrap_bio(self.tls_in, self.tls_out, server_side=True)
        self.inbuf = b""
        self.outbuf = b""
        self.busy = False  # a stream is being served on this connection
        self.close_after = False
        self.want_write = False
        self.handshaking = tls is not None  # a TLS connection whose handshake is not done


class _Listener:
    """A listening socket in the selector; `tls`: wrap what it accepts."""

    __slots__ = ("sock", "tls")

    def __init__(self, sock: socket.socket, tls: ssl.SSLContext | None) -> None:
        self.sock = sock
        self.tls = tls


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.create_server((host, port), backlog=_BACKLOG)
    sock.setblocking(False)
    return sock


class Server:
    """The single-threaded scheduler loop (see the module docstring)."""

    def __init__(
        self,
        host: str,
        port: int,
        ttft_ms: float,
        interval_ms: float,
        tokens: int,
        *,
        event_bytes: int = 0,
        tls: ssl.SSLContext | None = None,
        tls_port: int = 0,
    ):
        self.script: dict[str, float] = {
            "ttft_ms": ttft_ms,
            "interval_ms": interval_ms,
            "tokens": tokens,
            "event_bytes": event_bytes,
        }
        self.listener = _listen(host, port)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, _Listener(self.listener, None))
        self.tls_port: int | None = None
        if tls is not None:
            tls_listener = _listen(host, tls_port)
            self.tls_port = tls_listener.getsockname()[1]
            self.sel.register(tls_listener, selectors.EVENT_READ, _Listener(tls_listener, tls))
        self.heap: list[tuple[int, int, _Stream]] = []
        self.seq = itertools.count()
        self.ids = itertools.count()
        self.prefix = os.urandom(4).hex()
        self.done: dict[str, dict[str, Any]] = {}
        self.stalls = 0
        self.late_ns: list[int] = []  # how late each wake-up was against its due time

    # -- I/O ----------------------------------------------------------------------------------

    def _watch(self, conn: _Conn, write: bool) -> None:
        if conn.want_write != write:
            conn.want_write = write
            mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
            self.sel.modify(conn.sock, mask, conn)

    def _send(
        self,
        conn: _Conn,
        data: bytes,
        stamps: list[int] | None = None,
        after: list[int] | None = None,
    ) -> None:
        """Send `data` (encrypted first on TLS); `stamps` gets the clock read right before
        the bytes are handed to the kernel (or queued behind a stalled send), `after` the
        clock read once `send` returned."""
        tls = conn.tls
        if tls is not None:
            try:
                tls.write(data)
            except ssl.SSLError:
                self._drop(conn)
                return
            data = conn.tls_out.read()
        if stamps is not None:
            stamps.append(time.perf_counter_ns())
        self._send_raw(conn, data)
        if after is not None:
            after.append(time.perf_counter_ns())

    def _send_raw(self, conn: _Conn, data: bytes) -> None:
        if conn.outbuf:
            conn.outbuf += data
            self.stalls += 1
            return
        try:
            n = conn.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self._drop(conn)
            return
        if n < len(data):
            self.stalls += 1
            conn.outbuf = data[n:]
            self._watch(conn, True)

    def _flush(self, conn: _Conn) -> None:
        try:
            n = conn.sock.send(conn.outbuf)
        except BlockingIOError:
            return
        except OSError:
            self._drop(conn)
            return
        conn.outbuf = conn.outbuf[n:]
        if not conn.outbuf:
            self._watch(conn, False)
            if conn.close_after and not conn.busy:
                self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()
        conn.busy = False

    def _accept(self, listener: _Listener) -> None:
        while True:
            try:
                sock, _ = listener.sock.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, listener.tls)
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _handshake(self, conn: _Conn) -> None:
        tls = conn.tls
        assert tls is not None
        try:
            tls.do_handshake()
            conn.handshaking = False
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError:  # a client that gave up or distrusts the CA
            self._drop(conn)
            return
        if conn.tls_out.pending:
            self._send_raw(conn, conn.tls_out.read())
        if not conn.handshaking:
            self._decrypted(conn)  # the request may have come with the handshake's last flight

    def _decrypted(self, conn: _Conn) -> None:
        """Serve what the TLS records read so far hold."""
        tls = conn.tls
        assert tls is not None
        data = b""
        try:
            while chunk := tls.read(262144):
                data += chunk
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError:
            self._drop(conn)
            return
        if conn.tls_out.pending:  # e.g. a key update's reply
            self._send_raw(conn, conn.tls_out.read())
        if data:
            conn.inbuf += data
            self._parse(conn, time.perf_counter_ns())

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(262144)  # one recv per readiness; epoll reports what is left
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.tls is not None:
            conn.tls_in.write(data)
            if conn.handshaking:
                self._handshake(conn)
            else:
                self._decrypted(conn)
            return
        t = time.perf_counter_ns()
        conn.inbuf += data
        self._parse(conn, t)

    def _script(self, path: str) -> dict[str, float]:
        script = dict(self.script)
        for segment in path.split("/"):
            key, eq, value = segment.partition("=")
            if eq and key in _SCRIPT_KEYS:
                script[key] = _SCRIPT_KEYS[key](value)
        return script

    def _route(self, conn: _Conn, method: str, path: str, body: bytes, t_recv: int) -> None:
        if method == "POST" and path.endswith("/chat/completions"):
            script = self._script(path)
            n = int(script["tokens"])
            cap = _MAX_TOKENS.search(body)
            if cap and int(cap[1]):
                n = min(n, int(cap[1]))
            rid = f"chatcmpl-{self.prefix}-{next(self.ids)}"
            stream = _Stream(
                conn,
                rid,
                n,
                body.count(b" "),
                t_recv,
                int(script["interval_ms"] * 1e6),
                int(script["event_bytes"]),
            )
            conn.busy = True
            role = (
                b'data: {"id":"' + rid.encode() + b'","object":"chat.completion.chunk",'
                b'"created":1700000000,"model":"scripted","system_fingerprint":null,'
                b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
                b'"logprobs":null,"finish_reason":null}]}\n\n'
            )
            self._send(
                conn,
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
                b"x-request-id: " + rid.encode() + b"\r\n\r\n" + _frame(role),
            )
            if n == 0:
                self._finish(stream)
            else:
                due = t_recv + int(script["ttft_ms"] * 1e6)
                heapq.heappush(self.heap, (due, next(self.seq), stream))
        elif method == "GET" and path.startswith("/stamps"):
            late = sorted(self.late_ns)

            def q(p: float) -> float | None:
                return late[min(len(late) - 1, int(p * len(late)))] / 1e6 if late else None

            out = {
                "streams": self.done,
                "stalls": self.stalls,
                "late_wakeups_ms": {"p50": q(0.5), "p99": q(0.99), "max": q(1.0)},
            }
            self.done, self.stalls, self.late_ns = {}, 0, []
            self._simple(conn, json.dumps(out).encode())
        elif method == "GET" and path.startswith("/health"):
            self._simple(conn, b"ok")
        else:
            self._simple(conn, b'{"error":{"message":"not found"}}', b"404 Not Found")

    def _simple(self, conn: _Conn, body: bytes, status: bytes = b"200 OK") -> None:
        self._send(
            conn,
            b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body,
        )
        if conn.close_after:
            self._close_when_flushed(conn)

    def _close_when_flushed(self, conn: _Conn) -> None:
        if not conn.outbuf:
            self._drop(conn)

    def _finish(self, stream: _Stream) -> None:
        conn = stream.conn
        self._send(conn, stream.end_frames())
        self.done[stream.rid] = {
            "t_recv": stream.t_recv,
            "sends": stream.sends,
            "sent": stream.sent,
            "tokens": stream.n,
        }
        conn.busy = False
        if conn.close_after:
            self._close_when_flushed(conn)
        elif conn.inbuf:  # a request that arrived while this stream was served
            self._parse(conn, time.perf_counter_ns())

    def _parse(self, conn: _Conn, t_recv: int) -> None:
        """Serve every complete request in the connection's buffer, one stream at a time."""
        while not conn.busy:
            buf = conn.inbuf
            end = buf.find(b"\r\n\r\n", 0, 65536)
            if end < 0:
                return
            request_line, *lines = buf[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0"))
            if len(buf) < end + 4 + length:
                return
            body = buf[end + 4 : end + 4 + length]
            conn.inbuf = buf[end + 4 + length :]
            conn.close_after = headers.get("connection", "").lower() == "close"
            method, path, _ = request_line.split(" ", 2)
            self._route(conn, method, path, body, t_recv)

    # -- the scheduler --------------------------------------------------------------------------

    def _send_due(self) -> None:
        heap = self.heap
        clock = time.perf_counter_ns
        first = True
        while heap:
            due, _, stream = heap[0]
            now = clock()
            if due > now:
                return
            if first:
                self.late_ns.append(now - due)
                first = False
            conn = stream.conn
            if conn.sock.fileno() < 0:  # the client went away
                heapq.heappop(heap)
                continue
            self._send(conn, stream.token_frame(), stream.sends, stream.sent)
            stream.i += 1
            if stream.i < stream.n:
                heapq.heapreplace(heap, (due + stream.interval_ns, next(self.seq), stream))
            else:
                heapq.heappop(heap)
                self._finish(stream)

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in events:
            conn = key.data
            if isinstance(conn, _Listener):
                self._accept(conn)
                continue
            if mask & selectors.EVENT_WRITE and conn.outbuf:
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn.sock.fileno() >= 0:
                self._read(conn)

    def serve_forever(self) -> None:
        """Run the scheduler loop until killed."""
        clock = time.perf_counter_ns
        select = self.sel.select
        while True:
            self._send_due()
            if not self.heap:
                self._handle(select(None))
                continue
            wait = self.heap[0][0] - clock()
            if wait > _EPOLL_MARGIN_NS:
                self._handle(select((wait - _EPOLL_MARGIN_NS) / 1e9))
            else:
                self._handle(select(0))
                wait = self.heap[0][0] - clock() if self.heap else 0
                if wait > _SLEEP_MIN_NS:
                    time.sleep((wait - _SLEEP_MIN_NS) / 1e9)
                # then spin (at most _SLEEP_MIN_NS plus the sleep's slack) to the due time


class ScriptedServer:
    """The server in its own process: ``with ScriptedServer(...) as srv: srv.base_url``.

    `tls`: also serve HTTPS (`tls_base_url`) with a certificate from a throw-away `trustme`
    CA; the CA's PEM is `ca_file` (point ``SSL_CERT_FILE`` at it to trust it).
    """

    def __init__(
        self,
        *,
        ttft_ms: float = 50.0,
        interval_ms: float = 2.0,
        tokens: int = 100,
        event_bytes: int = 0,
        tls: bool = False,
    ) -> None:
        self.args = [
            "--ttft-ms",
            str(ttft_ms),
            "--interval-ms",
            str(interval_ms),
            "--tokens",
            str(tokens),
            "--event-bytes",
            str(event_bytes),
        ]
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.tls_port = 0
        self._certs: tempfile.TemporaryDirectory[str] | None = None
        self.ca_file: Path | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root, ``http://127.0.0.1:PORT/v1``."""
        return self.url()

    @property
    def tls_base_url(self) -> str:
        """The same over HTTPS, ``https://127.0.0.1:TLS_PORT/v1``."""
        return self.url(tls=True)

    def url(self, *, tls: bool = False, **script: float) -> str:
        """An API root whose requests follow `script` (``interval_ms=62.5`` ...) instead of
        the server's own settings, over HTTPS when `tls`."""
        if tls and not self.tls_port:
            raise RuntimeError("this ScriptedServer was started without tls=True")
        unknown = set(script) - set(_SCRIPT_KEYS)
        if unknown:
            raise ValueError(f"unknown script keys {sorted(unknown)}; known: {list(_SCRIPT_KEYS)}")
        scheme, port = ("https", self.tls_port) if tls else ("http", self.port)
        prefix = "".join(f"/{k}={_SCRIPT_KEYS[k](v)}" for k, v in sorted(script.items()))
        return f"{scheme}://127.0.0.1:{port}{prefix}/v1"

    def _write_certs(self) -> list[str]:
        import trustme  # only the TLS leg needs it (dev dependency)

        self._certs = tempfile.TemporaryDirectory(prefix="scripted-tls-")
        folder = Path(self._certs.name)
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = folder / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        cert, key = folder / "server.pem", folder / "server.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        for extra in leaf.cert_chain_pems[1:]:
            extra.write_to_path(str(cert), append=True)
        leaf.private_key_pem.write_to_path(str(key))
        return ["--tls-cert", str(cert), "--tls-key", str(key)]

    def start(self) -> None:
        """Start the process and wait for its port(s)."""
        tls_args = self._write_certs() if self.tls else []
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--port", "0", *self.args, *tls_args],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError(f"scripted server did not start: {line!r}")
        self.port = int(line[1])
        if self.tls:
            line = self.proc.stdout.readline().decode().split()
            if len(line) != 2 or line[0] != "TLS_PORT":
                self.stop()
                raise RuntimeError(f"scripted server did not start TLS: {line!r}")
            self.tls_port = int(line[1])

    def stop(self) -> None:
        """Terminate the process (and remove the certificates)."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None
        if self._certs is not None:
            self._certs.cleanup()
            self._certs = None

    def stamps(self) -> dict[str, Any]:
        """The send stamps collected since the last call (the server forgets them)."""
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            sock.sendall(b"GET /stamps HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(1 << 20):
                data += chunk
        _, _, body = data.partition(b"\r\n\r\n")
        result: dict[str, Any] = json.loads(body)
        return result

    def __enter__(self) -> ScriptedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--event-bytes", type=int, default=0, help="pad each token event to this")
    parser.add_argument("--tls-cert", default=None, help="PEM chain: also serve HTTPS")
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--tls-port", type=int, default=0)
    args = parser.parse_args()
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    raise_open_files_limit(65536)
    server = Server(
        args.host,
        args.port,
        args.ttft_ms,
        args.interval_ms,
        args.tokens,
        event_bytes=args.event_bytes,
        tls=tls,
        tls_port=args.tls_port,
    )
    gc.disable()  # the loop allocates no cycles; no collector pauses in the schedule
    print(f"PORT {server.port}", flush=True)
    if server.tls_port is not None:
        print(f"TLS_PORT {server.tls_port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
