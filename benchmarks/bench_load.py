"""labkit's measurement error under load, against a server that stamps its true send times.

Method. `scripted_server.py` runs in its own process on 127.0.0.1 and serves an
OpenAI-compatible stream on a fixed script (first token `--ttft-ms` after the request is
received, then one token every `--interval-ms`, `--tokens` in all, on absolute times). It
reads `time.perf_counter_ns()` immediately before it writes each event: same host, same
CLOCK_MONOTONIC as the client's `perf_counter_ns`, so a client's stamp minus the server's
send stamp is the client's measurement error (loopback transit included, a few tens of µs).

Clients, in the SAME run, interleaved per level (the order alternates each round, so drift
and the neighbours' noise hit all of them), each a closed loop keeping `concurrency` streams
in flight in one asyncio loop of this process:

- ``labkit``: labkit's own wire path, the real `StreamRecorder` with an
  ``openai_compatible`` provider built as a load level builds it (``transport: auto``, so
  this plain-HTTP server is read by `labkit.lean`, each read stamped on arrival) and a
  `LoopLagMonitor` started as the Runner starts it.
- ``labkit-httpx``: the same through httpx (``transport: httpx``): what labkit does on
  https and behind proxies.
  Output event i is stamped at ``t_start_mono_ns + client.event_offsets_ms[i] * 1e6``;
  TTFT is ``client.ttft_ms``.
- ``bare``: the least an httpx client can do: `httpx.AsyncClient.stream`, `aiter_bytes`,
  events split on ``\\n\\n``, one `perf_counter_ns` per received chunk; t_start read
  just before `client.stream(...)`.
- ``sdk``: the official `openai` SDK (`AsyncOpenAI(base_url=..., api_key="none",
  max_retries=0)`, on httpx2), each content chunk stamped when the SDK yields it.
- ``labkit-sdk``: labkit's SDK path (`labkit.sdkpath.SDKRecorder`, ``client_path = sdk``),
  stamps from its records like ``labkit``, with a `LoopLagMonitor` where it takes one.
- ``labkit-run`` and ``labkit-procs``: labkit's whole load runner (`labkit run` without
  the CLI), a ``load`` experiment at the level's concurrency, read by one process
  (``workers: 1``) or by ``workers: auto`` (`labkit.capacity`: as many as the measured
  capacity needs, within the CPUs the server leaves free); stamps from the run's records.
  Their CPU is not given (the run's set-up and the workers' start-up cannot be told apart
  from the level), their events/s is over the level.
- ``raw``: the floor for one Python process: a keep-alive HTTP/1.1 client on a bare asyncio
  `Protocol` (no HTTP library, no pool), stamping in `data_received`. It shows how much of
  the error and CPU is the HTTP stack (httpx/httpcore/anyio) rather than Python or the host.

Every client first opens its pool with `concurrency` one-token requests (not measured; the
runner legs send their warm-up instead).
Events are matched to the server's stamps by response id and position. Per level and client:

- stamp error = client stamp − server send stamp, over every output event (p50/p99/max);
- TTFT error = client TTFT − true TTFT, true TTFT = first output send stamp − client t_start
  (the scripted TTFT, the server's achieved first-send − t_recv and the client's TTFT are
  printed too: TTFT − scripted is what a user would read as "TTFT over-reported");
- events/s achieved; CPU ms per 1,000 events (`time.process_time` of this process around
  the measured requests; the server is another process and not counted); ratios to ``bare``;
- for the labkit legs, ``client.loop_lag_ms`` (labkit's self-check) p50/p99 over records,
  and ``client.request_sent_ms`` (when labkit's request was written);
- the request path, server t_recv − client t_start, and the TTFT the client reports over the
  server's own TTFT (first send − t_recv): TTFT error plus the request path.

A level that misses the load targets passes only if it is *flagged client-bound* by labkit's
own rule (`labkit.selfcheck`, where present): the median record's ``loop_lag_ms`` above
``CLIENT_BOUND_LAG_MS`` (3 ms). Records whose worst stamp error exceeds 3 ms while their own
``loop_lag_ms`` stays under 3 ms are counted as *unflagged* (per-record error the per-record
self-check did not show), as a check on the self-check itself.

Targets (issue 6) are checked on the ``labkit`` leg and printed as PASS/MISS lines; the
load target (32 streams) is applied to every level of 8 streams or more.

Run: `make bench-load` or `.venv/bin/python benchmarks/bench_load.py [--levels 1,8,32]
[--requests-per-level N] [--rounds 2] [--clients labkit,bare,sdk,...] [--tokens 100]
[--interval-ms 2] [--ttft-ms 50] [--json OUT]`. A benchmark, not a test: figures depend on
the machine; on 2 cores the client and the server share the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scripted_server import ScriptedServer

from labkit.providers import provider_class
from labkit.providers.base import ChatRequest, Provider
from labkit.recorder import LoopLagMonitor, RecordContext, StreamRecorder

try:  # labkit's own client-bound rule, where this labkit has it
    from labkit.selfcheck import CLIENT_BOUND_LAG_MS
except ImportError:
    CLIENT_BOUND_LAG_MS = 3.0

PROMPT = "Explain what a token is in one sentence."
MESSAGES = [{"role": "user", "content": PROMPT}]
STAMP_P99_TARGET_MS = 3.0  # 32 streams: event stamp p99 error
TTFT_LOAD_TARGET_MS = 1.0  # 32 streams: TTFT p50 error
CPU_RATIO_TARGET = 1.5  # labkit CPU per event over bare httpx's

_CONTENT = re.compile(rb'"content":"(?!")')
_ID = re.compile(rb'"id":"([^"]+)"')


@dataclass(slots=True)
class StreamResult:
    """What one client saw of one stream, in the shape every leg returns."""

    response_id: str
    t_start_ns: int
    ttft_ms: float | None
    stamps_ns: list[int]
    loop_lag_ms: float | None = None
    request_sent_ms: float | None = None  # labkit legs: client.request_sent_ms (trace hook)


@dataclass(slots=True)
class LegResult:
    """One client's measured requests at one level."""

    streams: list[StreamResult]
    cpu_s: float
    wall_s: float
    errors: list[str] = field(default_factory=list)


