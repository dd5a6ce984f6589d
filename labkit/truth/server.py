"""The truth server: labkit's fake LLM API server, which logs when it truly sent every event.

One thread, one loop, its own process (`TruthServer` starts it; ``labkit fake-server`` runs
it in the foreground), so it shares neither the GIL nor the event loop of the client it
measures. It serves OpenAI Chat Completions, Completions, Responses and Anthropic Messages
(`labkit.truth.shapes`), streaming or not, plus ``GET /v1/models`` and ``/health``, answering
each request as `labkit.truth.reply` does under its `TruthSchedule`. Right before an event's
bytes are handed to ``send`` it reads ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, the clock
of any client on this host), and right after; each finished request becomes one JSON line of
the truth log (`labkit.truth.log`), keyed by the response id (docs/score.md, "The truth log").
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import heapq
import itertools
import json
import os
import selectors
import signal
import socket
import ssl
import time
from pathlib import Path
from typing import IO, Any

from labkit.errors import LabkitError
from labkit.oslimits import raise_open_files_limit
from labkit.truth.batch import batch_seen, flips_on
from labkit.truth.drift import drifted, sim_time
from labkit.truth.model_variant import variant_label
from labkit.truth.reply import Reply, Responder, read_request
from labkit.truth.schedule import TruthSchedule, load_request_schedules
from labkit.truth.shapes import (
    Render,
    Shape,
    Timings,
    error_body,
    json_text,
    server_fields,
    shape_for,
    timing_headers,
)

__all__ = ["Server", "main", "serve"]

_EPOLL_MARGIN_NS = 1_500_000  # wait in epoll only while the next event is further than this
_SLEEP_MIN_NS = 30_000  # below this, spin instead of sleeping
_BACKLOG = 4096
#: Bounds on what a client can make the server hold: a request head (the request line and
#: headers) longer than this, or with more header lines, is answered 431 and closed; a body
#: longer than this (or in more chunks) 413; a request not whole this long after its first
#: byte, 408. Bytes not yet sent to a client that does not read are held up to the last bound,
#: then the connection is dropped.
MAX_HEAD_BYTES = 65_536
MAX_HEADERS = 100
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_BODY_CHUNKS = 65_536
REQUEST_TIMEOUT_S = 30.0
MAX_UNSENT_BYTES = 64 * 1024 * 1024
_KEEPALIVE = b": keep-alive\n\n"
_DEEPSEEK_KEEPALIVE_MS = 100.0  # DeepSeek's comment period during its queue, when unset
#: The context each slot says it holds (`/props`, `/slots`, vLLM's `max_model_len`).
CONTEXT_TOKENS = 32768
#: What `/props` says the server is.
BUILD_INFO = "labkit-truth-server (not llama.cpp)"
#: The template `chat_template` applies, as `/props` shows it.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: Client request-id headers a truth log keeps (the first present).
CLIENT_ID_HEADERS = ("x-request-id", "x-correlation-id", "request-id")

_WAKEUP = object()  # the selector key of the signal wake-up socket
# action kinds in a stream's timetable
_COMMENT, _EVENT, _BODY, _HEADERS, _ADMIT, _FAIL, _END, _HTTP_ERROR = range(8)


def _frame(payload: bytes) -> bytes:
    """One HTTP chunk holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Stream:
    """One response: what it sends, when, and the stamps of each send."""

    __slots__ = (
        "actions",
        "admitted",
        "client_id",
        "comments",
        "conn",
        "drift",
        "event_bytes",
        "failed",
        "i",
        "k",
        "pad",
        "render",
        "reply",
        "reported_headers",
        "sends",
        "sent",
        "t_admit",
        "t_headers",
        "t_read",
        "t_start",
        "traceparent",
        "wait_ns",
    )

    def __init__(
        self,
        conn: _Conn,
        reply: Reply,
        t_read: int,
        client_id: str | None,
        traceparent: str | None,
    ) -> None:
        self.conn = conn
        self.reply = reply
        self.render = Render(reply)
        self.t_read = t_read
        self.t_admit = t_read
        self.t_start = t_read
        self.t_headers: int | None = None
        self.reported_headers: dict[str, str] = {}
        self.client_id = client_id
        self.traceparent = traceparent
        self.admitted = False
        self.wait_ns = 0  # waited for a slot, beyond the schedule's queue
        self.failed = False
        self.i = 0  # output events sent
        self.k = 0  # timetable actions done
        self.actions: list[tuple[int, int]] = []
        self.sends: list[int] = []
        self.sent: list[int] = []
        self.comments: list[int] = []
        #: The simulated time it stood for and the planted changes in effect (None: no
        #: header and no drift, and its truth line says nothing of them).
        self.drift: dict[str, Any] | None = None
        plain = (
            reply.request.api == "chat"
            and not reply.tool_calls
            and reply.request.top_logprobs is None
            and not reply.request.timings_per_token
        )
        self.event_bytes = reply.schedule.event_bytes if plain else 0
        self.pad = b""

    @property
    def stream(self) -> bool:
        return self.reply.request.stream

    def before_service(self, t_admit: int) -> None:
        """The actions from the request's read to its admission (asking for a slot): the
        headers (after the schedule's queue, except in DeepSeek's shape) and keep-alive
        comments during the queue."""
        s = self.reply.schedule
        self.t_admit = t_admit
        if s.fail == "http_status":  # answered by the server, once past the front end
            self.actions, self.k = [(t_admit, _HTTP_ERROR)], 0
            return
        admit = t_admit + int(s.queue_ms * 1e6)
        actions: list[tuple[int, int]] = []
        if self.stream:
            early = s.server_timings == "deepseek"
            headers = t_admit if early else admit
            actions.append((headers, _HEADERS))
            period = s.keepalive_ms or (_DEEPSEEK_KEEPALIVE_MS if early else 0.0)
            if period > 0 and early:
                step = int(period * 1e6)
                actions += [(t, _COMMENT) for t in range(headers + step, admit, step)]
        actions.append((admit, _ADMIT))
        self.actions, self.k = actions, 0

    def timetable(self, t_start: int) -> None:
        """Fix the absolute due time of every send from the start of service."""
        reply = self.reply
        s = reply.schedule
        self.t_start = t_start
        self.k = 0
        planned = reply.plan
        first = t_start + int(planned.first_ms * 1e6)
        events = [first] if planned.event_tokens else []
        for gap in planned.gaps_ms:
            events.append(events[-1] + int(gap * 1e6))
        if events:
            end = events[-1] + int(planned.end_gap_ms * 1e6)
        else:  # nothing streamed: the end at once, or the end token's time
            end = first if planned.end_token else t_start
        fail_at = self._fail_index() if s.fail in ("stream_error", "drop") else None
        if not self.stream:
            self.actions = [(end, _FAIL if fail_at is not None else _BODY)]
            return
        if fail_at is not None:
            tail = events[fail_at] if fail_at < len(events) else end
            actions = [(t, _EVENT) for t in events[:fail_at]] + [(tail, _FAIL)]
        else:
            actions = [(t, _EVENT) for t in events]
            if end != (events[-1] if events else None):
                actions.append((end, _END))  # the end token's decode, or no event at all
        if s.keepalive_ms > 0:
            step = int(s.keepalive_ms * 1e6)
            stop = events[0] if events else end
            actions += [(t, _COMMENT) for t in range(t_start + step, stop, step)]
            actions.sort()
        self.actions = actions

    def _fail_index(self) -> int:
        """The output event a scripted failure replaces (its count: after the last)."""
        sent = 0
        for i, n in enumerate(self.reply.plan.event_tokens):
            if sent >= self.reply.schedule.fail_after_tokens:
                return i
            sent += n
        return len(self.reply.plan.event_tokens)

    def event_frame(self) -> bytes:
        """The next output event, framed (the first after the API's opening events)."""
        if self.i == 0:
            opening = b"".join(_frame(p) for p in self.render.opening())
            return opening + self._event_frame() if opening else self._event_frame()
        return self._event_frame()

    def _event_frame(self) -> bytes:
        payload = self.render.event(self.i)
        if self.event_bytes and not self.pad:
            self.pad = b"x" * max(0, self.event_bytes - len(payload) - 8)
        if not self.pad:
            return _frame(payload)
        pre, post = self.render.text_parts()
        text = json_text(self.reply.texts[self.i])
        size = len(pre) + len(text) + len(self.pad) + len(post)
        return b"".join((b"%x\r\n" % size, pre, text, self.pad, post, b"\r\n"))

    def timings(self, now: int) -> Timings:
        """What the server did, as its own timings report it (`Timings`)."""
        reply = self.reply
        queue = reply.schedule.queue_ms + self.wait_ns / 1e6
        headers = self.t_headers if self.t_headers is not None else now
        thinking = reply.plan.thinking_ms  # hidden reasoning: decoded, not prefilled
        return Timings(
            queue_ms=queue,
            prefill_ms=reply.plan.first_ms - thinking,
            decode_ms=reply.plan.decode_ms + thinking,
            headers_ms=(headers - self.t_admit) / 1e6,
        )


