"""Kernel transmit stamps of a request's last byte (`stamps.ask_send_stamps`, `send_stamp`;
`tcp.Connection`'s `t_sent_ns`), over real loopback sockets.

A send's return can come late: the write wakes the server on loopback, which may run on the
writer's CPU before the writer returns. The kernel's software transmit stamp of the send's
last byte is taken inside the call when that byte leaves; each stamp is keyed by its byte's
place in the connection, so a stamp is never taken for another write's. A stamp that comes
after its write looked for it sits on the socket's error queue, which reads as an error to
the loop: the reader must take it off or be woken again every loop iteration.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from labkit.wire import readpath
from labkit.wire.lean import stamps, tcp
from labkit.wire.lean.stamps import ask_send_stamps, loopback_pair, send_stamp

pytestmark = pytest.mark.integration

#: The stamp is CLOCK_REALTIME put on labkit's clock by an offset read just after it: a
#: preemption between those clock reads may shift it this much at worst here.
CONVERSION_SLACK_NS = 1_000_000


def _error_queue_empty(sock: socket.socket) -> bool:
    try:
        sock.recvmsg(0, 512, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    return False


@pytest.fixture
def stamped_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    if stamps.KERNEL_STAMPS is None:
        pytest.skip("no kernel stamps on this platform")
    with loopback_pair(timeout=5) as (sender, receiver):
        if not ask_send_stamps(sender):
            pytest.skip("this kernel does not key its transmit stamps (OPT_ID_TCP, RX_FILTER)")
        sender.setblocking(False)  # as the loop's sockets are: Python polls one with a timeout
        yield sender, receiver


def test_a_send_is_stamped_inside_its_call_and_each_stamp_is_its_own_bytes(
    stamped_pair: tuple[socket.socket, socket.socket],
) -> None:
    sender, receiver = stamped_pair
    before = time.perf_counter_ns()
    sender.sendall(b"a" * 100)
    returned = time.perf_counter_ns()
    stamp = send_stamp(sender, 99)
    assert stamp is not None
    assert before - CONVERSION_SLACK_NS <= stamp <= returned + CONVERSION_SLACK_NS
    assert _error_queue_empty(sender)

    # two writes, the second's stamp asked for: the first's is taken off and passed over
    sender.sendall(b"b" * 100)
    between = time.perf_counter_ns()
    sender.sendall(b"c" * 50)
    second = send_stamp(sender, 249)
    assert second is not None and second >= between - CONVERSION_SLACK_NS
    assert _error_queue_empty(sender)

    # a byte never sent has no stamp: None, never another write's, and the queue emptied
    sender.sendall(b"d" * 10)
    assert send_stamp(sender, 10_000) is None
    assert _error_queue_empty(sender)
    assert len(receiver.recv(65536)) > 0


def _connection_pair(
    loop: asyncio.AbstractEventLoop, buffer: int | None = None
) -> tuple[tcp.Connection, socket.socket, socket.socket]:
    """A lean connection to a blocking server socket on 127.0.0.1 (`buffer`: both sides'
    socket buffers that small, so a larger write goes in parts)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if buffer is not None:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client.settimeout(5)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    server.settimeout(5)
    listener.close()
    client.setblocking(False)
    return tcp.Connection(("http", "127.0.0.1", 0), client, loop), client, server


@pytest.mark.parametrize("read_path", ["c", "python"])
def test_a_stamp_that_comes_late_wakes_the_reader_once_not_every_iteration(
    read_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if read_path == "python":
        monkeypatch.setattr(tcp, "READER", None)
        monkeypatch.setattr(tcp, "RECV_STAMPED", None)
    elif readpath.READER is None:
        pytest.skip("labkit was built without its C read path")
    calls = 0
    on_readable = tcp.Connection._on_readable

    def counted(self: tcp.Connection) -> None:
        nonlocal calls
        calls += 1
        on_readable(self)

    monkeypatch.setattr(tcp.Connection, "_on_readable", counted)

    async def go() -> tuple[bool, bool]:
        conn, client, server = _connection_pair(asyncio.get_running_loop())
        try:
            if not conn._send_stamped:
                pytest.skip("this kernel does not key its transmit stamps")
            # a send the connection never looks for a stamp of: as one that came too late
            client.send(b"x" * 64)
            await asyncio.sleep(0.2)
            return _error_queue_empty(client), conn.closed
        finally:
            conn.close()
            server.close()

    emptied, closed = asyncio.run(go())
    assert emptied and not closed
    # without the reader taking the stamp off, the loop calls it on each of its iterations
    # (thousands in 0.2 s); with it, the stamp's wake-up and perhaps one more
    assert 1 <= calls <= 3


def test_a_write_is_sent_by_its_stamp_when_that_came_before_the_call_returned() -> None:
    async def go() -> list[tuple[int, int, int]]:
        conn, client, server = _connection_pair(asyncio.get_running_loop(), buffer=64 * 1024)
        try:
            if not conn._send_stamped:
                pytest.skip("this kernel does not key its transmit stamps")
            spans = []
            for size in (200, 3_000_000):  # one send, then a write the socket takes in parts
                before = time.perf_counter_ns()
                conn.write(b"r" * size)
                assert bool(conn._unsent) == (size > 200)  # the large one waits in parts
                got = 0
                while not conn.t_sent_ns:
                    got += len(server.recv(1 << 20))
                    await asyncio.sleep(0)
                spans.append((before, conn.t_sent_ns, time.perf_counter_ns()))
                while got < size:
                    got += len(server.recv(1 << 20))
            # a part's stamp that came after its write looked may wait for the reader
            await asyncio.sleep(0.05)
            assert _error_queue_empty(client)
            return spans
        finally:
            conn.close()
            server.close()

    for before, sent, after in asyncio.run(go()):
        assert before - CONVERSION_SLACK_NS <= sent <= after