Leg = Callable[[str, int, int], LegResult]


async def _closed_loop(concurrency: int, n: int, one: Callable[[int], Awaitable[Any]]) -> list[Any]:
    """Run `one(i)` for i < n, keeping `concurrency` in flight."""
    results: list[Any] = [None] * n
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            results[i] = await one(i)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    return results


async def _measure(
    concurrency: int, n: int, one: Callable[[int], Awaitable[Any]]
) -> tuple[list[Any], float, float]:
    """Warm the pool with `concurrency` one-token requests, then measure `n` requests."""
    await _closed_loop(concurrency, concurrency, lambda i: one(-1))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = await _closed_loop(concurrency, n, one)
    return results, time.process_time() - cpu0, time.perf_counter() - wall0


# -- leg (a): labkit's wire path ------------------------------------------------------------


def _provider(base_url: str, concurrency: int, transport: str = "auto") -> Provider:
    """The provider as a load level builds it: its pool sized for the level, so `auto`
    reads this plain-HTTP server with the lean transport."""
    cls = provider_class("openai_compatible")
    settings = cls.settings_model.model_validate(
        {
            "id": "scripted",
            "kind": "openai_compatible",
            "model": "m",
            "base_url": base_url,
            "concurrency": concurrency,
            "transport": transport,
        }
    )
    return cls(settings, pool_size=concurrency)


def _from_record(rec: Any, errors: list[str]) -> StreamResult:
    if rec.error is not None:
        errors.append(f"{rec.error.kind}: {rec.error.message}")
    t0 = rec.t_start_mono_ns
    return StreamResult(
        response_id=rec.response_id or "",
        t_start_ns=t0,
        ttft_ms=rec.client.ttft_ms,
        stamps_ns=[t0 + round(o * 1e6) for o in rec.client.event_offsets_ms],
        loop_lag_ms=rec.client.loop_lag_ms,
        request_sent_ms=rec.client.request_sent_ms,
    )