class _Conn:
    __slots__ = (
        "busy",
        "close_after",
        "handshaking",
        "inbuf",
        "outbuf",
        "partial_since",
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
        self.partial_since = 0  # clock when a request still incomplete began (0: none)


class _Listener:
    """A listening socket in the selector; `tls`: wrap what it accepts."""

    __slots__ = ("sock", "tls")

    def __init__(self, sock: socket.socket, tls: ssl.SSLContext | None) -> None:
        self.sock = sock
        self.tls = tls


class _TooLarge(ValueError):
    """A chunked body over `MAX_BODY_BYTES` or `MAX_BODY_CHUNKS`."""


def _unchunk(buf: bytes, at: int) -> tuple[bytes, int] | None:
    """A chunked request body starting at `at`: (the body, where the next request starts),
    or None while it is incomplete; ValueError for a chunk size that is not hex, _TooLarge
    past the bounds."""
    if not buf.startswith(b"0", at) and buf.find(b"\r\n0", at) < 0:
        return None  # no last chunk yet: not worth parsing what came so far
    parts: list[bytes] = []
    size_so_far = 0
    while True:
        eol = buf.find(b"\r\n", at, at + 1024)
        if eol < 0:
            if len(buf) - at > 1024:
                raise ValueError("a chunk size line longer than 1024 bytes")
            return None
        digits = buf[at:eol].split(b";", 1)[0].strip()
        if not digits or len(digits) > 16 or digits.strip(b"0123456789abcdefABCDEF"):
            raise ValueError("a chunk size that is not hex")
        size = int(digits, 16)
        if size == 0:
            trailer = buf.find(b"\r\n\r\n", eol)
            return None if trailer < 0 else (b"".join(parts), trailer + 4)
        size_so_far += size
        if size_so_far > MAX_BODY_BYTES or len(parts) >= MAX_BODY_CHUNKS:
            raise _TooLarge
        if len(buf) < eol + 2 + size + 2:
            return None
        parts.append(buf[eol + 2 : eol + 2 + size])
        at = eol + 2 + size + 2


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.create_server((host, port), backlog=_BACKLOG)
    sock.setblocking(False)
    return sock


def _overrides(path: str) -> dict[str, str]:
    """The ``KEY=VALUE`` segments of a request path (a per-request schedule)."""
    out = {}
    for segment in path.split("?", 1)[0].split("/"):
        key, eq, value = segment.partition("=")
        if eq:
            out[key] = value
    return out


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message}}).encode()


