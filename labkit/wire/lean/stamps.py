"""Kernel receive stamps: each read of the lean transport carries its last segment's arrival.

Each socket asks the kernel for receive timestamps (``SO_TIMESTAMPNS`` on Linux;
``SO_TIMESTAMP``, µs, where the platform's `socket` module has it and not the former), so a
busy loop delays a read but not its stamp. Sends are stamped too where the kernel can say
which stamp is whose (`ask_send_stamps`, `send_stamp`). Which segment's stamp a read gets
and how it is put on labkit's clock: docs/measurement.md, "ClientTimings" (after the table).
`hold_kernel_stamps` keeps the kernel's stack-wide switch on for the whole process;
`loopback_pair` and `read_is_stamped` probe whether a read really comes stamped.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import platform
import socket
import struct
import sys
import time
from collections.abc import Iterator

__all__ = [
    "ANC_SIZE",
    "KERNEL_STAMPS",
    "STAMP",
    "STAMP_TYPE",
    "STAMP_UNIT",
    "ask_send_stamps",
    "drain_send_stamps",
    "hold_kernel_stamps",
    "kernel_stamps_available",
    "loopback_pair",
    "read_is_stamped",
    "send_stamp",
]


def _kernel_stamp_option() -> tuple[int, int, struct.Struct, int] | None:
    """(socket option, cmsg type, struct of its data, ns per fraction unit), or None here."""
    nanos = getattr(socket, "SO_TIMESTAMPNS", None)
    if nanos is None and sys.platform.startswith("linux") and struct.calcsize("l") == 8:
        # Python does not export it; SO_TIMESTAMPNS_OLD (= SCM_TIMESTAMPNS) on the generic
        # 64-bit Linux ABIs, where its cmsg is a struct timespec of two longs.
        generic = {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x"}
        if platform.machine().lower() in generic:
            nanos = 35
    if nanos is not None:
        return nanos, nanos, struct.Struct("@ll"), 1
    micros = getattr(socket, "SO_TIMESTAMP", None)
    if micros is not None:  # struct timeval; tv_usec is an int on macOS, a long elsewhere
        layout = "@li" if sys.platform == "darwin" else "@ll"
        return micros, getattr(socket, "SCM_TIMESTAMP", micros), struct.Struct(layout), 1000
    return None


KERNEL_STAMPS = _kernel_stamp_option()


ANC_SIZE = socket.CMSG_SPACE(16) if KERNEL_STAMPS is not None else 0


STAMP_TYPE, STAMP, STAMP_UNIT = (
    KERNEL_STAMPS[1:] if KERNEL_STAMPS is not None else (-1, struct.Struct("@ll"), 1)
)


#: ``SO_TIMESTAMPING`` where it pairs with the receive option above: the generic 64-bit
#: Linux ABIs' "old" number (37), whose stamps are timespecs of two longs like
#: ``SO_TIMESTAMPNS_OLD``'s (35); None elsewhere.
_SO_TIMESTAMPING = 37 if KERNEL_STAMPS is not None and KERNEL_STAMPS[0] == 35 else None

# linux/net_tstamp.h's SOF_TIMESTAMPING_* flags used here.
_TX_SOFTWARE, _SOFTWARE, _OPT_ID, _OPT_TSONLY = 1 << 1, 1 << 4, 1 << 7, 1 << 11
_OPT_ID_TCP, _OPT_RX_FILTER = 1 << 16, 1 << 17

#: The transmit stamps asked for: the software stamp of each send's last byte (TX_SOFTWARE,
#: reported: SOFTWARE), the stamp alone without the payload echoed back (OPT_TSONLY), keyed
#: by that byte's place in the connection's bytes since the option was set (OPT_ID with
#: OPT_ID_TCP), and receive stamps left to the receive option alone (OPT_RX_FILTER: without
#: it each read would carry a second stamp). A kernel that does not know a flag refuses the
#: option, and that connection's sends go unstamped.
SEND_STAMP_FLAGS = _TX_SOFTWARE | _SOFTWARE | _OPT_TSONLY | _OPT_ID | _OPT_ID_TCP | _OPT_RX_FILTER

_ERRQUEUE_FLAGS = getattr(socket, "MSG_ERRQUEUE", 0x2000) | socket.MSG_DONTWAIT
_ERRQUEUE_ANC = 512
#: (level, type) of the error-queue message's `sock_extended_err`: IP_RECVERR, IPV6_RECVERR.
_RECVERR = {(socket.IPPROTO_IP, 11), (socket.IPPROTO_IPV6, 25)}
#: sock_extended_err as a transmit stamp fills it: ee_errno (ENOMSG), ee_origin
#: (`_ORIGIN_TIMESTAMPING`), ee_type, ee_code, pad, ee_info (`_TSTAMP_SND`), ee_data (the key).
_EXTENDED_ERR = struct.Struct("=IBBBBII")
_ORIGIN_TIMESTAMPING = 4  # SO_EE_ORIGIN_TIMESTAMPING
_TSTAMP_SND = 0  # SCM_TSTAMP_SND: the stamp of a send, not of its scheduling or its ACK


def ask_send_stamps(sock: socket.socket) -> bool:
    """Ask the kernel for a transmit stamp of each send's last byte on a connected TCP
    `sock`; whether it agreed (no: this platform or kernel, and `send_stamp` is not to be
    called). Keys count from the call: bytes written before it are not counted."""
    if _SO_TIMESTAMPING is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPING, SEND_STAMP_FLAGS)
    except OSError:
        return False
    return True


def send_stamp(sock: socket.socket, last_byte: int) -> int | None:
    """The kernel's transmit stamp of byte `last_byte` (counted from `ask_send_stamps`) on
    labkit's clock (`time.perf_counter_ns`), or None where it has not come (the byte not
    sent yet: TCP may hold it back; or no stamp). Takes the socket's stamps off its error
    queue up to that one, so none is left to wake its reader. `sock` is non-blocking, as
    the loop's are (Python waits for a socket with a timeout to be readable first)."""
    key = last_byte & 0xFFFFFFFF
    while True:
        try:
            _, ancillary, _, _ = sock.recvmsg(0, _ERRQUEUE_ANC, _ERRQUEUE_FLAGS)
        except OSError:
            return None
        stamp = 0
        mine = False
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPING and len(data) >= 16:
                sec, nsec = STAMP.unpack_from(data)
                stamp = int(sec) * 1_000_000_000 + int(nsec)
            elif (level, kind) in _RECVERR and len(data) >= _EXTENDED_ERR.size:
                errno_, origin, _, _, _, info, ee_data = _EXTENDED_ERR.unpack_from(data)
                mine = (
                    errno_ == errno.ENOMSG
                    and origin == _ORIGIN_TIMESTAMPING
                    and info == _TSTAMP_SND
                    and ee_data == key
                )
        if mine and stamp:
            return stamp - _realtime_offset_ns()