def labkit_leg(
    base_url: str, concurrency: int, n_requests: int, transport: str = "auto"
) -> LegResult:
    """labkit's `StreamRecorder` (with its loop-lag self-check), as the Runner uses it.

    The one function to swap for labkit's multi-process load runner: it only has to return
    the same `LegResult`.
    """

    async def run() -> LegResult:
        provider = _provider(base_url, concurrency, transport)
        lag = LoopLagMonitor()
        recorder = StreamRecorder(lag_monitor=lag)
        lag.start()
        ctx = RecordContext("bench-load", "bench-load")

        async def one(i: int) -> Any:
            params = {"max_tokens": 1} if i < 0 else {}
            return await recorder.record(provider, ChatRequest(list(MESSAGES), params), ctx)

        try:
            records, cpu, wall = await _measure(concurrency, n_requests, one)
        finally:
            await lag.stop()
            await provider.aclose()
        errors: list[str] = []
        return LegResult([_from_record(r, errors) for r in records], cpu, wall, errors)

    return asyncio.run(run())


def labkit_sdk_leg(base_url: str, concurrency: int, n_requests: int) -> LegResult:
    """labkit's SDK path (`SDKRecorder`): the openai SDK, stamped and recorded by labkit."""
    from labkit.sdkpath import SDKRecorder

    async def run() -> LegResult:
        provider = _provider(base_url, concurrency)
        lag = LoopLagMonitor()
        recorder = SDKRecorder(lag_monitor=lag)
        lag.start()
        ctx = RecordContext("bench-load", "bench-load")

        async def one(i: int) -> Any:
            params = {"max_tokens": 1} if i < 0 else {}
            request = ChatRequest(list(MESSAGES), params, client_path="sdk")
            return await recorder.record(provider, request, ctx)

        try:
            records, cpu, wall = await _measure(concurrency, n_requests, one)
        finally:
            await lag.stop()
            await recorder.aclose()
            await provider.aclose()
        errors: list[str] = []
        return LegResult([_from_record(r, errors) for r in records], cpu, wall, errors)

    return asyncio.run(run())


def _runner_leg(workers: int | str) -> Leg:
    """labkit's own load runner: a `load` experiment at one concurrency level, its streams
    spread over `workers` processes (`auto`: chosen from measured capacity)."""

    def leg(base_url: str, concurrency: int, n_requests: int) -> LegResult:
        import tempfile

        from labkit.config import parse_config
        from labkit.runner import RunOptions, prepare_run

        n = max(n_requests, concurrency)
        config = parse_config(
            {
                "name": "bench-load",
                "providers": [
                    {"id": "s", "kind": "openai_compatible", "model": "m", "base_url": base_url}
                ],
                "experiments": [
                    {
                        "kind": "load",
                        "concurrency": [concurrency],
                        "requests": n,
                        "warmup": 1,
                        "workers": workers,
                        "prompts": [PROMPT],
                    }
                ],
            }
        )
        with tempfile.TemporaryDirectory() as out:
            runner = prepare_run(config, RunOptions(out_dir=Path(out)))
            result = asyncio.run(runner.run())
        errors: list[str] = []
        measured = [r for r in result.records if not r.warmup]
        streams = [_from_record(r, errors) for r in measured]
        # Wall time: the level itself, from its first request to its last byte. CPU is not
        # given: the run's set-up and each worker's start-up and warm-up cannot be told
        # apart from the level's own work here (the `labkit` leg gives labkit's CPU/event).
        starts = [r.t_start_mono_ns or 0 for r in measured]
        ends = [(r.t_start_mono_ns or 0) + (r.client.e2e_ms or 0.0) * 1e6 for r in measured]
        wall = (max(ends) - min(starts)) / 1e9 if measured else 0.0
        return LegResult(streams, math.nan, wall, errors)

    return leg


# -- leg (b): bare httpx --------------------------------------------------------------------