class Server:
    """The single-threaded scheduler loop (see the module docstring).

    `truth_log`: a text file each finished request is written to as one JSON line (its
    first line, the clock anchor, is written here); `keep_stamps`: also keep them for
    ``GET /stamps``, which returns and forgets them per request (the benchmarks'
    interface). `per_request`: schedules used in the order requests arrive, cycling.
    """

    def __init__(
        self,
        host: str,
        port: int,
        schedule: TruthSchedule,
        *,
        tls: ssl.SSLContext | None = None,
        tls_port: int = 0,
        truth_log: IO[str] | None = None,
        keep_stamps: bool = True,
        per_request: list[TruthSchedule] | None = None,
        model: str = "labkit-truth",
        seed: int = 0,
    ):
        self.schedule = schedule
        self.per_request = per_request or []
        self.model = model
        self.responder = Responder(os.urandom(4).hex(), model=model, seed=seed)
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
        self.arrivals = itertools.count()
        self.keep_stamps = keep_stamps
        self.done: dict[str, dict[str, Any]] = {}
        self.stalls = 0
        self.late_ns: list[int] = []  # how late each wake-up was against its due time
        self.active = 0
        self.totals = {"prompt": 0, "predicted": 0}
        self.waiting: collections.deque[_Stream] = collections.deque()
        #: (deadline, seq, connection, its partial_since) of requests begun, not yet whole
        self.partial: list[tuple[int, int, _Conn, int]] = []
        self.log = truth_log
        self.stopping = False
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        if truth_log is not None:
            anchor = {
                "truth_log": 1,
                "clock": "CLOCK_MONOTONIC (time.perf_counter_ns)",
                "mono_ns": time.perf_counter_ns(),
                "wall_ns": time.time_ns(),
                "schedule": schedule.model_dump(),
                "per_request_schedules": len(self.per_request),
                "seed": seed,
            }
            truth_log.write(json.dumps(anchor) + "\n")
            truth_log.flush()

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
            if len(conn.outbuf) + len(data) > MAX_UNSENT_BYTES:
                self._drop(conn)  # a client that does not read
                return
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
            if len(conn.inbuf) > MAX_HEAD_BYTES + MAX_BODY_BYTES:
                self._drop(conn)  # more than a whole request, sent while one is served
                return
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
        if len(conn.inbuf) > MAX_HEAD_BYTES + MAX_BODY_BYTES:
            self._drop(conn)  # more than a whole request, sent while one is served
            return
        self._parse(conn, t)

    # -- requests -------------------------------------------------------------------------------

    def _schedule_for(self, path: str, count: bool = True) -> TruthSchedule:
        """The schedule of a request to `path`: the next per-request one (`count`: a
        request to an API, which takes its turn), with the path's own settings applied."""
        base = self.schedule
        if self.per_request:
            turn = next(self.arrivals) if count else 0
            base = self.per_request[turn % len(self.per_request)]
        return base.with_overrides(_overrides(path))

    def _route(
        self,
        conn: _Conn,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        t_read: int,
    ) -> None:
        shape = shape_for(path) if method == "POST" else None
        endpoint = path.split("?", 1)[0].rsplit("/", 1)[-1]
        if shape is not None:
            self._serve(conn, shape, path, headers, body, t_read)
        elif method == "POST" and endpoint in ("tokenize", "detokenize", "apply-template"):
            self._tokens(conn, endpoint, path, body)
        elif method == "GET" and endpoint in ("props", "slots"):
            self._describe(conn, endpoint, path, headers)
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
        elif method == "GET" and path.split("?", 1)[0].endswith("/models"):
            models = {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "created": 1700000000, "owned_by": "lk"}
                ],
            }
            self._simple(conn, json.dumps(models).encode())
        elif method == "GET" and path.split("?", 1)[0] == "/metrics":
            self._simple(conn, self._metrics(), content_type=b"text/plain; version=0.0.4")
        elif method in ("GET", "HEAD") and path.startswith(("/health", "/v1/health")):
            self._simple(conn, b'{"status":"ok"}')
        else:
            self._simple(conn, _error("not found"), b"404 Not Found")

    def _tokens(self, conn: _Conn, endpoint: str, path: str, body: bytes) -> None:
        """llama-server's ``/tokenize`` (and vLLM's, asked with `prompt`), ``/detokenize``
        and ``/apply-template``, by the server's own tokenizer and template."""
        try:
            obj = json.loads(body or b"{}")
            if not isinstance(obj, dict):
                raise ValueError("the body is not a JSON object")
            schedule = self._schedule_for(path, count=False)
            responder = self.responder
            answer: dict[str, Any]
            if endpoint == "apply-template":
                request = read_request("chat", body)
                answer = {"prompt": request.prompt(schedule.chat_template)}
            elif endpoint == "detokenize":
                ids = [i for i in obj.get("tokens") or () if isinstance(i, int)]
                answer = {"content": responder.detokenize(ids)}
            elif isinstance(obj.get("prompt"), str):  # vLLM's and SGLang's request
                ids = responder.tokenize(obj["prompt"])
                answer = {"tokens": ids, "count": len(ids), "max_model_len": CONTEXT_TOKENS}
                if obj.get("return_token_strs"):
                    answer["token_strs"] = [responder.vocabulary[i] for i in ids]
            else:
                text = obj.get("content")
                ids = responder.tokenize(text if isinstance(text, str) else "")
                if obj.get("with_pieces"):
                    answer = {"tokens": [{"id": i, "piece": responder.vocabulary[i]} for i in ids]}
                else:
                    answer = {"tokens": ids}
        except (ValueError, LabkitError) as exc:
            self._simple(conn, _error(str(exc)), b"400 Bad Request")
            return
        self._simple(conn, json.dumps(answer).encode())

    def _describe(
        self, conn: _Conn, endpoint: str, path: str, headers: dict[str, str] | None = None
    ) -> None:
        """llama-server's ``/props`` (saying it is the truth server, or the schedule's
        build at the request's time) and ``/slots``."""
        try:
            schedule = drifted(self._schedule_for(path, count=False), sim_time(headers or {})[0])[0]
        except LabkitError as exc:
            self._simple(conn, _error(str(exc)), b"400 Bad Request")
            return
        slots = schedule.slots or 1
        if endpoint == "slots":
            states = [
                {"id": i, "n_ctx": CONTEXT_TOKENS, "is_processing": i < self.active}
                for i in range(slots)
            ]
            self._simple(conn, json.dumps(states).encode())
            return
        props = {
            "default_generation_settings": {"n_ctx": CONTEXT_TOKENS, "params": {}},
            "total_slots": slots,
            "model_path": self.model,
            "model_alias": self.model,
            "chat_template": CHAT_TEMPLATE if schedule.chat_template else "",
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "build_info": schedule.server_build or BUILD_INFO,
            "modalities": {"vision": False, "audio": False},
            "endpoint_slots": True,
            "endpoint_props": False,
            "endpoint_metrics": True,
        }
        self._simple(conn, json.dumps(props).encode())

    def _serve(
        self,
        conn: _Conn,
        shape: Shape,
        path: str,
        headers: dict[str, str],
        body: bytes,
        t_read: int,
    ) -> None:
        """Answer one API request: plan its reply and put its first actions on the heap."""
        try:
            schedule = self._schedule_for(path)
        except LabkitError as exc:  # a bad KEY=VALUE segment
            self._simple(conn, _error(str(exc)), b"400 Bad Request")
            return
        t_sim, told = sim_time(headers)
        schedule, effects = drifted(schedule, t_sim)
        try:
            request = read_request(shape.api, body)
        except ValueError as exc:
            self._simple(conn, _error(str(exc)), b"400 Bad Request")
            return
        batch = batch_seen(schedule, self._held()) if flips_on(schedule) else None
        reply = self.responder.reply(schedule, request, batch)
        client_id = next((headers[h] for h in CLIENT_ID_HEADERS if h in headers), None)
        stream = _Stream(conn, reply, t_read, client_id, headers.get("traceparent"))
        if told or schedule.drift is not None:
            stream.drift = {"sim_time": t_sim, "drift": effects}
        conn.busy = True
        stream.before_service(t_read + int(schedule.frontend_ms * 1e6))
        self._push(stream)

    def _held(self) -> int:
        """Requests the server holds now, read and not finished, whose client is still
        there: in the timetable heap (one entry each) or waiting for a slot."""
        streams = [s for _, _, s in self.heap] + list(self.waiting)
        return sum(1 for s in streams if s.conn.sock.fileno() >= 0)

    def _push(self, stream: _Stream) -> None:
        heapq.heappush(self.heap, (stream.actions[stream.k][0], next(self.seq), stream))

    def _headers(self, stream: _Stream, status: bytes, kind: bytes, extra: dict[str, str]) -> bytes:
        reply = stream.reply
        echoed = stream.client_id if stream.client_id is not None else reply.rid
        lines = [
            b"HTTP/1.1 " + status,
            b"content-type: " + kind,
            b"x-request-id: " + echoed.encode("latin-1", "replace"),
        ]
        lines += [f"{k}: {v}".encode() for k, v in extra.items()]
        return b"\r\n".join(lines) + b"\r\n"

    def _send_headers(self, stream: _Stream, now: int) -> None:
        stream.t_headers = now
        reply = stream.reply
        extra = timing_headers(reply, stream.timings(now))
        stream.reported_headers = extra
        head = self._headers(stream, b"200 OK", b"text/event-stream", extra)
        self._send(
            stream.conn,
            head
            + b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(_frame(p) for p in stream.render.head()),
        )

    def _http_error(self, stream: _Stream) -> None:
        """The scripted HTTP error, sent at once (no slot is taken)."""
        s = stream.reply.schedule
        body = error_body(stream.reply)
        extra = {} if s.retry_after_s is None else {"retry-after": f"{s.retry_after_s:g}"}
        status = b"%d Scripted Error" % s.fail_status
        head = self._headers(stream, status, b"application/json", extra)
        now = time.perf_counter_ns()
        stream.t_headers = now
        self._send(stream.conn, head + b"content-length: %d\r\n\r\n" % len(body) + body)
        stream.failed = True
        self._finish(stream, now, status=s.fail_status)

    def _start(self, stream: _Stream, t_start: int) -> None:
        """Begin serving `stream` (its slot granted at `t_start`): its service timetable."""
        self.active += 1
        stream.admitted = True
        due = stream.t_admit + int(stream.reply.schedule.queue_ms * 1e6)
        stream.wait_ns = max(0, t_start - due)
        stream.timetable(t_start)

    def _simple(
        self,
        conn: _Conn,
        body: bytes,
        status: bytes = b"200 OK",
        content_type: bytes = b"application/json",
    ) -> None:
        self._send(
            conn,
            b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type + b"\r\n"
            b"content-length: %d\r\n\r\n" % len(body) + body,
        )
        if conn.close_after:
            self._close_when_flushed(conn)

    def _metrics(self) -> bytes:
        """Prometheus text in llama-server's names: requests served now, waiting for a slot,
        and the totals of prompt and output tokens."""
        lines = []
        for name, kind, help_text, value in (
            ("requests_processing", "gauge", "Number of requests processing", self.active),
            ("requests_deferred", "gauge", "Number of requests deferred", len(self.waiting)),
            (
                "prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed",
                self.totals["prompt"],
            ),
            (
                "tokens_predicted_total",
                "counter",
                "Number of generation tokens processed",
                self.totals["predicted"],
            ),
        ):
            lines += [
                f"# HELP llamacpp:{name} {help_text}",
                f"# TYPE llamacpp:{name} {kind}",
                f"llamacpp:{name} {value}",
            ]
        return ("\n".join(lines) + "\n").encode()

    def _close_when_flushed(self, conn: _Conn) -> None:
        if not conn.outbuf:
            self._drop(conn)

    def _release(self, stream: _Stream) -> None:
        """Free `stream`'s slot and start the next waiting request that is still there."""
        if not stream.admitted:
            return
        stream.admitted = False
        self.active -= 1
        while self.waiting:
            nxt = self.waiting.popleft()
            if nxt.conn.sock.fileno() < 0:
                continue
            self._start(nxt, time.perf_counter_ns())
            self._push(nxt)
            return

    @staticmethod
    def _reported(stream: _Stream, timings: Timings) -> dict[str, Any] | None:
        """The server's own timings as the reply carried them (None: its shape has none)."""
        reply = stream.reply
        if reply.schedule.server_timings == "none" or stream.failed:
            return None
        fields = server_fields(reply, timings)[0] if reply.request.api == "chat" else {}
        return {"headers": stream.reported_headers, "fields": fields}

    def _finish(self, stream: _Stream, t_end: int, status: int | None = 200) -> None:
        conn = stream.conn
        reply = stream.reply
        sent = reply.plan.event_tokens[: stream.i] if stream.stream else reply.plan.event_tokens
        if stream.failed and not stream.stream:
            sent = []
        output = sum(sent)
        s = reply.schedule
        timings = stream.timings(t_end)
        if stream.stream and not stream.failed:
            end = stream.render.end(timings)
            self._send(conn, b"".join(_frame(p) for p in end) + b"0\r\n\r\n")
        entry: dict[str, Any] = {
            "id": reply.rid,
            "client_request_id": stream.client_id,
            "traceparent": stream.traceparent,
            "api": reply.request.api,
            "stream": stream.stream,
            "model": reply.model,
            "status": status,
            "fail": s.fail if stream.failed else None,
            "t_read_ns": stream.t_read,
            "t_admit_ns": stream.t_admit,
            "frontend_ms": s.frontend_ms,
            "t_start_ns": stream.t_start,
            "t_headers_ns": stream.t_headers,
            "events_ns": stream.sends,
            "events_sent_ns": stream.sent,
            "event_tokens": sent if stream.stream else ([output] if output else []),
            "comments_ns": stream.comments,
            "t_end_ns": t_end,
            "prompt_tokens": reply.prompt_tokens,
            "cached_tokens": reply.cached_tokens,
            "output_tokens": output,
            "end_token": reply.plan.end_token and not stream.failed,
            "usage_output_tokens": None if stream.failed else reply.usage_output_tokens,
            "capped": reply.capped,
            "finish_reason": None if stream.failed else reply.finish_reason,
            "tool_calls": [vars(c) for c in reply.tool_calls or reply.text_calls]
            if not stream.failed
            else [],
            "temperature": reply.request.temperature,
            "seed": reply.request.seed,
            "steps": [{"token": step.token, "candidates": step.candidates} for step in reply.steps],
            "batch": reply.batch,
            "flipped_steps": reply.flipped_steps,
            "model_variant": variant_label(s),
            "queue_ms": timings.queue_ms,
            "prefill_ms": reply.plan.first_ms,
            "decode_ms": reply.plan.decode_ms,
            "reasoning_tokens": reply.reasoning_tokens,
            "thinking_ms": reply.plan.thinking_ms if reply.reasoning_tokens else None,
            "reported": self._reported(stream, timings),
        }
        if stream.drift is not None:  # the time it stood for, the planted changes in effect
            entry.update(stream.drift)
        if stream.render.token_times is not None:  # per-token timings were sent
            entry["token_ms"] = stream.render.token_times[: stream.i]
        self.totals["prompt"] += reply.prompt_tokens
        self.totals["predicted"] += output
        if self.keep_stamps:
            self.done[reply.rid] = {
                "t_recv": stream.t_read,
                "sends": stream.sends,
                "sent": stream.sent,
                "tokens": output,
            }
        if self.log is not None:
            self.log.write(json.dumps(entry) + "\n")
        conn.busy = False
        self._release(stream)
        if conn.sock.fileno() < 0:
            return
        if conn.close_after:
            self._close_when_flushed(conn)
        elif conn.inbuf:  # a request that arrived while this stream was served
            self._parse(conn, time.perf_counter_ns())

    def _parse(self, conn: _Conn, t_read: int) -> None:
        """Serve every complete request in the connection's buffer, one stream at a time;
        a request that is not HTTP/1.1 as the server reads it gets a 400 and the close, one
        past the bounds (`MAX_HEAD_BYTES`, `MAX_HEADERS`, `MAX_BODY_BYTES`) a 431 or 413."""
        while not conn.busy:
            buf = conn.inbuf
            end = buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES)
            if end < 0:
                if len(buf) >= MAX_HEAD_BYTES:
                    self._refuse(
                        conn, b"431 Request Header Fields Too Large", "request head too long"
                    )
                else:
                    self._incomplete(conn)
                return
            request_line, *lines = buf[:end].decode("latin-1").split("\r\n")
            if len(lines) > MAX_HEADERS:
                self._refuse(
                    conn,
                    b"431 Request Header Fields Too Large",
                    f"more than {MAX_HEADERS} header lines",
                )
                return
            headers = {}
            for line in lines:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            parts = request_line.split(" ", 2)
            declared = headers.get("content-length", "0") or "0"
            length = int(declared) if declared.isascii() and declared.isdigit() else -1
            if len(parts) != 3 or length < 0:
                self._refuse(conn, b"400 Bad Request", "malformed HTTP request")
                return
            if length > MAX_BODY_BYTES:
                self._refuse(conn, b"413 Content Too Large", f"a body over {MAX_BODY_BYTES} bytes")
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                try:
                    unchunked = _unchunk(buf, end + 4)
                except _TooLarge:
                    self._refuse(
                        conn,
                        b"413 Content Too Large",
                        f"a body over {MAX_BODY_BYTES} bytes or {MAX_BODY_CHUNKS} chunks",
                    )
                    return
                except ValueError:  # a chunk size that is not hex
                    self._refuse(conn, b"400 Bad Request", "malformed HTTP request (a chunk size)")
                    return
                if unchunked is None:
                    self._incomplete(conn)
                    return
                body, rest = unchunked
            else:
                if len(buf) < end + 4 + length:
                    self._incomplete(conn)
                    return
                body, rest = buf[end + 4 : end + 4 + length], end + 4 + length
            conn.inbuf = buf[rest:]
            conn.partial_since = 0
            conn.close_after = headers.get("connection", "").lower() == "close"
            self._route(conn, parts[0], parts[1], headers, body, t_read)

    def _refuse(self, conn: _Conn, status: bytes, message: str) -> None:
        """Answer a request the server will not read with `status` and close."""
        conn.inbuf, conn.close_after, conn.partial_since = b"", True, 0
        self._simple(conn, _error(message), status)

    def _incomplete(self, conn: _Conn) -> None:
        """A request has begun but is not whole: it has `REQUEST_TIMEOUT_S` to be."""
        if conn.partial_since or not conn.inbuf:
            return
        conn.partial_since = time.perf_counter_ns()
        deadline = conn.partial_since + int(REQUEST_TIMEOUT_S * 1e9)
        heapq.heappush(self.partial, (deadline, next(self.seq), conn, conn.partial_since))

    def _expire(self, now: int) -> None:
        """408 and close each connection whose request did not become whole in time."""
        while self.partial and self.partial[0][0] <= now:
            _, _, conn, since = heapq.heappop(self.partial)
            if conn.partial_since != since or conn.sock.fileno() < 0:
                continue  # that request became whole, or the connection is gone
            if conn.busy:
                conn.partial_since = 0  # timed again once its stream is done
            else:
                self._refuse(conn, b"408 Request Timeout", "the request did not arrive in time")

    def _next_wait(self, wait_s: float | None) -> float | None:
        """`wait_s` shortened to the next incomplete request's deadline."""
        if not self.partial:
            return wait_s
        left = max(0.0, (self.partial[0][0] - time.perf_counter_ns()) / 1e9)
        return left if wait_s is None else min(wait_s, left)

    # -- the scheduler --------------------------------------------------------------------------

    def _act(self, stream: _Stream, kind: int, due: int) -> bool:
        """Do one timetable action due at `due`; True when the stream leaves the heap
        (finished, or waiting for a slot)."""
        conn = stream.conn
        if kind == _EVENT:
            self._send(conn, stream.event_frame(), stream.sends, stream.sent)
            stream.i += 1
            if stream.k < len(stream.actions):  # the end (or an end token) is due later
                return False
            self._finish(stream, time.perf_counter_ns())
            return True
        if kind == _END:
            self._finish(stream, time.perf_counter_ns())
            return True
        if kind == _COMMENT:
            self._send(conn, _frame(_KEEPALIVE), stream.comments)
            return False
        if kind == _HEADERS:
            self._send_headers(stream, time.perf_counter_ns())
            return False
        if kind == _ADMIT:
            slots = stream.reply.schedule.slots
            if slots and self.active >= slots:
                self.waiting.append(stream)
                return True
            self._start(stream, due)
            return False
        if kind == _FAIL:
            return self._fail(stream)
        if kind == _HTTP_ERROR:
            self._http_error(stream)
            return True
        return self._body(stream)

    def _body(self, stream: _Stream) -> bool:
        reply = stream.reply
        now = time.perf_counter_ns()
        stream.t_headers = now
        timings = stream.timings(now)
        body = stream.render.body(timings)
        extra = timing_headers(reply, timings)
        stream.reported_headers = extra
        head = self._headers(stream, b"200 OK", b"application/json", extra)
        self._send(
            stream.conn,
            head + b"content-length: %d\r\n\r\n%s" % (len(body), body),
            stream.sends,
            stream.sent,
        )
        self._finish(stream, stream.sends[-1] if stream.sends else time.perf_counter_ns())
        return True

    def _fail(self, stream: _Stream) -> bool:
        """The scripted failure: an error event (or, not streaming, a 500), or the
        connection cut."""
        conn = stream.conn
        stream.failed = True
        now = time.perf_counter_ns()
        if stream.reply.schedule.fail == "drop":
            self._drop(conn)
            self._finish(stream, now, status=200 if stream.stream else None)
            return True
        if stream.stream:
            frames = stream.render.error()
            self._send(conn, b"".join(_frame(p) for p in frames) + b"0\r\n\r\n")
            self._finish(stream, now)
            return True
        body = error_body(stream.reply)
        head = self._headers(stream, b"500 Internal Server Error", b"application/json", {})
        self._send(conn, head + b"content-length: %d\r\n\r\n" % len(body) + body)
        self._finish(stream, now, status=500)
        return True

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
            if stream.conn.sock.fileno() < 0:  # the client went away
                heapq.heappop(heap)
                self._release(stream)
                continue
            _, kind = stream.actions[stream.k]
            stream.k += 1
            if self._act(stream, kind, due) or stream.k >= len(stream.actions):
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (stream.actions[stream.k][0], next(self.seq), stream))

    def stop_soon(self) -> None:
        """Ask the loop to return once its current step is done (from a signal handler:
        what it was sending, and the truth log line of it, are finished first)."""
        self.stopping = True

    def wake_on_signals(self) -> None:
        """Let a signal interrupt an idle wait: the loop then sees `stopping`."""
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno())
        self._wakeup = (reader, writer)
        self.sel.register(reader, selectors.EVENT_READ, _WAKEUP)

    def _handle(self, events: list[tuple[selectors.SelectorKey, int]]) -> None:
        for key, mask in events:
            conn = key.data
            if conn is _WAKEUP:
                with contextlib.suppress(OSError):
                    key.fileobj.recv(4096)  # type: ignore[union-attr]
                continue
            if isinstance(conn, _Listener):
                self._accept(conn)
                continue
            if mask & selectors.EVENT_WRITE and conn.outbuf:
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn.sock.fileno() >= 0:
                self._read(conn)

    def serve_forever(self) -> None:
        """Run the scheduler loop until `stop_soon` (or killed)."""
        clock = time.perf_counter_ns
        select = self.sel.select
        while not self.stopping:
            self._send_due()
            if self.partial:
                self._expire(clock())
            if not self.heap:
                if self.log is not None:
                    self.log.flush()  # idle: the log is readable while the server runs
                self._handle(select(self._next_wait(None)))
                continue
            wait = self.heap[0][0] - clock()
            if wait > _EPOLL_MARGIN_NS:
                self._handle(select(self._next_wait((wait - _EPOLL_MARGIN_NS) / 1e9)))
            else:
                self._handle(select(0))
                wait = self.heap[0][0] - clock() if self.heap else 0
                if wait > _SLEEP_MIN_NS:
                    time.sleep((wait - _SLEEP_MIN_NS) / 1e9)
                # then spin (at most _SLEEP_MIN_NS plus the sleep's slack) to the due time


