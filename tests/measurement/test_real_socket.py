"""labkit over real loopback sockets, against the truth server (`labkit.truth`, a process of
its own that logs when it really sent every event; `TruthServer.of` a fake schedule for its
faults).

The truth server sends token 1 `FIRST_MS` after it has read the request, then one every
`STEP_MS`. What is asserted holds on any host, busy or idle: the record's shape (every token,
every connection phase: real sockets emit httpcore trace events, mocks do not), its phases in
order, and its agreement with the truth log on one clock (each stamp no earlier than the send it
stamps: `tests.support.truth`). How close labkit's TTFT and stamps come to the truth depends on
the host; the test prints it, and `make bench-load` measures it (`benchmarks/bench_load.py`).

Run with ``-s`` to see the measured errors.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.providers.fake import FakeSchedule
from labkit.records import ErrorKind, RequestRecord
from labkit.truth.log import TruthLog, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat
from tests.support.truth import assert_agrees_with_truth

pytestmark = pytest.mark.integration

FIRST_MS = 80.0
STEP_MS = 20.0
TOKENS = 32
RUNS = 5


def compat_provider(base_url: str, **settings: object):
    cls = provider_class("openai_compatible")
    data = {"id": "local", "kind": "openai_compatible", "model": "fake", "base_url": base_url}
    return cls(cls.settings_model.model_validate({**data, **settings}))


async def measure_at(
    base_url: str, runs: int, warmup: int = 0, **settings: object
) -> list[RequestRecord]:
    """`runs` requests to `base_url`, each on a fresh provider (a fresh TCP connection); the
    first `warmup` are dropped (the first connection of a process pays for lazy imports)."""
    records = []
    for i in range(warmup + runs):
        provider = compat_provider(base_url, **settings)
        try:
            records.append(
                await StreamRecorder().record(
                    provider, chat(), RecordContext(run_id="sock", experiment="t", trial=i)
                )
            )
        finally:
            await provider.aclose()
    return records[warmup:]


async def measure(
    schedule: FakeSchedule, runs: int, warmup: int = 0, **settings: object
) -> list[RequestRecord]:
    """`measure_at` the truth server following `schedule`."""
    with TruthServer.of(schedule) as server:
        return await measure_at(server.base_url, runs, warmup, **settings)


def check_schedule(records: list[RequestRecord], truth: TruthLog, label: str) -> None:
    """Each record whole, its phases in order, and in agreement with the truth log."""
    for r in records:
        c = r.client
        assert r.error is None, r.error
        assert r.usage.output_tokens == TOKENS and r.usage.output_tokens_source == "provider"
        assert len(c.event_offsets_ms) == TOKENS
        assert c.tls_ms is None  # plain HTTP
        assert c.request_sent_ms is not None and c.headers_ms is not None
        assert c.ttft_ms is not None and c.last_token_ms is not None and c.e2e_ms is not None
        assert c.decode_ms_per_token is not None and c.itl_ms_p50 is not None
        assert c.connect_ms is not None and c.connect_ms > 0
        assert c.connect_ms <= c.request_sent_ms <= c.headers_ms <= c.first_event_ms
        assert c.e2e_ms >= c.last_token_ms >= c.ttft_ms
    served = assert_agrees_with_truth(records, truth)
    # The server never sends early: so labkit, which starts first, never sees TTFT under it.
    assert all(t.events_ns[0] - t.t_read_ns >= FIRST_MS * 1e6 for t in served)
    assert all(r.client.ttft_ms is not None and r.client.ttft_ms >= FIRST_MS for r in records)
    after_send_ms = statistics.median(
        ((r.t_start_mono_ns or 0) + (r.client.ttft_ms or 0) * 1e6 - t.events_ns[0]) / 1e6
        for r, t in zip(records, served, strict=True)
    )
    print(
        f"\n[{label}] first token {FIRST_MS:g} ms after the read, {STEP_MS:g} ms/token, "
        f"{TOKENS} tokens; {len(records)} runs\n"
        f"[{label}] TTFT ms {[round(r.client.ttft_ms or 0, 2) for r in records]}; labkit's "
        f"first-token stamp after the server's send: median {after_send_ms:.3f} ms\n"
        f"[{label}] decode ms/token "
        f"{[round(r.client.decode_ms_per_token or 0, 3) for r in records]}"
    )


def test_recorder_measures_the_schedule_over_real_sockets(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    with TruthServer(truth_log=log, ttft_ms=FIRST_MS, interval_ms=STEP_MS, tokens=TOKENS) as srv:
        records = asyncio.run(measure_at(srv.base_url, RUNS, warmup=1))
    check_schedule(records, read_truth_log(log), "recorder")


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


def test_cli_against_the_truth_server(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    with TruthServer(truth_log=log, ttft_ms=FIRST_MS, interval_ms=STEP_MS, tokens=TOKENS) as srv:
        cfg = tmp_path / "sock.yaml"
        cfg.write_text(
            "name: sock\n"
            "providers:\n"
            "  - id: local\n"
            "    kind: openai_compatible\n"
            f"    base_url: {srv.base_url}\n"
            "    model: fake\n"
            "experiments:\n"
            "  - kind: single\n"
            "    prompt_cache: as_sent\n"
            "    prompts: ['Explain what a token is.']\n"
            "    repeats: 3\n"
            "    warmup: 1\n",
            encoding="utf-8",
        )
        out = tmp_path / "runs"
        result = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    lines = (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
    records = [RequestRecord.from_json_line(x) for x in lines]
    assert [r.warmup for r in records] == [True, False, False, False]
    assert records[0].client.connect_ms is not None  # the warm-up opened the connection
    # The runner reuses its connection after the warm-up: no connect phase, the rest agrees.
    measured = records[1:]
    assert all(r.client.connect_ms is None for r in measured)
    assert all(r.client.headers_ms is not None and r.client.request_sent_ms for r in measured)
    assert_agrees_with_truth(records, read_truth_log(log))
    assert all(r.client.ttft_ms is not None and r.client.ttft_ms >= FIRST_MS for r in records)