def _chat_body(i: int) -> dict[str, Any]:
    """The streaming request the hand-written clients send (i < 0: a one-token warm-up)."""
    body: dict[str, Any] = {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if i < 0:
        body["max_tokens"] = 1
    return body


def bare_leg(base_url: str, concurrency: int, n_requests: int) -> LegResult:
    """A bare httpx loop: one clock read per received chunk, events split on blank lines."""

    async def run() -> LegResult:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits, timeout=120.0) as client:
            url = base_url + "/chat/completions"

            async def one(i: int) -> StreamResult:
                body = _chat_body(i)
                clock = time.perf_counter_ns
                stamps: list[int] = []
                rid = b""
                buf = b""
                t_buf = 0  # stamp of the read that brought the buffered bytes' first byte
                t_start = clock()
                async with client.stream("POST", url, json=body) as resp:
                    async for chunk in resp.aiter_bytes():
                        t = clock()
                        if not buf:
                            t_buf = t
                        buf += chunk
                        *events, buf = buf.split(b"\n\n")
                        for k, ev in enumerate(events):
                            if _CONTENT.search(ev):
                                stamps.append(t_buf if k == 0 else t)
                            elif not rid and (m := _ID.search(ev)):
                                rid = m[1]
                        if buf:
                            t_buf = t if events else t_buf
                if not rid and stamps:
                    rid = b"?"
                ttft = (stamps[0] - t_start) / 1e6 if stamps else None
                return StreamResult(rid.decode(), t_start, ttft, stamps)

            results, cpu, wall = await _measure(concurrency, n_requests, one)
        return LegResult(results, cpu, wall)

    return asyncio.run(run())


# -- leg (c): the openai SDK ----------------------------------------------------------------


def sdk_leg(base_url: str, concurrency: int, n_requests: int) -> LegResult:
    """The official openai SDK's streaming Chat Completions, stamped as each chunk is yielded."""
    import openai

    async def run() -> LegResult:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0)

        async def one(i: int) -> StreamResult:
            clock = time.perf_counter_ns
            stamps: list[int] = []
            rid = ""
            t_start = clock()
            extra: dict[str, Any] = {"max_tokens": 1} if i < 0 else {}
            stream = await client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
                **extra,
            )
            async for chunk in stream:
                t = clock()
                if chunk.choices and chunk.choices[0].delta.content:
                    stamps.append(t)
                    rid = rid or chunk.id
            ttft = (stamps[0] - t_start) / 1e6 if stamps else None
            return StreamResult(rid, t_start, ttft, stamps)

        try:
            results, cpu, wall = await _measure(concurrency, n_requests, one)
        finally:
            await client.close()
        return LegResult(results, cpu, wall)

    return asyncio.run(run())


# -- optional leg: raw asyncio protocol ------------------------------------------------------