def _open_log(path: Path) -> IO[str]:
    """The truth log, opened for writing as a new or emptied file, never through a link
    planted at `path` (LabkitError, one line, if there is one)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if path.is_symlink():
            raise LabkitError(
                f"the truth log {path} is a symbolic link; labkit writes no file through a "
                "link (remove it, or name another file)"
            ) from None
        raise LabkitError(f"cannot write the truth log {path}: {exc.strerror or exc}") from None
    return os.fdopen(fd, "w", encoding="utf-8")


def serve(
    schedule: TruthSchedule,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    truth_log: Path | None = None,
    schedule_file: Path | None = None,
    seed: int = 0,
    model: str = "labkit-truth",
    tls: ssl.SSLContext | None = None,
    tls_port: int = 0,
    keep_stamps: bool = False,
    on_ready: Any = None,
) -> None:
    """Run a `Server` in this process until SIGTERM or Ctrl-C; `on_ready(server)` is called
    once it listens. The truth log is flushed and closed on the way out."""
    per_request = load_request_schedules(schedule_file, schedule) if schedule_file else None
    raise_open_files_limit(65536)
    log = _open_log(truth_log) if truth_log is not None else None
    try:
        server = Server(
            host,
            port,
            schedule,
            tls=tls,
            tls_port=tls_port,
            truth_log=log,
            keep_stamps=keep_stamps or log is None,
            per_request=per_request,
            model=model,
            seed=seed,
        )
        if on_ready is not None:
            on_ready(server)

        server.wake_on_signals()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: server.stop_soon())
        gc.disable()  # the loop allocates no cycles; no collector pauses in the schedule
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    finally:
        gc.enable()
        if log is not None:
            log.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    for name in TruthSchedule.model_fields:  # values as text: the schedule reads them
        parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    parser.add_argument("--truth", type=Path, default=None, help="write the truth log here")
    parser.add_argument("--schedule-file", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stamps", action="store_true", help="also answer GET /stamps")
    parser.add_argument("--model", default="labkit-truth")
    parser.add_argument("--tls-cert", default=None, help="PEM chain: also serve HTTPS")
    parser.add_argument("--tls-key", default=None)
    parser.add_argument("--tls-port", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> None:
    """``python -m labkit.truth.server``: prints ``PORT <n>`` (and ``TLS_PORT <n>``) first."""
    args = _parser().parse_args(argv)
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    settings = {k: getattr(args, k) for k in TruthSchedule.model_fields}
    schedule = TruthSchedule().with_overrides({k: v for k, v in settings.items() if v is not None})

    def ready(server: Server) -> None:
        print(f"PORT {server.port}", flush=True)
        if server.tls_port is not None:
            print(f"TLS_PORT {server.tls_port}", flush=True)

    serve(
        schedule,
        host=args.host,
        port=args.port,
        truth_log=args.truth,
        schedule_file=args.schedule_file,
        seed=args.seed,
        model=args.model,
        tls=tls,
        tls_port=args.tls_port,
        keep_stamps=args.stamps,
        on_ready=ready,
    )


if __name__ == "__main__":
    main()
