"""The lean HTTP/1.1 transport: many streams read in one loop, each read stamped on arrival.

Split by concern: `stamps` (the kernel's receive timestamps), `tcp` (one connection's
socket, read by a loop callback), `tls` (the same over an `ssl.SSLObject`), `http11` (the
response framing: head, Content-Length, chunked and read-until-close bodies), `outgoing` (a
request's bytes and connection made ready before its clock) and `transport` (the httpx
transport that pools the connections). Why it exists and what it leaves to
httpx: `transport`'s docstring and docs/measurement.md.
"""

from labkit.wire.lean.stamps import (
    hold_kernel_stamps,
    kernel_stamps_available,
    loopback_pair,
    read_is_stamped,
)
from labkit.wire.lean.transport import LeanTransport, lean_applies

__all__ = [
    "LeanTransport",
    "hold_kernel_stamps",
    "kernel_stamps_available",
    "lean_applies",
    "loopback_pair",
    "read_is_stamped",
]