class _RawProtocol(asyncio.Protocol):
    """Keep-alive HTTP/1.1 on a bare asyncio protocol; stamps in `data_received`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.result: StreamResult | None = None
        self.done: asyncio.Future[StreamResult] | None = None
        self.buf = b""
        self.t_buf = 0
        self.saw_done = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        res = self.result
        if res is None or self.done is None:
            return
        if b"data:" not in self.buf:  # only chunk framing carried over: the event starts here
            self.t_buf = t
        self.buf += data
        *events, self.buf = self.buf.split(b"\n\n")
        for k, ev in enumerate(events):
            if _CONTENT.search(ev):
                res.stamps_ns.append(self.t_buf if k == 0 else t)
            elif ev.endswith(b"data: [DONE]"):
                self.saw_done = True
            elif not res.response_id and (m := _ID.search(ev)):
                res.response_id = m[1].decode()
        if self.buf:
            self.t_buf = t if events else self.t_buf
        if self.saw_done and self.buf.endswith(b"0\r\n\r\n"):  # end of the chunked body
            self.buf, self.saw_done, self.result = b"", False, None
            self.done.set_result(res)


def raw_leg(base_url: str, concurrency: int, n_requests: int) -> LegResult:
    """The floor for one Python process: asyncio protocol, no HTTP library, no pool."""
    host_port = base_url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    path = "/" + base_url.split("//", 1)[1].split("/", 1)[1] + "/chat/completions"

    def request_bytes(i: int) -> bytes:
        data = json.dumps(_chat_body(i)).encode()
        return (
            f"POST {path} HTTP/1.1\r\nHost: {host_port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode() + data

    async def run() -> LegResult:
        loop = asyncio.get_running_loop()
        free: asyncio.Queue[_RawProtocol] = asyncio.Queue()
        for _ in range(concurrency):
            _, proto = await loop.create_connection(_RawProtocol, host, int(port))
            free.put_nowait(proto)

        async def one(i: int) -> StreamResult:
            proto = await free.get()
            proto.done = loop.create_future()
            payload = request_bytes(i)
            t_start = time.perf_counter_ns()
            proto.result = StreamResult("", t_start, None, [])
            assert proto.transport is not None
            proto.transport.write(payload)
            res = await proto.done
            free.put_nowait(proto)
            if res.stamps_ns:
                res.ttft_ms = (res.stamps_ns[0] - t_start) / 1e6
            return res

        results, cpu, wall = await _measure(concurrency, n_requests, one)
        while not free.empty():
            p = free.get_nowait()
            if p.transport is not None:
                p.transport.close()
        return LegResult(results, cpu, wall)

    return asyncio.run(run())


def labkit_httpx_leg(base_url: str, concurrency: int, n_requests: int) -> LegResult:
    """labkit's wire path through httpx (`transport: httpx`) instead of the lean reader."""
    return labkit_leg(base_url, concurrency, n_requests, transport="httpx")


LEGS: dict[str, Leg] = {
    "labkit": labkit_leg,
    "labkit-httpx": labkit_httpx_leg,
    "bare": bare_leg,
    "sdk": sdk_leg,
    "labkit-sdk": labkit_sdk_leg,
    "raw": raw_leg,
    "labkit-run": _runner_leg(1),
    "labkit-procs": _runner_leg("auto"),
}
DEFAULT_CLIENTS = [
    "labkit",
    "labkit-httpx",
    "bare",
    "sdk",
    "labkit-sdk",
    "raw",
    "labkit-run",
    "labkit-procs",
]

# -- figures --------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _dist(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": _pct(values, 50),
        "p99": _pct(values, 99),
        "max": max(values) if values else None,
        "n": len(values),
    }