def _realtime_offset_ns() -> int:
    """CLOCK_REALTIME less labkit's clock, read between two reads of the latter (a wall
    read preempted away from them would shift a stamp by the preemption: the closest of
    three tries is kept)."""
    best_gap, best = -1, 0
    for _ in range(3):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        gap = after - before
        if best_gap < 0 or gap < best_gap:
            best_gap, best = gap, wall - (before + after) // 2
        if gap < 5_000:
            break
    return best


def drain_send_stamps(sock: socket.socket) -> None:
    """Take every stamp off `sock`'s error queue (a reader woken by one with nothing to
    read: a stamp that came after its `send_stamp`); `sock` non-blocking."""
    while True:
        try:
            sock.recvmsg(0, _ERRQUEUE_ANC, _ERRQUEUE_FLAGS)
        except OSError:
            return


def kernel_stamps_available() -> bool:
    """Whether this platform gives the lean transport kernel receive stamps."""
    return KERNEL_STAMPS is not None


#: The socket that keeps the kernel's receive timestamping on for this process (see
#: `hold_kernel_stamps`); None until the first lean connection or set-up, or where there are no
#: stamps.
_stamp_holder: socket.socket | None = None


def hold_kernel_stamps(wait_s: float = 0.2) -> bool:
    """Keep kernel receive stamps on for this process; whether a probe saw them arrive.

    Linux stamps received packets only while some socket asks for stamps (a stack-wide
    switch), and turns that on when the first socket asks and off when the last one closes,
    each change applied a moment later by a kernel work queue: packets that arrive meanwhile
    carry no stamp, so on a busy host the first reads of a run (or of each test, as one
    level's connections close before the next opens) were stamped in user space. One
    socket that asks and stays open for the process keeps the switch on between
    connections; a loopback TCP probe (up to `wait_s`) waits until a stamp really arrives,
    so connections opened after this call are stamped from their first byte. Idempotent.
    """
    global _stamp_holder
    if KERNEL_STAMPS is None:
        return False
    if _stamp_holder is not None:
        return True
    try:
        holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        holder.setsockopt(socket.SOL_SOCKET, KERNEL_STAMPS[0], 1)
    except OSError:
        return False
    _stamp_holder = holder
    atexit.register(holder.close)
    try:
        return _probe_kernel_stamps(wait_s)
    except OSError:  # no loopback to probe on (an unconfigured namespace): stamps as they come
        return False


@contextlib.contextmanager
def loopback_pair(timeout: float = 1.0) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on 127.0.0.1, (sender, receiver), the receiver asking for
    kernel receive stamps (the platform must have them)."""
    assert KERNEL_STAMPS is not None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), timeout=timeout) as sender:
            receiver, _ = listener.accept()
            with receiver:
                receiver.settimeout(timeout)
                receiver.setsockopt(socket.SOL_SOCKET, KERNEL_STAMPS[0], 1)
                yield sender, receiver


def read_is_stamped(sender: socket.socket, receiver: socket.socket, data: bytes) -> bool:
    """Send `data` over a `loopback_pair` and say whether its read came with a kernel stamp."""
    sender.sendall(data)
    _, ancillary, _, _ = receiver.recvmsg(len(data), ANC_SIZE)
    return bool(ancillary)


def _probe_kernel_stamps(wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    with loopback_pair() as (sender, receiver):
        while not read_is_stamped(sender, receiver, b"x"):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True
