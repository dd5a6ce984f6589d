"""Bounded resources on hostile replies, measured: a huge error body and a huge SSE event.

1. A 300 MB error body from a real server on 127.0.0.1 (HTTP 500, the body streamed as
   fast as the socket takes it): the recorder's peak memory (the measuring process's
   `ru_maxrss`, in a fresh child process per run, beside the same child sending nothing) and
   the time to the record. labkit reads at most `ERROR_BODY_CAP` of an error body.
2. One 40 MB SSE event arriving in 64 KiB reads: the time `SSEParser` takes, with the limit
   raised so the event is parsed whole (the work must be linear in the bytes), and with the
   default limit (`MAX_EVENT_BYTES`), where it must stop at the limit with a protocol error.

Run: `.venv/bin/python benchmarks/bench_faults.py` (or `make bench`). Not a test. On an older
labkit without the limits it measures the old behaviour, for a before/after.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import subprocess
import sys
import threading
import time

BODY_MB = 300
EVENT_MB = 40
READ = 64 * 1024


def _serve_error_body(sock: socket.socket, megabytes: int) -> None:
    conn, _ = sock.accept()
    with conn:
        conn.recv(65536)
        size = megabytes * 1024 * 1024
        conn.sendall(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
            + f"content-length: {size}\r\n\r\n".encode()
        )
        block = b"x" * (1024 * 1024)
        try:
            for _ in range(megabytes):
                conn.sendall(block)
        except OSError:
            pass  # the client stopped reading: what a bounded reader does


def child_error_body(megabytes: int) -> None:
    """In a fresh process: one request against a server sending a huge error body."""
    from labkit.measurement.recorder import RecordContext, StreamRecorder
    from labkit.providers import provider_class
    from labkit.providers.base import ChatRequest

    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if megabytes:
        threading.Thread(target=_serve_error_body, args=(sock, megabytes), daemon=True).start()
    cls = provider_class("openai_compatible")
    settings = cls.settings_model.model_validate(
        {
            "id": "p",
            "kind": "openai_compatible",
            "model": "m",
            "base_url": f"http://127.0.0.1:{port}/v1",
        }
    )

    async def main() -> float:
        provider = cls(settings)
        t0 = time.perf_counter()
        if megabytes:
            rec = await StreamRecorder().record(
                provider, ChatRequest([{"role": "user", "content": "hi"}]), RecordContext("r", "t")
            )
            assert rec.error is not None and rec.error.status == 500, rec.error
        await provider.aclose()
        return time.perf_counter() - t0

    elapsed = asyncio.run(main())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mib": peak_mib, "seconds": elapsed}))


def _run_child(megabytes: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(megabytes)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def sse_event_seconds(megabytes: int, raise_limit: bool) -> tuple[float, str]:
    """Seconds to feed one `megabytes` event in 64 KiB reads, and how it ended."""
    from labkit.wire.sse import SSEParser

    size = megabytes * 1024 * 1024
    try:
        parser = SSEParser(max_event_bytes=size + 1024) if raise_limit else SSEParser()
    except TypeError:  # an older labkit: no limit to raise
        parser = SSEParser()
    payload = b'data: {"x":"' + b"a" * size + b'"}\n\n'
    t0 = time.perf_counter()
    outcome = "no event"
    try:
        for i in range(0, len(payload), READ):
            for ev in parser.feed(payload[i : i + READ], 0):
                outcome = f"one event of {len(ev.data):,} characters"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    return time.perf_counter() - t0, outcome


def main() -> None:
    base = _run_child(0)
    big = _run_child(BODY_MB)
    print(
        f"{BODY_MB} MB error body: peak {big['peak_mib']:.0f} MiB (the same process sending "
        f"nothing: {base['peak_mib']:.0f} MiB; +{big['peak_mib'] - base['peak_mib']:.0f} MiB), "
        f"record after {big['seconds']:.2f} s"
    )
    seconds, outcome = sse_event_seconds(EVENT_MB, raise_limit=True)
    print(f"{EVENT_MB} MB SSE event, limit raised: {seconds:.3f} s ({outcome})")
    seconds, outcome = sse_event_seconds(EVENT_MB, raise_limit=False)
    print(f"{EVENT_MB} MB SSE event, default limit: {seconds:.3f} s ({outcome})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child_error_body(int(sys.argv[2]))
    else:
        main()