@dataclass
class Accum:
    """One client's streams at one level, pooled over rounds, matched to the server."""

    event_err_ms: list[float] = field(default_factory=list)
    ttft_err_ms: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    true_ttft_ms: list[float] = field(default_factory=list)
    server_ttft_ms: list[float] = field(default_factory=list)
    request_path_ms: list[float] = field(default_factory=list)
    over_server_ms: list[float] = field(default_factory=list)
    request_sent_ms: list[float] = field(default_factory=list)
    loop_lag_ms: list[float] = field(default_factory=list)
    record_worst_ms: list[tuple[float, float | None]] = field(default_factory=list)
    events: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    unmatched: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, leg: LegResult, server: dict[str, Any]) -> None:
        self.cpu_s += leg.cpu_s
        self.wall_s += leg.wall_s
        self.errors += leg.errors
        for s in leg.streams:
            truth = server.get(s.response_id)
            if truth is None or len(truth["sends"]) != len(s.stamps_ns) or not s.stamps_ns:
                self.unmatched += 1
                continue
            sends = truth["sends"]
            errs = [(c - t) / 1e6 for c, t in zip(s.stamps_ns, sends, strict=True)]
            self.event_err_ms += errs
            self.events += len(errs)
            true_ttft = (sends[0] - s.t_start_ns) / 1e6
            self.true_ttft_ms.append(true_ttft)
            server_ttft = (sends[0] - truth["t_recv"]) / 1e6
            self.server_ttft_ms.append(server_ttft)
            self.request_path_ms.append((truth["t_recv"] - s.t_start_ns) / 1e6)
            if s.ttft_ms is not None:
                self.ttft_ms.append(s.ttft_ms)
                self.ttft_err_ms.append(s.ttft_ms - true_ttft)
                self.over_server_ms.append(s.ttft_ms - server_ttft)
            if s.loop_lag_ms is not None:
                self.loop_lag_ms.append(s.loop_lag_ms)
            if s.request_sent_ms is not None:
                self.request_sent_ms.append(s.request_sent_ms)
            self.record_worst_ms.append((max(errs), s.loop_lag_ms))

    def figures(self) -> dict[str, Any]:
        unflagged = sum(
            1
            for worst, lag in self.record_worst_ms
            if worst > STAMP_P99_TARGET_MS and (lag is None or lag < STAMP_P99_TARGET_MS)
        )
        return {
            "event_err_ms": _dist(self.event_err_ms),
            "ttft_err_ms": _dist(self.ttft_err_ms),
            "ttft_ms": _dist(self.ttft_ms),
            "true_ttft_ms": _dist(self.true_ttft_ms),
            "server_ttft_ms": _dist(self.server_ttft_ms),
            "request_path_ms": _dist(self.request_path_ms),
            "ttft_over_server_ms": _dist(self.over_server_ms),
            "request_sent_ms": _dist(self.request_sent_ms),
            "loop_lag_ms": _dist(self.loop_lag_ms) if self.loop_lag_ms else None,
            "events": self.events,
            "events_per_s": self.events / self.wall_s if self.wall_s else None,
            "cpu_ms_per_1k_events": 1e6 * self.cpu_s / self.events if self.events else None,
            "cpu_share_of_one_core": self.cpu_s / self.wall_s if self.wall_s else None,
            "streams": len(self.record_worst_ms),
            "unmatched_streams": self.unmatched,
            "records_over_3ms_unflagged": unflagged if self.loop_lag_ms else None,
            "errors": self.errors[:5],
        }


def _f(x: float | None, spec: str = "7.2f") -> str:
    return format(x, spec) if x is not None else "    -".rjust(int(spec.split(".")[0]))


