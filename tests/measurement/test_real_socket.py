"""labkit against a known schedule over real loopback sockets (`labkit.fakeserver`).

The fake server sends token 1 at `first_token_ms` and one more every `token_interval_ms`
(absolute times from when it starts answering, so delays do not accumulate). Measured
TTFT and decode ms/token must land within a stated tolerance of the schedule, and the
connection phases must be present (real sockets emit httpcore trace events; mocks do not).

Run with ``-s`` to see the measured errors.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.providers.fake import FakeSchedule
from labkit.records import ErrorKind, RequestRecord
from labkit.truth.process import TruthServer
from tests.providers.streams import chat

pytestmark = pytest.mark.integration

FIRST_MS = 80.0
STEP_MS = 20.0
TOKENS = 32
RUNS = 5
# Margins: the fake server's sleeps wake late by a few ms when the 2 shared cores are busy, and
# client stamps add a loop turn; medians over RUNS absorb one slow run, the max bounds outliers.
TTFT_TOL_MS = 15.0  # median over the runs of |ttft - 80| < 15 ms
TTFT_MAX_MS = 40.0  # and no single run further off than this (a busy 2-core CI box)
DECODE_TOL = 0.10  # decode ms/token within 10 % of 20 ms (late wake-ups cancel over 31 gaps)

SCHEDULE = FakeSchedule(first_token_ms=FIRST_MS, token_interval_ms=STEP_MS, tokens=TOKENS)


def compat_provider(base_url: str, **settings: object):
    cls = provider_class("openai_compatible")
    data = {"id": "local", "kind": "openai_compatible", "model": "fake", "base_url": base_url}
    return cls(cls.settings_model.model_validate({**data, **settings}))


async def measure(
    schedule: FakeSchedule, runs: int, warmup: int = 0, **settings: object
) -> list[RequestRecord]:
    """`runs` requests, each on a fresh provider (a fresh TCP connection); the first
    `warmup` are dropped (the first connection of a process pays for lazy imports)."""
    records = []
    with TruthServer.of(schedule) as server:
        for i in range(warmup + runs):
            provider = compat_provider(server.base_url, **settings)
            try:
                records.append(
                    await StreamRecorder().record(
                        provider, chat(), RecordContext(run_id="sock", experiment="t", trial=i)
                    )
                )
            finally:
                await provider.aclose()
    return records[warmup:]


def errors(records: list[RequestRecord]) -> tuple[float, float]:
    ttft_err = statistics.median(abs(r.client.ttft_ms - FIRST_MS) for r in records)
    decode_err = statistics.median(
        abs(r.client.decode_ms_per_token - STEP_MS) / STEP_MS for r in records
    )
    return ttft_err, decode_err


def check_schedule(records: list[RequestRecord], label: str) -> None:
    for r in records:
        c = r.client
        assert r.error is None, r.error
        assert r.usage.output_tokens == TOKENS and r.usage.output_tokens_source == "provider"
        assert len(c.event_offsets_ms) == TOKENS
        assert abs(c.ttft_ms - FIRST_MS) < TTFT_MAX_MS, c.ttft_ms
        assert abs(c.decode_ms_per_token - STEP_MS) < DECODE_TOL * STEP_MS, c.decode_ms_per_token
        assert c.connect_ms is not None and c.connect_ms > 0
        assert c.tls_ms is None  # plain HTTP
        assert c.request_sent_ms is not None and c.headers_ms is not None
        assert c.connect_ms <= c.request_sent_ms <= c.headers_ms <= c.first_event_ms
        assert c.e2e_ms >= c.last_token_ms >= c.ttft_ms
        assert c.itl_ms_p50 == pytest.approx(STEP_MS, abs=STEP_MS * DECODE_TOL)
    ttft_err, decode_err = errors(records)
    assert ttft_err < TTFT_TOL_MS
    assert decode_err < DECODE_TOL
    # The server starts its schedule when it has read the request, about when the client
    # gets the headers: TTFT - headers_ms is the schedule seen without connection set-up.
    after_headers = statistics.median(
        abs(r.client.ttft_ms - r.client.headers_ms - FIRST_MS) for r in records
    )
    ttfts = [round(r.client.ttft_ms, 2) for r in records]
    decodes = [round(r.client.decode_ms_per_token, 3) for r in records]
    print(
        f"\n[{label}] schedule: first token {FIRST_MS:g} ms, {STEP_MS:g} ms/token, {TOKENS} tokens;"
        f" {len(records)} runs\n"
        f"[{label}] TTFT ms {ttfts} -> median |error| {ttft_err:.2f} ms"
        f" (TTFT - headers_ms: median |error| {after_headers:.2f} ms)\n"
        f"[{label}] decode ms/token {decodes} -> median |error| {decode_err * 100:.2f} %"
        f" ({decode_err * STEP_MS:.3f} ms/token)"
    )


def test_recorder_measures_the_schedule_over_real_sockets() -> None:
    records = asyncio.run(measure(SCHEDULE, RUNS, warmup=1))
    check_schedule(records, "recorder")


def test_pooled_connection_has_no_connect_phase() -> None:
    async def go() -> list[RequestRecord]:
        quick = FakeSchedule(first_token_ms=5, token_interval_ms=1, tokens=4)
        with TruthServer.of(quick) as server:
            provider = compat_provider(server.base_url)
            try:
                recorder = StreamRecorder()
                ctx = RecordContext(run_id="sock", experiment="t")
                return [await recorder.record(provider, chat(), ctx) for _ in range(2)]
            finally:
                await provider.aclose()

    first, second = asyncio.run(go())
    assert first.error is None and second.error is None
    assert first.client.connect_ms is not None
    assert second.client.connect_ms is None  # reused from the pool: null, never 0
    assert second.client.request_sent_ms is not None and second.client.headers_ms is not None


def test_read_timeout_on_a_stalled_stream() -> None:
    # Headers come at once; the first token only after 600 ms; reads time out after 100 ms.
    stall = FakeSchedule(first_token_ms=600, token_interval_ms=1, tokens=3)
    (rec,) = asyncio.run(measure(stall, 1, timeouts={"read": 0.1}))
    assert rec.error is not None and rec.error.kind == ErrorKind.TIMEOUT
    assert "ReadTimeout" in rec.error.message
    assert rec.client.headers_ms is not None and rec.client.connect_ms is not None
    assert rec.client.ttft_ms is None


def test_real_drop_mid_stream_and_real_http_error() -> None:
    drop = FakeSchedule(
        first_token_ms=1, token_interval_ms=1, tokens=10, fail="drop", fail_after_tokens=3
    )
    (rec,) = asyncio.run(measure(drop, 1))
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    assert len(rec.client.event_offsets_ms) == 3 and rec.client.e2e_ms is None
    status = FakeSchedule(fail="http_status", fail_status=429, retry_after_s=2)
    (rec,) = asyncio.run(measure(status, 1))
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert rec.error.status == 429 and rec.error.retry_after_s == 2.0


@pytest.fixture
def server_thread() -> Iterator[TruthServer]:
    """The fake server in its own process (for the CLI case)."""
    with TruthServer.of(SCHEDULE) as server:
        yield server


def test_cli_against_the_fake_server(tmp_path: Path, server_thread: TruthServer) -> None:
    cfg = tmp_path / "sock.yaml"
    cfg.write_text(
        "name: sock\n"
        "providers:\n"
        "  - id: local\n"
        "    kind: openai_compatible\n"
        f"    base_url: {server_thread.base_url}\n"
        "    model: fake\n"
        "experiments:\n"
        "  - kind: single\n"
        "    prompt_cache: as_sent\n"
        "    prompts: ['Explain what a token is.']\n"
        "    repeats: 3\n"
        "    warmup: 1\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path), "--no-report"])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    lines = (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
    records = [RequestRecord.from_json_line(x) for x in lines]
    assert [r.warmup for r in records] == [True, False, False, False]
    measured = [r for r in records if not r.warmup]
    # The runner reuses its connection after the warm-up: TTFT/decode still match.
    for r in measured:
        assert r.error is None
        assert abs(r.client.ttft_ms - FIRST_MS) < TTFT_MAX_MS
        assert abs(r.client.decode_ms_per_token - STEP_MS) < DECODE_TOL * STEP_MS
        assert r.client.headers_ms is not None and r.client.request_sent_ms is not None
    assert records[0].client.connect_ms is not None  # the warm-up opened the connection
    ttft_err, decode_err = errors(measured)
    assert ttft_err < TTFT_TOL_MS and decode_err < DECODE_TOL
    print(
        f"\n[cli] TTFT median |error| {ttft_err:.2f} ms, decode median |error| "
        f"{decode_err * 100:.2f} % over {len(measured)} runs"
    )
