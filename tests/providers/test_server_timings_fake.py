"""The fake server (the truth server, in its own process) emits each server's timing shape
over a real socket on 127.0.0.1, and labkit reads back exactly what the schedule scripted and
the truth log says was reported, on the wire path and the SDK path."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import provider_class
from labkit.providers.fake import FakeSchedule
from labkit.records import RequestRecord
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat

pytestmark = pytest.mark.integration

QUEUE_MS, FIRST_MS, STEP_MS, TOKENS = 30.0, 20.0, 5.0, 5
DECODE_MS = (TOKENS - 1) * STEP_MS
TOTAL_MS = QUEUE_MS + FIRST_MS + DECODE_MS


def _schedule(shape: str) -> FakeSchedule:
    return FakeSchedule(
        first_token_ms=FIRST_MS,
        token_interval_ms=STEP_MS,
        tokens=TOKENS,
        server_timings=shape,  # type: ignore[arg-type]
        queue_ms=QUEUE_MS,
        keepalive_ms=10.0,
    )


def record(shape: str, path: str = "wire", kind: str = "openai_compatible", **extra: Any):
    """One request to a fake server emitting `shape`."""
    return served(shape, path, kind, **extra)[0]


def served(
    shape: str, path: str = "wire", kind: str = "openai_compatible", **extra: Any
) -> tuple[RequestRecord, TruthRequest]:
    """One request to a fake server emitting `shape`: the record and the truth log's line."""

    async def go() -> RequestRecord:
        with TruthServer.of(_schedule(shape), truth_log=log) as server:
            cls = provider_class(kind)
            base = server.base_url.removesuffix("/v1") if kind == "llamacpp" else server.base_url
            settings = {"id": "fake", "kind": kind, "model": "fake", "base_url": base, **extra}
            provider = cls(cls.settings_model.model_validate(settings))
            recorder = StreamRecorder() if path == "wire" else SDKRecorder()
            try:
                return await recorder.record(
                    provider, chat(max_tokens=64), RecordContext(run_id="t", experiment="t")
                )
            finally:
                if isinstance(recorder, SDKRecorder):
                    await recorder.aclose()
                await provider.aclose()

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "truth.jsonl"
        rec = asyncio.run(go())
        (truth,) = read_truth_log(log).requests
    assert rec.error is None, rec.error
    assert rec.usage.output_tokens == TOKENS
    assert truth.id == rec.response_id and truth.output_tokens == TOKENS
    return rec, truth


PATHS = ["wire", "sdk"]


@pytest.mark.parametrize(
    ("shape", "key"), [("cerebras", "time_info"), ("vllm", "metrics"), ("llamacpp", "timings")]
)
def test_the_timings_read_back_are_those_the_truth_log_says_were_sent(shape: str, key: str) -> None:
    rec, truth = served(shape)
    assert truth.reported is not None
    assert rec.provider_timings.raw == truth.reported["fields"][key]
    assert truth.queue_ms == QUEUE_MS and truth.prefill_ms == FIRST_MS
    assert truth.decode_ms == DECODE_MS


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", ["groq", "cerebras"])
def test_seconds_split_reads_back_queue_prefill_decode_total(shape: str, path: str) -> None:
    pt = record(shape, path).provider_timings
    assert pt.source == shape
    assert pt.queue_ms == pytest.approx(QUEUE_MS)
    assert pt.prefill_ms == pytest.approx(FIRST_MS)
    assert pt.decode_ms == pytest.approx(DECODE_MS)
    assert pt.server_total_ms == pytest.approx(TOTAL_MS)


@pytest.mark.parametrize("path", PATHS)
def test_vllm_metrics_read_back(path: str) -> None:
    pt = record("vllm", path).provider_timings
    assert (pt.source, pt.queue_ms, pt.server_ttft_ms) == ("vllm", QUEUE_MS, FIRST_MS)
    assert (pt.decode_ms, pt.decode_ms_per_token) == (DECODE_MS, STEP_MS)
    assert pt.server_output_tokens_per_s == pytest.approx(1000 * (TOKENS - 1) / DECODE_MS)


@pytest.mark.parametrize("path", PATHS)
def test_fireworks_header_and_perf_metrics_read_back(path: str) -> None:
    rec = record("fireworks", path, server="fireworks")
    pt = rec.provider_timings
    assert rec.params["perf_metrics_in_response"] is True  # the hint asks for them
    assert pt.source == "fireworks"
    assert pt.server_ttft_ms == pytest.approx(FIRST_MS)
    assert pt.server_total_ms == pytest.approx(TOTAL_MS)
    assert pt.raw is not None and set(pt.raw) == {"headers", "perf_metrics"}


@pytest.mark.parametrize("path", PATHS)
def test_tgi_headers_read_back(path: str) -> None:
    pt = record("tgi", path).provider_timings
    assert pt.source == "tgi"
    assert (pt.queue_ms, pt.server_total_ms) == (QUEUE_MS, TOTAL_MS)
    assert pt.inference_ms == FIRST_MS + DECODE_MS
    assert pt.decode_ms_per_token == STEP_MS


@pytest.mark.parametrize("kind", ["llamacpp", "openai_compatible"])
@pytest.mark.parametrize("path", PATHS)
def test_llamacpp_per_token_timings_read_back(kind: str, path: str) -> None:
    rec = record("llamacpp", path, kind=kind)
    pt = rec.provider_timings
    assert pt.source == "llamacpp"
    assert (pt.prefill_ms, pt.decode_ms, pt.decode_ms_per_token) == (FIRST_MS, DECODE_MS, STEP_MS)
    assert pt.raw is not None and pt.raw["predicted_n"] == TOKENS
    assert pt.queue_ms is None  # llama.cpp's timings have no queue field


def test_deepseek_keepalives_count_the_wait_before_the_first_event() -> None:
    rec = record("deepseek")
    pt, client = rec.provider_timings, rec.client
    assert pt.keepalive_comments is not None and pt.keepalive_comments >= 2
    assert pt.keepalive_last_ms is not None and client.headers_ms is not None
    assert client.first_event_ms is not None
    # The comments arrive after the headers and before the first event, which waited the
    # scripted queue after the headers.
    assert client.headers_ms <= pt.keepalive_last_ms <= client.first_event_ms
    # The server waits the queue, then the first token's delay, after the request came: a
    # floor (a sleep never returns early), whatever the host adds.
    assert client.first_event_ms >= QUEUE_MS + FIRST_MS


def test_the_queue_delays_the_first_byte_and_ttft_holds_queue_and_prefill() -> None:
    rec = record("groq")
    # Floors, as a sleep never returns early: the headers after the queue, the first token
    # after the queue and its own delay.
    assert rec.client.headers_ms is not None and rec.client.headers_ms >= QUEUE_MS
    assert rec.client.ttft_ms is not None
    assert rec.client.ttft_ms >= QUEUE_MS + FIRST_MS


def test_a_forced_server_hint_reads_only_that_shape() -> None:
    pt = record("cerebras", server="vllm").provider_timings
    assert pt.source is None and pt.queue_ms is None and pt.prefill_ms is None