def print_level(level: int, figs: dict[str, dict[str, Any]], server_info: dict[str, Any]) -> None:
    """The two tables of one level: errors, then cost; one row per client."""
    print(
        f"\n== {level} stream(s) in flight  (server: wake-up late p50/p99 "
        f"{_f(server_info['late_p50'], '.3f')}/{_f(server_info['late_p99'], '.3f')} ms, "
        f"stalled writes {server_info['stalls']})"
    )
    print(
        "  client      |  stamp error ms          |  TTFT error ms           |"
        "  TTFT ms p50           | req path | TTFT - srv TTFT"
    )
    print(
        "              |    p50     p99     max   |    p50     p99     max   |"
        "  client   true    srv  |   p50    |   p50     p99"
    )
    for name, f in figs.items():
        ev, tt, over = f["event_err_ms"], f["ttft_err_ms"], f["ttft_over_server_ms"]
        print(
            f"  {name:<11} | {_f(ev['p50'], '7.3f')} {_f(ev['p99'], '7.3f')}"
            f" {_f(ev['max'], '7.2f')}"
            f"   | {_f(tt['p50'], '7.3f')} {_f(tt['p99'], '7.3f')} {_f(tt['max'], '7.2f')}   |"
            f" {_f(f['ttft_ms']['p50'], '7.2f')} {_f(f['true_ttft_ms']['p50'], '6.2f')}"
            f" {_f(f['server_ttft_ms']['p50'], '6.2f')}  |"
            f" {_f(f['request_path_ms']['p50'], '7.2f')}"
            f"  | {_f(over['p50'], '6.2f')} {_f(over['p99'], '7.2f')}"
        )
    print(
        "  client      | events   ev/s | CPU ms/1k ev  x bare | CPU/wall |"
        " loop_lag ms p50   p99 | req sent ms p50 | rec >3 ms, own lag <3"
    )
    bare = figs.get("bare")
    bare_cpu = bare["cpu_ms_per_1k_events"] if bare else None
    for name, f in figs.items():
        cpu = f["cpu_ms_per_1k_events"]
        lag = f["loop_lag_ms"] or {}
        unflagged = f["records_over_3ms_unflagged"]
        print(
            f"  {name:<11} | {f['events']:6d} {_f(f['events_per_s'], '6.0f')} |"
            f"      {_f(cpu, '7.1f')} {_f(_ratio(cpu, bare_cpu), '6.2f')} |"
            f"  {_f(f['cpu_share_of_one_core'], '6.2f')}  |"
            f"         {_f(lag.get('p50'), '6.2f')} {_f(lag.get('p99'), '6.2f')} |"
            f"         {_f(f['request_sent_ms']['p50'], '6.2f')} |"
            + (f" {unflagged}/{f['streams']}" if unflagged is not None else "  -")
        )
        if f["unmatched_streams"] or f["errors"]:
            print(f"    ! {f['unmatched_streams']} unmatched streams; errors: {f['errors']}")
    if bare:
        for name, f in figs.items():
            if name == "bare":
                continue
            ratios = {
                "stamp p50": _ratio(f["event_err_ms"]["p50"], bare["event_err_ms"]["p50"]),
                "stamp p99": _ratio(f["event_err_ms"]["p99"], bare["event_err_ms"]["p99"]),
                "TTFT err p50": _ratio(f["ttft_err_ms"]["p50"], bare["ttft_err_ms"]["p50"]),
                "CPU/event": _ratio(f["cpu_ms_per_1k_events"], bare["cpu_ms_per_1k_events"]),
            }
            text = "  ".join(f"{k} {_f(v, '.2f')}x" for k, v in ratios.items())
            print(f"  {name + '/bare:':<17} {text}")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def verdicts(results: dict[int, dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """(target, passed, detail) for each of the issue's figures that this run covers."""
    out: list[tuple[str, bool | None, str]] = []

    def lab(level: int) -> dict[str, Any] | None:
        r = results.get(level, {}).get("clients", {})
        return r.get("labkit")

    one = lab(1)
    if one:
        ev, tt = one["event_err_ms"], one["ttft_err_ms"]
        out.append(
            ("1 stream: stamp error p50 <= 0.3 ms", _le(ev["p50"], 0.3), f"{_f(ev['p50'], '.3f')}")
        )
        out.append(
            ("1 stream: stamp error p99 <= 1 ms", _le(ev["p99"], 1.0), f"{_f(ev['p99'], '.3f')}")
        )
        out.append(
            (
                "1 stream: TTFT error <= 1 ms (p99)",
                _le(tt["p99"], 1.0),
                f"p50 {_f(tt['p50'], '.3f')}, p99 {_f(tt['p99'], '.3f')}, "
                f"max {_f(tt['max'], '.3f')} over {tt['n']} requests",
            )
        )
        over = one["ttft_over_server_ms"]
        out.append(
            (
                "1 stream (strict reading): TTFT over the server's own TTFT <= 1 ms (p99)",
                _le(over["p99"], 1.0),
                f"p50 {_f(over['p50'], '.3f')}, p99 {_f(over['p99'], '.3f')} "
                f"(request path p50 {_f(one['request_path_ms']['p50'], '.3f')} ms included)",
            )
        )
    for level in sorted(results):
        f = lab(level)
        if not f or level < 8:
            continue
        tt, ev = f["ttft_err_ms"]["p50"], f["event_err_ms"]["p99"]
        met = _le(tt, TTFT_LOAD_TARGET_MS) and _le(ev, STAMP_P99_TARGET_MS)
        lag = (f["loop_lag_ms"] or {}).get("p50")
        flagged = lag is not None and lag > CLIENT_BOUND_LAG_MS
        unflagged = f["records_over_3ms_unflagged"]
        detail = (
            f"TTFT err p50 {_f(tt, '.3f')} ms, stamp p99 {_f(ev, '.3f')} ms; loop_lag p50 "
            f"{_f(lag, '.2f')} ms -> {'flagged client-bound' if flagged else 'not flagged'}; "
            f"records > 3 ms with own loop_lag < 3 ms: {unflagged}/{f['streams']}"
        )
        ok = met or flagged
        label = (
            f"{level} streams: TTFT p50 err <= 1 ms and stamp p99 <= 3 ms, "
            "or flagged client-bound (no silent error)"
        )
        out.append((label, ok, ("met; " if met else "missed; ") + detail))
    for level in sorted(results):
        clients = results[level]["clients"]
        if "labkit" in clients and "bare" in clients:
            r = _ratio(
                clients["labkit"]["cpu_ms_per_1k_events"], clients["bare"]["cpu_ms_per_1k_events"]
            )
            out.append(
                (
                    f"{level} stream(s): CPU/event labkit <= 1.5x bare",
                    _le(r, CPU_RATIO_TARGET),
                    f"{_f(r, '.2f')}x",
                )
            )
    return out


def _le(x: float | None, limit: float) -> bool | None:
    return None if x is None else x <= limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels, comma-separated")
    parser.add_argument(
        "--requests-per-level",
        type=int,
        default=0,
        help="measured requests per client, level and round (default max(16, 2 x level))",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds per level (order alternates)")
    parser.add_argument(
        "--clients",
        default=",".join(DEFAULT_CLIENTS),
        help="comma-separated, from " + ",".join(LEGS),
    )
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--json", type=Path, default=None, help="write every figure as JSON")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(LEGS)
    if unknown:
        parser.error(f"unknown clients: {sorted(unknown)}")

    print(
        f"scripted server (own process) on 127.0.0.1: first token {args.ttft_ms:g} ms, "
        f"{args.tokens} tokens at {args.interval_ms:g} ms; clients {', '.join(clients)}; "
        f"{args.rounds} round(s) per level, order alternating"
    )
    results: dict[int, dict[str, Any]] = {}
    with ScriptedServer(
        ttft_ms=args.ttft_ms, interval_ms=args.interval_ms, tokens=args.tokens
    ) as srv:
        for name in clients:  # warm-up: imports, first connections, lazy initialisation
            LEGS[name](srv.base_url, 1, 1)
        srv.stamps()
        for level in levels:
            n = args.requests_per_level or max(16, 2 * level)
            acc = {name: Accum() for name in clients}
            late50: list[float] = []
            late99: list[float] = []
            stalls = 0
            for rnd in range(args.rounds):
                order = clients if rnd % 2 == 0 else clients[::-1]
                for name in order:
                    leg = LEGS[name](srv.base_url, level, n)
                    server = srv.stamps()
                    acc[name].add(leg, server["streams"])
                    stalls += server["stalls"]
                    late = server["late_wakeups_ms"]
                    if late["p50"] is not None:
                        late50.append(late["p50"])
                        late99.append(late["p99"])
            figs = {name: acc[name].figures() for name in clients}
            info = {
                "late_p50": max(late50) if late50 else None,
                "late_p99": max(late99) if late99 else None,
                "stalls": stalls,
            }
            results[level] = {"requests_per_round": n, "server": info, "clients": figs}
            print_level(level, figs, info)

    print(
        f"\nscripted TTFT {args.ttft_ms:g} ms. TTFT error = client TTFT - true TTFT (first send "
        "- client t_start). srv = the server's own first send - t_recv. req path = t_recv - "
        "client t_start (request build, pool, write, loopback, server read). TTFT - srv TTFT = "
        "what the client reports over the server's own TTFT (TTFT error + req path). CPU/wall = "
        "share of one core this process used (near 1: client-bound). req sent = labkit's own "
        "client.request_sent_ms (request written, from httpcore's trace)."
    )
    print("\ntargets (labkit's wire path):")
    checks = verdicts(results)
    for label, ok, detail in checks:
        word = "PASS" if ok else ("MISS" if ok is not None else "N/A ")
        print(f"  {word}  {label}: {detail}")
    if args.json:
        payload = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "levels": results,
            "targets": [{"target": t, "pass": ok, "detail": d} for t, ok, d in checks],
        }
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    main()
