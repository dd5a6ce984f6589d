"""A fresh process's first two requests on one client path, against a tiny HTTP server on
127.0.0.1 that stamps when it accepted each connection and read each request; prints what
happened as one JSON object (`test_first_request_setup` runs it in a child process, so that
nothing of labkit's or of its HTTP stacks was set up before).

``python -m tests.measurement.first_request_probe wire|lean|sdk``

Every module imported while it runs is stamped too (a `sys.meta_path` finder that only
watches), so the test can tell whether any import fell inside a measured interval.
"""

from __future__ import annotations

import sys
import time
from typing import Any

IMPORTS: list[tuple[int, str]] = []


class _ImportStamps:
    """A finder that finds nothing: it stamps each module Python looks for the first time."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        IMPORTS.append((time.perf_counter_ns(), name))


sys.meta_path.insert(0, _ImportStamps())

import asyncio  # noqa: E402
import json  # noqa: E402

CHUNK = '{"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[%s]%s}'
BODY = "".join(
    f"data: {event}\n\n"
    for event in [
        CHUNK % ('{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}', ""),
        CHUNK % ('{"index":0,"delta":{"content":"one"},"finish_reason":null}', ""),
        CHUNK % ('{"index":0,"delta":{"content":" two"},"finish_reason":null}', ""),
        CHUNK % ('{"index":0,"delta":{},"finish_reason":"stop"}', ""),
        CHUNK % ("", ',"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}'),
        "[DONE]",
    ]
).encode()


async def scenario(path: str) -> dict[str, Any]:
    """Two requests on `path` (a fresh provider and recorder), with the server's stamps."""
    from labkit.measurement.recorder import RecordContext, StreamRecorder
    from labkit.measurement.sdkpath import SDKRecorder
    from tests.providers.streams import chat, make_provider

    accepted: list[int] = []
    read: list[int] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(time.perf_counter_ns())
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        await reader.readexactly(length)
        read.append(time.perf_counter_ns())
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kind = "openai" if path == "sdk" else "openai_compatible"
    provider = make_provider(
        kind,
        api_key="sk-probe" if path == "sdk" else None,
        base_url=f"http://127.0.0.1:{port}/v1",
        transport="lean" if path == "lean" else "httpx",
    )
    recorder = SDKRecorder() if path == "sdk" else StreamRecorder()
    t_first_call = time.perf_counter_ns()
    records = []
    for _ in range(2):
        ctx = RecordContext(run_id="probe", experiment="first-request")
        records.append(await recorder.record(provider, chat(max_tokens=8), ctx))
    if isinstance(recorder, SDKRecorder):
        await recorder.aclose()
    await provider.aclose()
    server.close()
    await server.wait_closed()
    done = recorder.set_up_done_ns(provider)
    out: dict[str, Any] = {
        "path": path,
        "set_up_ms": None if done is None else (done - t_first_call) / 1e6,
        "set_up_done_ns": done,
        "accepted_ns": accepted,
        "request_read_ns": read,
        "records": [],
    }
    for r in records:
        start = r.t_start_mono_ns or 0
        end = start + round((r.client.e2e_ms or 0.0) * 1e6)
        out["records"].append(
            {
                "t_start_ns": start,
                "end_ns": end,
                "error": r.error and r.error.message,
                "connect_ms": r.client.connect_ms,
                "headers_ms": r.client.headers_ms,
                "ttft_ms": r.client.ttft_ms,
                "prepare_ms": r.app.prepare_ms,
                "imports_inside": [name for t, name in IMPORTS if start <= t <= end],
            }
        )
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(scenario(sys.argv[1]))))
