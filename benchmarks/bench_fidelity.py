"""labkit's own measurement error: labkit's TTFT and decode next to a bare client's.

The bare client is the least a measurement can do: a blocking socket, the request written
by hand, `perf_counter_ns` after every `recv`, the first read holding output text taken as
the first token. labkit and the bare client alternate on the same server (each request on a
fresh connection, as llama-server closes them anyway), so the machine's drift hits both.

Servers: the fake schedule on 127.0.0.1 (the truth server, `labkit.truth`, in a process of its
own: first token at 80 ms, 20 ms per token) and, with `--llama`, the real llama-server with
the bundled model (set up by `labkit setup`). Prints medians side by side and labkit − bare.
Not a test.

Run: `make bench` or `.venv/bin/python benchmarks/bench_fidelity.py [--llama] [--runs N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.providers.base import ChatRequest, Provider
from labkit.providers.fake import FakeSchedule
from labkit.truth.process import TruthServer

_CONTENT = re.compile(rb'"content":"(?!")')
_SERVER_DECODE = re.compile(rb'"predicted_per_token_ms":([0-9.]+)')
PROMPT = "Explain what a token is in one sentence."


def bare_request(
    url: str, path: str, body: dict[str, object]
) -> tuple[float, float, int, float | None]:
    """(ttft_ms, last_ms, output events, server decode ms/token) with a raw socket."""
    parts = urlsplit(url)
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    t0 = time.perf_counter_ns()
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.sendall(head + data)
    first = last = 0
    events = 0
    tail = b""
    while True:
        chunk = sock.recv(65536)
        t = time.perf_counter_ns()
        if not chunk:
            break
        n = len(_CONTENT.findall(chunk))
        if n:
            events += n
            first = first or t
            last = t
        tail = chunk
    sock.close()
    server = _SERVER_DECODE.search(tail)
    return (first - t0) / 1e6, (last - t0) / 1e6, events, float(server[1]) if server else None


def _provider(kind: str, base_url: str) -> Provider:
    cls = provider_class(kind)
    settings = cls.settings_model.model_validate(
        {"id": kind, "kind": kind, "model": "m", "base_url": base_url}
    )
    return cls(settings)


def compare(kind: str, base_url: str, path: str, params: dict[str, object], runs: int) -> None:
    """Alternate labkit and the bare client; print medians and the differences."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "stream_options": {"include_usage": True},
        **params,
    }
    lab_ttft, bare_ttft, lab_dec, bare_dec = [], [], [], []
    lab_srv, bare_srv = [], []

    async def run_all() -> None:
        # One event loop for every labkit request, as in a real run; each request still
        # opens a fresh connection. Who goes first alternates, so drift hits both.
        provider = _provider(kind, base_url)
        recorder = StreamRecorder()
        for i in range(runs + 1):
            for who in ("labkit", "bare") if i % 2 else ("bare", "labkit"):
                if who == "bare":
                    b_ttft, b_last, b_events, b_srv = bare_request(base_url, path, body)
                    if i:
                        bare_ttft.append(b_ttft)
                        bare_dec.append((b_last - b_ttft) / max(1, b_events - 1))
                        if b_srv is not None:
                            bare_srv.append(b_srv)
                    continue
                request = ChatRequest([{"role": "user", "content": PROMPT}], dict(params))
                request.fresh_connection = True
                rec = await recorder.record(provider, request, RecordContext("bench", "bench"))
                assert rec.error is None, rec.error
                if i:  # run 0 is a warm-up for both: first connection, lazy imports
                    lab_ttft.append(rec.client.ttft_ms or 0.0)
                    lab_dec.append(rec.client.decode_ms_per_token or 0.0)
                    if rec.provider_timings.decode_ms_per_token is not None:
                        lab_srv.append(rec.provider_timings.decode_ms_per_token)
        await provider.aclose()

    asyncio.run(run_all())
    med = statistics.median
    print(
        f"  TTFT   labkit {med(lab_ttft):8.2f} ms   bare {med(bare_ttft):8.2f} ms   "
        f"labkit - bare {med(lab_ttft) - med(bare_ttft):+6.2f} ms"
    )
    print(
        f"  decode labkit {med(lab_dec):8.3f} ms   bare {med(bare_dec):8.3f} ms   "
        f"ratio {med(lab_dec) / med(bare_dec):.4f}   ({runs} runs each, medians)"
    )
    if lab_srv and bare_srv:
        print(
            f"  server's own decode ms/token: during labkit's requests {med(lab_srv):.3f}, "
            f"during the bare client's {med(bare_srv):.3f}"
        )


@contextmanager
def fake_server(schedule: FakeSchedule) -> Iterator[str]:
    """The fake schedule served by the truth server, in a process of its own."""
    with TruthServer.of(schedule) as server:
        yield server.base_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama", action="store_true", help="also the real llama-server")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    schedule = FakeSchedule(first_token_ms=80, token_interval_ms=20, tokens=32)
    print("fake schedule on 127.0.0.1 (first token 80 ms, 20 ms/token, 32 tokens):")
    with fake_server(schedule) as url:
        compare("openai_compatible", url, "/v1/chat/completions", {"max_tokens": 32}, args.runs)
    if args.llama:
        from labkit.local import ManagedServer, ensure_setup

        print("llama-server, SmolLM2-135M Q4_1, 64 tokens, temperature 0:")
        with ManagedServer(ensure_setup(), ctx_size=2048) as server:
            params = {"max_tokens": 64, "temperature": 0, "ignore_eos": True}
            compare("llamacpp", server.base_url, "/v1/chat/completions", params, args.runs)


if __name__ == "__main__":
    main()
