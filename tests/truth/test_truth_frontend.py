"""A front end the provider does not report: the fake server's `frontend_ms` holds a
request between its read and the server's clock starting, so what a client attributes to
"network and front end" (its TTFT less the server's own queue and TTFT) has a true value in
the truth log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import ErrorKind, RequestRecord
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

FRONTEND_MS, QUEUE_MS = 15.0, 5.0


def served(tmp_path: Path, **schedule: object) -> tuple[RequestRecord, TruthRequest]:
    log = tmp_path / "truth.jsonl"

    async def go() -> RequestRecord:
        with TruthServer(truth_log=log, **schedule) as server:
            provider = make_provider("openai_compatible", base_url=server.base_url)
            try:
                ctx = RecordContext(run_id="r", experiment="t")
                return await StreamRecorder().record(provider, chat(), ctx)
            finally:
                await provider.aclose()

    rec = asyncio.run(go())
    (truth,) = read_truth_log(log).requests
    return rec, truth


def test_the_front_end_is_logged_and_in_no_timing_the_server_reports(tmp_path: Path) -> None:
    rec, truth = served(
        tmp_path,
        first_token_ms=10,
        token_interval_ms=1,
        tokens=3,
        frontend_ms=FRONTEND_MS,
        queue_ms=QUEUE_MS,
        server_timings="vllm",
    )
    assert rec.error is None and truth.t_admit_ns is not None
    assert truth.frontend_ms == FRONTEND_MS
    assert truth.t_admit_ns - truth.t_read_ns == FRONTEND_MS * 1e6
    pt = rec.provider_timings
    assert pt.queue_ms == truth.queue_ms == QUEUE_MS
    assert pt.server_ttft_ms == truth.prefill_ms == 10
    # What the client cannot explain by the server's own account holds the front end (and
    # the request's way up, and the response's way down).
    assert rec.client.ttft_ms is not None and rec.t_start_mono_ns is not None
    unexplained = rec.client.ttft_ms - (pt.queue_ms + pt.server_ttft_ms)
    assert unexplained >= truth.frontend_ms
    assert (truth.t_read_ns - rec.t_start_mono_ns) / 1e6 + truth.frontend_ms <= unexplained


def test_an_http_error_comes_back_through_the_front_end(tmp_path: Path) -> None:
    rec, truth = served(tmp_path, frontend_ms=FRONTEND_MS, fail="http_status", fail_status=503)
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert truth.status == 503 and truth.t_headers_ns is not None
    assert truth.t_headers_ns - truth.t_read_ns >= FRONTEND_MS * 1e6
