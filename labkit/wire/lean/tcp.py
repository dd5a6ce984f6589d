"""One TCP connection of the lean transport, read by a loop reader callback.

The callback (`loop.add_reader`; the read and its stamp in C where
`labkit.wire.readpath` has it) only stamps each read and queues it, or hands it to
the sink `push` was given; the reading task frames and decrypts off the callback, so a busy
loop delays the framing, never the stamp. While a pushed stream gave it a `CommonPush` (C),
the callback is that: the read and all of a common read's work in one call. Kernel stamps
where the platform has them (`stamps`), else the callback's clock.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from labkit.wire.lean.stamps import (
    ANC_SIZE,
    KERNEL_STAMPS,
    STAMP,
    STAMP_TYPE,
    STAMP_UNIT,
    ask_send_stamps,
    drain_send_stamps,
    send_stamp,
)
from labkit.wire.readpath import READER, RECV_STAMPED, CommonPush

__all__ = ["READ_SIZE", "Connection", "Origin", "Read", "Trace"]


Trace = Callable[[str, dict[str, Any]], Awaitable[None]]


#: What `Connection.push` hands each read to, in the reader callback: (bytes, t_ns, seen_ns,
#: kernel_stamped); it returns True when it wants no more.
Sink = Callable[[bytes, int, int, bool], bool]


#: What `Connection.push` offers each read first where it was given one: (bytes, t_ns,
#: seen_ns, kernel_stamped, True); True or False: taken (True: no more is wanted), None: not
#: taken, the read then goes to the sink (`http11.Body.deliver`'s chunked reads as they came).
FramedSink = Callable[[bytes, int, int, bool, bool], bool | None]


#: One read: (bytes, arrival stamp t_ns, seen_ns, kernel_stamped).
Read = tuple[bytes, int, int, bool]


#: A pool key: (scheme, host, port).
Origin = tuple[str, str, int]


READ_SIZE = 64 * 1024


class Connection:
    """One connection's socket, read by a loop reader callback that only stamps and queues.

    The connection to one origin, reused while the server keeps it open. `read` gives the
    reads in order; `buffer` holds bytes read past the last response.
    """

    def __init__(self, key: Origin, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self.sock = sock
        self.inbox: deque[Read] = deque()
        self.closed = False  # no more bytes will arrive (peer closed, error, or closed here)
        self.buffer = bytearray()
        self.buffer_stamp: tuple[int, int, bool] = (0, 0, False)
        self.preconnected = False  # opened by preconnect and not yet used by a request
        self.t_tcp_ns = 0  # when the TCP connect completed
        self.t_tls_ns: int | None = None  # when the TLS handshake completed
        self.loop = loop
        self._fd = sock.fileno()
        self._waiter: asyncio.Future[None] | None = None
        self._unsent = bytearray()
        #: When the last byte of the latest `write` was handed to the kernel; 0 while some
        #: of it waits for the socket to take it.
        self.t_sent_ns = 0
        self._send_stamped = False  # the kernel stamps each send's last byte (`stamps`)
        self._bytes_written = 0  # bytes the socket took since it was asked to stamp sends
        self._last_t = 0
        self._deadline_ns = 0  # perf_counter_ns() by which the read being awaited must come
        self._timer: asyncio.TimerHandle | None = None
        self._ancillary_size = 0  # room for the timestamp cmsg, once the kernel sends one
        self._sink: Sink | None = None  # while `push` runs: the reads go there, not queued
        self._sink_timeout_ns: int | None = None
        self._sink_error: Exception | None = None
        #: While `push` runs, what each read is offered first (None: straight to the sink);
        #: the sink may set or clear it between reads.
        self.framed_sink: FramedSink | None = None
        #: The stamps of the latest read `framed_sink` took; None once the sink takes one.
        self.framed_stamp: tuple[int, int, bool] | None = None
        #: Whether `framed_sink` ended the push (it took a read and wanted no more).
        self.framed_stopped = False
        #: While `push` runs with one: what the reader callback calls, which reads the socket
        #: and takes each common read in one call (`readpath.CommonPush`), handing any other
        #: read to `_on_common`.
        self._common: CommonPush | None = None
        if KERNEL_STAMPS is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, KERNEL_STAMPS[0], 1)
                self._ancillary_size = ANC_SIZE
            except OSError:
                pass
            else:
                self._send_stamped = ask_send_stamps(sock)
        # One reader callback for the connection's life: in C (`readpath.READER`) it is a
        # pushed stream's `CommonPush` while one is set, else `_on_readable`.
        self._reader = READER(self._on_readable) if READER is not None else None
        loop.add_reader(self._fd, self._reader or self._on_readable)

    def _on_readable(self) -> None:
        if RECV_STAMPED is not None:
            try:
                got = RECV_STAMPED(
                    self._fd, READ_SIZE, self._ancillary_size, STAMP_TYPE, STAMP_UNIT, self._last_t
                )
            except OSError:
                self.close()
                return
            if got is None:
                return
            data, t, seen, kernel = got
            if not data:
                self.close()
                return
        else:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(READ_SIZE, self._ancillary_size)
            except (BlockingIOError, InterruptedError):
                if self._send_stamped:  # woken by a send stamp that came late (`_sent`)
                    drain_send_stamps(self.sock)
                return
            except OSError:
                self.close()
                return
            seen = time.perf_counter_ns()
            if not data:
                self.close()
                return
            t = seen
            kernel = False
            if ancillary:
                _, kind, cdata = ancillary[0]
                if kind == STAMP_TYPE and len(cdata) >= STAMP.size:
                    # The clocks' offset from two reads back to back: read apart (the wall
                    # clock here, `seen` above), a preemption between them would put the
                    # stamp early by its length.
                    offset = time.time_ns() - time.perf_counter_ns()
                    sec, frac = STAMP.unpack_from(cdata)
                    t = sec * 1_000_000_000 + frac * STAMP_UNIT - offset
                    if t > seen:
                        t = seen
                    elif t < self._last_t:
                        t = self._last_t
                    kernel = True
        self._last_t = t
        if self._sink is None:
            self.inbox.append((data, t, seen, kernel))
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            return
        self._push_read(data, t, seen, kernel)

    def _on_common(self, got: bool | tuple[bytes, int, int, bool] | BaseException) -> None:
        """What the push's `CommonPush` (the reader callback while it is attached) did not
        take itself: True (a common read that ended the stream), a read for the sink, or
        the exception a read or a take raised."""
        if got is True:
            self.framed_stopped = True
            self._stop_push()
        elif isinstance(got, OSError):
            self.close()
        elif isinstance(got, Exception):
            self._sink_error = got
            self._stop_push()
        elif isinstance(got, BaseException):
            raise got  # KeyboardInterrupt, SystemExit: the loop's, as from `_on_readable`
        elif isinstance(got, tuple):
            data = got[0]
            if not data:
                self.close()
            else:
                self._push_read(data, got[1], got[2], got[3])

    def _push_read(self, data: bytes, t: int, seen: int, kernel: bool) -> None:
        """One read during `push`: offered to the framed sink, else the sink."""
        sink = self._sink
        if sink is None:  # the push ended in this loop iteration: the next reader's read
            self.inbox.append((data, t, seen, kernel))
            return
        if self._sink_timeout_ns is not None:
            self._deadline_ns = seen + self._sink_timeout_ns
        framed = self.framed_sink
        try:
            if framed is None:
                done = sink(data, t, seen, kernel)
            else:
                # One call for a read its reader takes as it came (no sink frame between).
                taken = framed(data, t, seen, kernel, True)
                if taken is None:
                    done = sink(data, t, seen, kernel)
                else:
                    self.framed_stamp = (t, seen, kernel)
                    if taken:
                        self.framed_stopped = True
                    done = taken
        except Exception as exc:  # the pushing task raises it, as a pulled read would
            self._sink = None
            self._sink_error = exc  # even when the sink closed the connection (and woke it)
            done = True
        if done:
            self._stop_push()

    def _stop_push(self) -> None:
        """End the push in progress: no read goes to its sink, the pushing task wakes."""
        self._sink = None
        self._detach_common()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _detach_common(self) -> None:
        """Take back the socket's reads from the push's `CommonPush`, with its stamps: the
        latest read's where it took that read (`framed_stamp`, as a framed sink's)."""
        common = self._common
        if common is None:
            return
        self._common = None
        if self._reader is not None:
            self._reader.common = None
        common.detach()
        self._last_t = common.last_t
        if common.took_latest:
            self.framed_stamp = (common.t, common.seen, bool(common.kernel))

    async def read_raw(self, timeout: float | None) -> Read | None:
        """The next read off the socket and its stamps; None once the peer has closed."""
        while not self.inbox:
            if self.closed:
                return None
            loop = self.loop
            waiter = self._waiter = loop.create_future()
            if timeout is not None:
                # One lazy timer per connection, not one per wait: a wait only moves the
                # deadline, and the timer, when it fires early, re-arms for the latest one.
                # A timer made and cancelled on every read cost about 8% of a read's CPU.
                self._deadline_ns = time.perf_counter_ns() + int(timeout * 1e9)
                if self._timer is None:
                    self._timer = loop.call_later(timeout, self._check_deadline)
            try:
                await waiter
            finally:
                self._waiter = None
        return self.inbox.popleft()

    async def push(
        self,
        sink: Sink,
        timeout: float | None,
        framed: FramedSink | None = None,
        common: CommonPush | None = None,
    ) -> None:
        """Hand each further read to `sink` in the reader callback itself, stamped as
        `read` would give it, until `sink` returns True or the peer closes; raises what
        `sink` raised, and TimeoutError when no read came within `timeout`. `framed`, where
        given, is offered each read first (`framed_sink`, which `sink` may change between
        reads; `FramedSink`): a read it takes does not go to `sink`, its stamps are kept in
        `framed_stamp`. `common`, where given, reads the socket instead while `framed`
        would be offered the read, and takes each common read itself (`CommonPush`); any
        other read goes on as above.

        The same reads, in the same order and with the same stamps as `read`, without a
        task wake-up per read (a future, a callback and the awaiting task's resumption cost
        more than the read). Reads already queued are the caller's to take first.
        """
        assert not self.inbox, "queued reads go first"
        loop = self.loop
        self._sink = sink
        self._sink_timeout_ns = None if timeout is None else int(timeout * 1e9)
        self.framed_sink = framed
        self.framed_stamp = None
        self.framed_stopped = False
        if common is not None and self._reader is not None and RECV_STAMPED is not None:
            common.attach(
                self._fd,
                self._ancillary_size,
                STAMP_TYPE,
                STAMP_UNIT,
                self._last_t,
                -1 if self._sink_timeout_ns is None else self._sink_timeout_ns,
                self,
                self._on_common,
            )
            # It is the reader callback for the push: no Python frame for a common read.
            self._reader.common = common
            self._common = common
        try:
            while self._sink is not None and not self.closed:
                waiter = self._waiter = loop.create_future()
                if timeout is not None:
                    self._deadline_ns = time.perf_counter_ns() + int(timeout * 1e9)
                    if self._timer is None:
                        self._timer = loop.call_later(timeout, self._check_deadline)
                try:
                    await waiter
                finally:
                    self._waiter = None
        finally:
            self._sink = None
            self._detach_common()
            self.framed_sink = None
            self._sink_timeout_ns = None
            error, self._sink_error = self._sink_error, None
        if error is not None:
            raise error

    def _check_deadline(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self.closed:
            return  # no wait in progress: the next one arms a timer of its own
        deadline_ns = self._deadline_ns
        common = self._common
        if common is not None and common.deadline_ns > deadline_ns:
            deadline_ns = common.deadline_ns  # its latest read's
        left_ns = deadline_ns - time.perf_counter_ns()
        if left_ns <= 0:
            waiter.set_exception(TimeoutError())
        else:
            self._timer = self.loop.call_later(left_ns / 1e9, self._check_deadline)

    read = read_raw

    def write(self, data: bytes) -> None:
        """Send `data`; what the socket does not take now goes when it is writable
        (`t_sent_ns`: when its last byte was handed to the kernel, `_sent`).

        A failed write closes the connection: the reader then sees the close.
        """
        self.t_sent_ns = 0
        if self.closed:
            return
        if self._unsent:
            self._unsent += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()
            return
        self._bytes_written += sent
        if sent < len(data):
            self._unsent += data[sent:]
            self.loop.add_writer(self._fd, self._on_writable)
        else:
            self.t_sent_ns = self._sent()

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self._unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        self._bytes_written += sent
        del self._unsent[:sent]
        if not self._unsent:
            self.t_sent_ns = self._sent()
            self.loop.remove_writer(self._fd)

    def _sent(self) -> int:
        """When the last byte written so far was handed to the kernel, read just after the
        `send` that took it returned: that call's return, or the kernel's transmit stamp of
        the byte where the socket has one and it came first. The return is late by any time
        the thread was off its CPU inside the call (on loopback the write wakes the server,
        which can run first on the writer's CPU); the stamp, taken inside it when the byte
        went out, is not, and comes after the hand-over (docs/measurement.md)."""
        returned = time.perf_counter_ns()
        if self._send_stamped:
            stamp = send_stamp(self.sock, self._bytes_written - 1)
            if stamp is not None and stamp < returned:
                return stamp
        return returned

    @property
    def kernel_stamping(self) -> bool:
        """Whether this socket asked the kernel for receive stamps (`stamps`)."""
        return self._ancillary_size > 0

    @property
    def usable(self) -> bool:
        """Whether a new request can go on this connection (open, nothing unread)."""
        return not self.closed and not self.buffer and not self.inbox

    def close(self) -> None:
        """Close the socket and wake its reader."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._fd >= 0:
            self.loop.remove_reader(self._fd)
            if self._unsent:
                self.loop.remove_writer(self._fd)
                self._unsent.clear()
            self.sock.close()
            self._fd = -1
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
