"""A TCP relay on 127.0.0.1 that delays each direction's bytes: a network route labkit
controls, for a vantage point on a machine whose kernel has no netem qdisc.

Every chunk read from one side is written to the other no earlier than its read plus the
one-way delay (`delay_ms / 2`, each way) plus a seeded uniform jitter in ±`jitter_ms / 2`,
and never before the chunk read before it (bytes keep their order): a request's TTFT grows
by the round trip `delay_ms` (the request's bytes one way, the first event's the other), in
the mean. The relay runs its own event loop in a thread of its own, so its timers never
delay the stamps of the loop that measures, and keeps its own account of what it did
(`log`, on labkit's clock), so `added_ms` says what it truly added to one request's TTFT.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import deque
from dataclasses import dataclass

__all__ = ["DelayRelay", "RelayRoute"]

_CHUNK = 65536
#: Chunks the relay's account keeps (the oldest dropped first).
_LOG_CHUNKS = 100_000
#: The part of a delay slept in the thread rather than on the event loop's timer (seconds).
_COARSE_S = 0.0015


@dataclass(frozen=True, slots=True)
class RelayRoute:
    """What a relay adds: the round trip `delay_ms`, split evenly between the directions,
    and each chunk's jitter, uniform in ±`jitter_ms / 2` per direction (seeded)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    seed: int = 0


class DelayRelay:
    """A relay from 127.0.0.1:`port` to `upstream` (host, port), adding `route`'s delay.

    `start()` binds and returns the port; `close()` stops it and every connection. One relay
    serves any number of connections, each with both directions delayed independently.
    """

    def __init__(self, upstream: tuple[str, int], route: RelayRoute) -> None:
        self.upstream = upstream
        self.route = route
        self._rng = random.Random(route.seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port: int | None = None
        #: Connections accepted so far.
        self.connections = 0
        #: Each chunk relayed: (upstream?, read ns, written ns: as handed to the socket's
        #: write), `time.perf_counter_ns`.
        self.log: deque[tuple[bool, int, int]] = deque(maxlen=_LOG_CHUNKS)

    def start(self) -> int:
        """Bind 127.0.0.1 on a free port, serve in a thread of its own, return the port."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._handle, "127.0.0.1", 0)
                )
                self.port = int(self._server.sockets[0].getsockname()[1])
            except OSError as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name="labkit-relay", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        assert self.port is not None
        return self.port

    def close(self) -> None:
        """Stop serving and close every connection (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), loop)
        thread.join(timeout=5)
        self._loop = self._thread = None

    def added_ms(self, t_start_ns: int, t_first_ns: int) -> tuple[float, float] | None:
        """What the relay truly held one request, by its own account: (the first chunk
        read upstream at or after `t_start_ns`, the last chunk written downstream by
        `t_first_ns`: the one that brought the first event), in ms; None: no such chunks
        (a request that never went through this relay)."""
        chunks = list(self.log)
        up = next((w - r for u, r, w in chunks if u and r >= t_start_ns), None)
        down = [w - r for u, r, w in chunks if not u and r >= t_start_ns and w <= t_first_ns]
        if up is None or not down:
            return None
        return up / 1e6, down[-1] / 1e6

    def _one_way_s(self) -> float:
        """One direction's delay for the next chunk, in seconds (never below 0)."""
        half = self.route.delay_ms / 2
        jitter = self.route.jitter_ms / 2
        ms = half + (self._rng.uniform(-jitter, jitter) if jitter else 0.0)
        return max(ms, 0.0) / 1000.0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, True), self._pump(up_reader, writer, False)
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool
    ) -> None:
        """Copy `src` to `dst`, each chunk held until its due time, in order."""
        queue: asyncio.Queue[tuple[float, int, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, t_read, data = await queue.get()
                wait = due - time.perf_counter()
                if wait > _COARSE_S:
                    # the loop's timers wake up to a millisecond late (epoll's timeout is
                    # in whole ms): sleep on the loop to just before the due time ...
                    await asyncio.sleep(wait - _COARSE_S)
                rest = due - time.perf_counter()
                if rest > 0:
                    time.sleep(rest)  # ... and the rest in the thread, to within ~0.1 ms
                if not data:
                    if dst.can_write_eof():
                        dst.write_eof()
                    return
                # Stamped as the chunk is handed over: a stamp after the write could trail it
                # by the wait for the GIL back from the send (labkit's thread holding it).
                t_written = time.perf_counter_ns()
                dst.write(data)
                self.log.append((upstream, t_read, t_written))
                await dst.drain()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        try:
            while True:
                data = await src.read(_CHUNK)
                t_read = time.perf_counter_ns()
                last_due = max(last_due, t_read / 1e9 + self._one_way_s())
                queue.put_nowait((last_due, t_read, data))
                if not data:
                    break
            await sender
        except (OSError, asyncio.CancelledError):
            sender.cancel()
            raise
