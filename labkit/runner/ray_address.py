"""A Ray address checked before Ray is asked to join it: nothing listening is one line, fast.

`ray.init(address=...)` to a port where nothing listens keeps retrying its GCS connection
for minutes (a run hung past 150 s). Before it, `check_ray_address` opens one TCP
connection to the address within `RAY_PROBE_DEADLINE_S` and closes it; a refusal, an
unreachable host or the deadline passing is a `RunError` naming the address and what to
change. `local` starts a cluster here and `auto` without RAY_ADDRESS finds one on this host:
neither is probed.
"""

from __future__ import annotations

import os
import socket

from labkit.errors import RunError

__all__ = ["RAY_CLIENT_PORT", "RAY_PROBE_DEADLINE_S", "check_ray_address", "ray_endpoint"]

#: How long the TCP connect to a Ray address may take before the run stops with one line.
RAY_PROBE_DEADLINE_S = 10.0
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
    `deadline_s` (blocking: call it in a thread from async code)."""
    endpoint = ray_endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=deadline_s):
            return
    except TimeoutError:
        why = f"no answer within {deadline_s:g} s"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    raise RunError(
        f"no Ray cluster at {where} (executor.address {address!r}): {why}; start one there "
        "(`ray start --head`), or set executor.address to a running cluster or to local"
    )
