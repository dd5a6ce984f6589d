"""A load level's connections on real sockets: opened before the level's clock, and a
connection a request still needs opened outside its TTFT (`connections: warm`), or inside
it (`connections: cold`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.records import RequestRecord
from labkit.runner import RunOptions, prepare_run
from tests.providers.streams import chat, oa_usage, openai_events
from tests.support.misbehaving import next_request

pytestmark = pytest.mark.integration

_TOKENS = 4
_FIRST_TOKEN_S = 0.03
_INTERVAL_S = 0.002


class CountingServer:
    """An OpenAI-style stream server on 127.0.0.1 that stamps every connection it accepts
    and every request it reads (`perf_counter_ns`, the records' clock). `closes`: it says
    `connection: close` and closes after every response, as llama-server does."""

    def __init__(self, *, closes: bool = False) -> None:
        self.closes = closes
        self.connects: list[int] = []
        self.requests: list[int] = []
        self.paths: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CountingServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connects.append(time.perf_counter_ns())
        try:
            while True:
                head = await next_request(reader)
                self.requests.append(time.perf_counter_ns())
                self.paths.append(head.split(b" ", 2)[1])
                await self._stream(writer)
                if self.closes:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        close = b"connection: close\r\n" if self.closes else b""
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n" + close + b"\r\n"
        )
        await asyncio.sleep(_FIRST_TOKEN_S)
        tokens = [f"t{i}" for i in range(_TOKENS)]
        for event in openai_events(tokens, usage=oa_usage(5, _TOKENS)):
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(_INTERVAL_S)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _run(
    tmp_path: Path, *, closes: bool = False, **experiment: Any
) -> tuple[list[RequestRecord], CountingServer]:
    async def main() -> tuple[list[RequestRecord], CountingServer]:
        async with CountingServer(closes=closes) as server:
            config = parse_config(
                {
                    "name": "conns",
                    "providers": [
                        {
                            "id": "s",
                            "kind": "openai_compatible",
                            "model": "m",
                            "base_url": server.base_url,
                        }
                    ],
                    "experiments": [
                        {
                            "kind": "load",
                            "concurrency": [8],
                            "requests": 16,
                            "warmup": 1,
                            "workers": 1,
                            **experiment,
                        }
                    ],
                }
            )
            result = await prepare_run(config, RunOptions(out_dir=tmp_path)).run()
            assert result.status == "completed"
            return [r for r in result.records if not r.warmup], server

    return asyncio.run(main())


def test_a_warm_level_opens_its_connections_before_its_clock(tmp_path: Path) -> None:
    records, server = _run(tmp_path)
    assert len(records) == 16 and all(r.error is None for r in records)
    first_start = min(r.t_start_mono_ns or 0 for r in records)
    # One connection for the warm-up; the level's 8 streams find 8 open before the first
    # measured request starts, and none opens one of its own.
    assert len(server.connects) == 8
    assert all(t < first_start for t in server.connects)
    assert [r.client.new_connection for r in records] == [False] * 16
    assert all(r.client.connect_ms is None for r in records)


def test_a_server_closing_each_connection_puts_every_connect_outside_ttft(
    tmp_path: Path,
) -> None:
    records, server = _run(tmp_path, closes=True)
    assert len(records) == 16 and all(r.error is None for r in records)
    first_start = min(r.t_start_mono_ns or 0 for r in records)
    first_wave = sorted(records, key=lambda r: r.t_start_mono_ns or 0)[:8]
    later = [r for r in records if r not in first_wave]
    # The first wave takes the connections opened before the level; every later request
    # finds its stream's connection closed and opens a new one before its own t_start.
    assert [r.client.new_connection for r in first_wave] == [False] * 8
    assert [r.client.new_connection for r in later] == [True] * 8
    for r in later:
        assert r.client.connect_ms is not None and r.client.connect_ms > 0
        assert r.tags["connected_before_start"] is True
        # The connection was up before t_start: no connect inside the request's clock.
        assert r.client.request_sent_ms is not None
    # The warm-up's connection (closed after it), then the level's 8.
    assert sum(1 for t in server.connects if t < first_start) == 9
    # Each request reached the server after its own t_start (the connect came before it).
    starts = sorted(r.t_start_mono_ns or 0 for r in records)
    assert len(server.requests) == 17  # the warm-up, then the level
    assert all(t >= s for t, s in zip(sorted(server.requests)[1:], starts, strict=True))


def test_a_cold_level_connects_inside_each_requests_clock(tmp_path: Path) -> None:
    records, server = _run(tmp_path, connections="cold")
    assert len(records) == 16 and all(r.error is None for r in records)
    first_start = min(r.t_start_mono_ns or 0 for r in records)
    # Nothing is opened ahead: the warm-up's connection is the only one before the level.
    assert sum(1 for t in server.connects if t < first_start) == 1
    opened = [r for r in records if r.client.new_connection]
    assert len(opened) >= 15  # the first request may take the warm-up's kept connection
    for r in opened:
        assert "connected_before_start" not in r.tags
        assert r.client.connect_ms is not None
        assert r.client.connect_ms <= r.client.ttft_ms  # type: ignore[operator]


def test_worker_processes_open_their_streams_connections_before_the_clock(
    tmp_path: Path,
) -> None:
    records, server = _run(tmp_path, workers=2)
    assert len(records) == 16 and all(r.error is None for r in records)
    assert {r.tags["workers"] for r in records} == {"2"}
    assert [r.client.new_connection for r in records] == [False] * 16
    # The runner's warm-up, each worker's, and each worker's four streams less the one its
    # warm-up left open.
    assert len(server.connects) == 1 + 2 + 2 * 3


def test_httpx_clients_are_warmed_with_the_providers_cheap_request() -> None:
    async def main() -> tuple[list[RequestRecord], CountingServer]:
        async with CountingServer() as server:
            cls = provider_class("llamacpp")
            settings = cls.settings_model.model_validate(
                {
                    "id": "l",
                    "kind": "llamacpp",
                    "model": "m",
                    "base_url": server.base_url.removesuffix("/v1"),
                    "transport": "httpx",
                }
            )
            provider = cls(settings, pool_size=4)
            recorder = StreamRecorder()
            ctx = RecordContext(run_id="r", experiment="e")
            try:
                await provider.connections.preconnect(4)
                opened = len(server.connects)
                records = await asyncio.gather(
                    *(recorder.record(provider, chat(), ctx) for _ in range(4))
                )
            finally:
                await provider.aclose()
            assert opened == 4
            return list(records), server

    records, server = asyncio.run(main())
    assert server.paths[:4] == [b"/health"] * 4
    assert len(server.connects) == 4  # the four requests went out on the warmed clients
    assert all(r.error is None for r in records)
    assert [r.client.new_connection for r in records] == [False] * 4


def test_an_open_loop_pre_opens_what_its_first_second_of_arrivals_takes(
    tmp_path: Path,
) -> None:
    # 16 arrivals at 20 req/s: 16 in the first second, up to 8 in flight at once.
    records, server = _run(
        tmp_path, concurrency=None, rate=[20], arrival="constant", max_concurrency=8
    )
    assert len(records) == 16 and all(r.error is None for r in records)
    first_start = min(r.t_start_mono_ns or 0 for r in records)
    assert sum(1 for t in server.connects if t < first_start) == 8  # capped at 8 in flight
    assert [r.client.new_connection for r in records] == [False] * 16
