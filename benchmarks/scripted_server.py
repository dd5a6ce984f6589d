"""A scripted OpenAI-compatible SSE server that stamps every event with its true send time.

Used by `bench_load.py` as the ground truth for labkit's measurement error. It runs in its
OWN process (`ScriptedServer` starts it with `subprocess`), so it shares neither the GIL
nor the event loop of the client being measured.

The script, per request (``POST .../chat/completions``):

- status line, headers and a role-only chunk as soon as the request is fully received
  (``t_recv``, the clock read right after the `recv` that completed the body);
- output token ``i`` (``i = 0 .. n-1``) due at ``t_recv + ttft_ms + i * interval_ms``, on
  ABSOLUTE times, so a late wake-up never shifts the later tokens; ``n = tokens`` capped by
  the request's ``max_tokens`` / ``max_completion_tokens``;
- right after the last token: a finish chunk, a usage chunk (``usage.prompt_tokens`` /
  ``completion_tokens``), ``data: [DONE]`` and the end of the chunked body.

Scheduling: one thread, one loop. It waits in `epoll` only while the next due event is more
than ~1.5 ms away (epoll's timeout has 1 ms granularity and rounds up), and sleeps the last
stretch with `time.sleep` (clock_nanosleep, ~50-100 µs slack); each wake-up sends every event
that is due, for every stream. ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, the same clock as
the client's `perf_counter_ns` on this host) is read immediately before each event's bytes
are handed to `send`, and kept per response id (the chunk ``"id"``, unique per stream).
Sockets are non-blocking with TCP_NODELAY; a send the kernel could not take whole is
buffered and counted as a stall (its stamp is then "queued", not "written").

Other endpoints: ``GET /stamps`` returns and clears the stamps as JSON::

    {"streams": {"<id>": {"t_recv": ns, "sends": [ns, ...], "tokens": n}},
     "stalls": n, "late_wakeups_ms": {"p50": ..., "p99": ..., "max": ...}}

``GET /health`` answers ``ok``. HTTP/1.1 keep-alive, chunked transfer encoding;
``connection: close`` is honoured.

Run alone: ``.venv/bin/python benchmarks/scripted_server.py [--port 0] [--ttft-ms 50]
[--interval-ms 2] [--tokens 100]``; it prints ``PORT <n>`` on its first line.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import heapq
import itertools
import json
import os
import selectors
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["ScriptedServer", "Server", "main"]

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


def _frame(payload: bytes) -> bytes:
    """One HTTP chunk holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Stream:
    __slots__ = ("conn", "head", "i", "n", "prompt_tokens", "rid", "sends", "t_recv", "tail")

    def __init__(self, conn: _Conn, rid: str, n: int, prompt_tokens: int, t_recv: int) -> None:
        self.conn = conn
        self.rid = rid
        self.n = n
        self.i = 0
        self.prompt_tokens = prompt_tokens
        self.t_recv = t_recv
        self.sends: list[int] = []
        base = (
            b'data: {"id":"' + rid.encode() + b'","object":"chat.completion.chunk",'
            b'"created":1700000000,"model":"scripted","system_fingerprint":null,'
            b'"choices":[{"index":0,"delta":{"content":"'
        )
        self.head = base
        self.tail = b'"},"logprobs":null,"finish_reason":null}]}\n\n'

    def token_frame(self) -> bytes:
        return _frame(self.head + _WORDS[self.i % len(_WORDS)] + self.tail)

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
    __slots__ = ("busy", "close_after", "inbuf", "outbuf", "sock", "want_write")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = b""
        self.outbuf = b""
        self.busy = False  # a stream is being served on this connection
        self.close_after = False
        self.want_write = False


class Server:
    """The single-threaded scheduler loop (see the module docstring)."""

    def __init__(self, host: str, port: int, ttft_ms: float, interval_ms: float, tokens: int):
        self.ttft_ns = int(ttft_ms * 1e6)
        self.interval_ns = int(interval_ms * 1e6)
        self.tokens = tokens
        self.listener = socket.create_server((host, port), backlog=1024)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.heap: list[tuple[int, int, _Stream]] = []
        self.seq = itertools.count()
        self.ids = itertools.count()
        self.prefix = os.urandom(4).hex()
        self.done: dict[str, dict[str, Any]] = {}
        self.stalls = 0
        self.late_ns: list[int] = []  # how late each wake-up was against its due time

    # -- I/O ----------------------------------------------------------------------------------

    def _send(self, conn: _Conn, data: bytes) -> None:
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
            if not conn.want_write:
                conn.want_write = True
                self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

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
            conn.want_write = False
            self.sel.modify(conn.sock, selectors.EVENT_READ, conn)
            if conn.close_after and not conn.busy:
                self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()
        conn.busy = False

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sel.register(sock, selectors.EVENT_READ, _Conn(sock))

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(262144)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        t = time.perf_counter_ns()
        if not data:
            self._drop(conn)
            return
        conn.inbuf += data
        self._parse(conn, t)

    def _route(self, conn: _Conn, method: str, path: str, body: bytes, t_recv: int) -> None:
        if method == "POST" and path.endswith("/chat/completions"):
            payload = json.loads(body or b"{}")
            n = self.tokens
            cap = payload.get("max_tokens") or payload.get("max_completion_tokens")
            if cap:
                n = min(n, int(cap))
            prompt = " ".join(str(m.get("content", "")) for m in payload.get("messages", []))
            rid = f"chatcmpl-{self.prefix}-{next(self.ids)}"
            stream = _Stream(conn, rid, n, len(prompt.split()), t_recv)
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
                heapq.heappush(self.heap, (t_recv + self.ttft_ns, next(self.seq), stream))
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
        self.done[stream.rid] = {"t_recv": stream.t_recv, "sends": stream.sends, "tokens": stream.n}
        conn.busy = False
        if conn.close_after:
            self._close_when_flushed(conn)
        elif conn.inbuf:  # a request that arrived while this stream was served
            self._parse(conn, time.perf_counter_ns())

    def _parse(self, conn: _Conn, t_recv: int) -> None:
        """Serve every complete request in the connection's buffer, one stream at a time."""
        while not conn.busy:
            buf = conn.inbuf
            end = buf.find(b"\r\n\r\n")
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
        interval = self.interval_ns
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
            frame = stream.token_frame()
            stream.sends.append(clock())
            self._send(conn, frame)
            stream.i += 1
            if stream.i < stream.n:
                heapq.heapreplace(heap, (due + interval, next(self.seq), stream))
            else:
                heapq.heappop(heap)
                self._finish(stream)

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in events:
            conn = key.data
            if conn is None:
                self._accept()
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
    """The server in its own process: ``with ScriptedServer(...) as srv: srv.base_url``."""

    def __init__(
        self, *, ttft_ms: float = 50.0, interval_ms: float = 2.0, tokens: int = 100
    ) -> None:
        self.args = [
            "--ttft-ms",
            str(ttft_ms),
            "--interval-ms",
            str(interval_ms),
            "--tokens",
            str(tokens),
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root, ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        """Start the process and wait for its port."""
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--port", "0", *self.args],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError(f"scripted server did not start: {line!r}")
        self.port = int(line[1])

    def stop(self) -> None:
        """Terminate the process."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

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
    args = parser.parse_args()
    server = Server(args.host, args.port, args.ttft_ms, args.interval_ms, args.tokens)
    gc.disable()  # the loop allocates no cycles; no collector pauses in the schedule
    print(f"PORT {server.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
