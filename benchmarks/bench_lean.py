"""The lean transport's per-event CPU and stamp error, over TCP and TLS, against httpx.

Method. A server in its own process (asyncio, 127.0.0.1, TLS from a throwaway `trustme` CA
for https) answers each GET with a chunked stream of `--events` SSE events, one every
`--interval-ms` on absolute times; each event carries the server's `perf_counter_ns()` read
just before its write (same host, same CLOCK_MONOTONIC). The client keeps `--streams`
streams in flight in one asyncio loop through `labkit.lean.LeanTransport` (``lean``) or
`httpx.AsyncHTTPTransport` (``httpx``), and stamps each chunk: the transport's arrival stamp
(``labkit.arrival`` ``t_ns``) for lean, `perf_counter_ns()` when the chunk reaches the reader
for httpx. Stamp error = stamp − server send stamp of the first event in the chunk (p50/p99).
CPU = `time.process_time()` of the client process over the measured streams, per 1,000
events (the server is another process). Optional `--busy-ms`: a callback blocks the client
loop that long every 10 ms, to show what the kernel stamps keep out of the figures.

Run: `.venv/bin/python benchmarks/bench_lean.py [--streams 16] [--events 200]
[--interval-ms 2] [--busy-ms 0] [--legs lean-http,lean-https,httpx-http,httpx-https]`.
A benchmark, not a test: on 2 shared cores the figures are noisy; compare legs of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trustme

from labkit.wire.lean import LeanTransport

SERVER = r"""
import asyncio, ssl, sys, time
cert, key, events, interval_ns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

async def handle(reader, writer):
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            await writer.drain()
            start = time.perf_counter_ns()
            for i in range(events):
                due = start + i * interval_ns
                delay = (due - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                payload = b"data: %d %s\n\n" % (time.perf_counter_ns(), b"x" * 120)
                writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()

async def main():
    context = None
    if cert != "-":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _leg(
    url: str, lean: bool, context: ssl.SSLContext, streams: int, busy_ms: float
) -> tuple[float, list[float], int]:
    transport: httpx.AsyncBaseTransport
    if lean:
        # Plain http without the argument, so the leg runs on an older labkit.lean too.
        transport = (
            LeanTransport(ssl_context=context) if url.startswith("https") else LeanTransport()
        )
    else:
        limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
        transport = httpx.AsyncHTTPTransport(verify=context, limits=limits)
    errors: list[float] = []
    events = 0
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=30) as client:

        async def one() -> None:
            nonlocal events
            async with client.stream("GET", "/") as response:
                arrival = response.extensions.get("labkit.arrival")
                async for chunk in response.aiter_bytes():
                    t = arrival.t_ns if arrival is not None else time.perf_counter_ns()
                    parts = chunk.split(b"data: ")
                    sent = [int(p.split(b" ", 1)[0]) for p in parts[1:]]
                    events += len(sent)
                    if sent:
                        errors.append((t - sent[0]) / 1e6)

        await asyncio.gather(*(one() for _ in range(streams)))  # warm: connections open
        errors.clear()
        events = 0
        loop = asyncio.get_running_loop()
        stop = False

        def block() -> None:
            if stop:
                return
            time.sleep(busy_ms / 1000)
            loop.call_later(0.010, block)

        if busy_ms:
            loop.call_later(0.010, block)
        cpu = time.process_time()
        await asyncio.gather(*(one() for _ in range(streams)))
        cpu = time.process_time() - cpu
        stop = True
    return cpu, errors, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--busy-ms", type=float, default=0.0)
    parser.add_argument("--legs", default="lean-http,lean-https,httpx-http,httpx-https")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    ca = trustme.CA()
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        issued = ca.issue_cert("127.0.0.1")
        issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        context = httpx.create_ssl_context(trust_env=False)
        ca.configure_trust(context)
        servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
        interval_ns = str(int(args.interval_ms * 1e6))
        for scheme in ("http", "https"):
            tls = [str(cert), str(key)] if scheme == "https" else ["-", "-"]
            proc = subprocess.Popen(
                [sys.executable, "-c", SERVER, *tls, str(args.events), interval_ns],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            servers[scheme] = (proc, f"{scheme}://127.0.0.1:{proc.stdout.readline().strip()}")
        out = {}
        try:
            print(f"{args.streams} streams x {args.events} events at {args.interval_ms} ms, "
                  f"loop blocked {args.busy_ms} ms every 10 ms")  # fmt: skip
            print("  leg          | CPU ms/1k ev | stamp error ms p50    p99    max | events")
            for leg in args.legs.split(","):
                kind, scheme = leg.split("-")
                cpu, errors, events = asyncio.run(
                    _leg(servers[scheme][1], kind == "lean", context, args.streams, args.busy_ms)
                )
                row = {
                    "cpu_ms_per_1k_events": cpu * 1e6 / max(events, 1),
                    "stamp_error_p50_ms": _percentile(errors, 0.5),
                    "stamp_error_p99_ms": _percentile(errors, 0.99),
                    "stamp_error_max_ms": max(errors, default=float("nan")),
                    "events": events,
                }
                out[leg] = row
                print(
                    f"  {leg:<12} | {row['cpu_ms_per_1k_events']:12.1f} | "
                    f"{row['stamp_error_p50_ms']:19.3f} {row['stamp_error_p99_ms']:6.3f} "
                    f"{row['stamp_error_max_ms']:6.2f} | {events}"
                )
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(5)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
