"""labkit's one-off set-up of a client path, done before the first request's clock starts.

What a process's first request paid inside its measurement (with `warmup: 0`, 170–340 ms of
the first record's connect time): the modules httpcore and httpcore2 import on their first
connection (their anyio network backend, anyio's asyncio backend) and, on the SDK path, the
SDK client's construction and the SDK's own first-request work (importing the resource,
detecting the platform in a worker thread, building its stream). `BaseRecorder.set_up` does
it once per provider and path, without a socket: the SDK's is one dry run of the real client
against `DRY_RUN_URL`, answered in-process with a few events of the provider's protocol
(`SDKAdapter.dry_run_stream`), so the SDK's first event models are built then, not in a TTFT.
"""

from __future__ import annotations

import contextlib
import importlib
from contextvars import ContextVar

__all__ = ["DRY_RUN_BODY", "DRY_RUN_URL", "EVENT_STREAM_HEADERS", "import_network_backends"]

#: The modules httpcore and httpcore2 import on their first connection, not before.
_FIRST_CONNECTION_MODULES = (
    "sniffio",
    "anyio",
    "anyio._backends._asyncio",
    "anyio.streams.tls",
    "httpcore._backends.anyio",
    "httpcore2._backends.anyio",
)

#: Where the SDK path's dry run is sent (a reserved `.invalid` name: never resolved, the
#: SDK's HTTP client mounts an in-process answer on it, `Connections.sdk_http_client`).
DRY_RUN_URL = "http://labkit-set-up.invalid"

#: The dry run's answer's headers; its body is the adapter's `SDKAdapter.dry_run_stream`.
EVENT_STREAM_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache"}

#: The body the current task's dry run is answered with; None: no dry run is under way.
DRY_RUN_BODY: ContextVar[bytes | None] = ContextVar("labkit_dry_run_body", default=None)


def import_network_backends() -> None:
    """Import what the HTTP stacks import on their first connection (once per process;
    a stack that is not installed is skipped)."""
    for name in _FIRST_CONNECTION_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
