"""A Ray address checked before Ray is asked to join it: nothing listening, or something
that is not Ray, is one line, fast.

`ray.init(address=...)` to a port where nothing listens keeps retrying its GCS connection
for minutes (a run hung past 150 s), and to a port where some other server answers it
retried for 94 s before failing in words of its own. `check_ray_address` first opens one TCP
connection and greets the address as an HTTP/2 client, which Ray's gRPC endpoints answer at
once (what a user sees: docs/ray.md).
"""

from __future__ import annotations

import contextlib
import os
import socket

from labkit.errors import RunError

__all__ = [
    "RAY_ANSWER_DEADLINE_S",
    "RAY_CLIENT_PORT",
    "RAY_PROBE_DEADLINE_S",
    "check_ray_address",
    "ray_endpoint",
]

#: How long the TCP connect to a Ray address may take before the run stops with one line.
RAY_PROBE_DEADLINE_S = 10.0
#: How long a connected Ray address may take to answer the HTTP/2 greeting.
RAY_ANSWER_DEADLINE_S = 5.0
#: Ray Client's port when `ray://host` names none.
RAY_CLIENT_PORT = 10001


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) that `address` connects to (`auto` reads RAY_ADDRESS); None when there
    is no remote endpoint to check (`local`, `auto` with no RAY_ADDRESS) or it does not
    parse (Ray's own error then says so)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address or address in ("auto", "local"):
            return None
    if address == "local":
        return None
    default_port = RAY_CLIENT_PORT if address.startswith("ray://") else None
    rest = address.removeprefix("ray://").split("/", 1)[0]
    host, sep, port_text = rest.rpartition(":")
    if not sep:
        host, port_text = rest, ""
    host = host.strip("[]")
    if not host:
        return None
    if port_text.isdigit() and 0 < int(port_text) < 65536:
        return host, int(port_text)
    if not port_text and default_port is not None:
        return host, default_port
    return None


def check_ray_address(address: str, deadline_s: float = RAY_PROBE_DEADLINE_S) -> None:
    """Raise RunError when nothing accepts a TCP connection at `address` within
    `deadline_s` (blocking: call it in a thread from async code).

    A refusal, an unreachable host, the deadline passing, or an answer that is no HTTP/2
    SETTINGS frame within `RAY_ANSWER_DEADLINE_S` (an HTTP/1 server, a database, silence) is
    a `RunError` naming the address and what to change: both of Ray's endpoints (the GCS and
    Ray Client's server) are gRPC servers, which answer the greeting with SETTINGS at once.
    `local` starts a cluster here and `auto` without RAY_ADDRESS finds one on this host:
    neither is probed (`ray_endpoint`)."""
    endpoint = ray_endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=deadline_s) as sock:
            answer = _greet(sock, min(deadline_s, RAY_ANSWER_DEADLINE_S))
    except TimeoutError:
        why = f"no answer within {deadline_s:g} s"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    else:
        if answer is None:
            return
        raise RunError(
            f"the server at {where} (executor.address {address!r}) is not a Ray cluster: "
            f"{answer}; give the address of the cluster's GCS (host:6379 by default) or "
            "ray://host:10001 for Ray Client"
        )
    raise RunError(
        f"no Ray cluster at {where} (executor.address {address!r}): {why}; start one there "
        "(`ray start --head`), or set executor.address to a running cluster or to local"
    )


#: An HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
_HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS_FRAME = 0x04
_FRAME_HEADER = 9


def _greet(sock: socket.socket, deadline_s: float) -> str | None:
    """None when the server on `sock` answers an HTTP/2 greeting with a SETTINGS frame (as
    every gRPC server does, Ray's among them); else what it did instead, in words."""
    sock.settimeout(deadline_s)
    try:
        sock.sendall(_HTTP2_GREETING)
        head = b""
        while len(head) < _FRAME_HEADER:
            chunk = sock.recv(_FRAME_HEADER - len(head))
            if not chunk:
                break
            head += chunk
    except TimeoutError:
        return f"it accepted the connection but said nothing within {deadline_s:g} s"
    except OSError as exc:
        return f"it dropped the connection ({exc.strerror or type(exc).__name__})"
    if len(head) == _FRAME_HEADER and head[3] == _SETTINGS_FRAME:
        return None
    if not head:
        return "it closed the connection without a word"
    if head.startswith(b"HTTP/"):
        with contextlib.suppress(OSError):  # the rest of its status line, if it came
            head += sock.recv(64)
        status = head.split(b"\r", 1)[0].decode("ascii", "replace")
        return f"it answered in HTTP/1 ({status!r}), not gRPC"
    return f"it answered {head!r}, not gRPC's HTTP/2"
