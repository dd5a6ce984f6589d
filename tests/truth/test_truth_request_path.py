"""The request path (`client.request_sent_ms`, `client.send_ms`: TTFT's client-side part)
against the truth server's log: the clock starts before the server reads the request, and
the response head's arrival stamp comes after the server sent it.

What the truth allows and what it does not: the request's bytes were handed to the kernel
within the `send` call that `request_sent_ms` stamps the return of, so the server reads them
no earlier than `t_start`; it may read them before that call returns (on a busy host the
server, woken by the write, can run before the writer returns from it), so no order between
`request_sent_ms` and the server's read is asserted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

REQUESTS = 3


def test_the_request_path_lies_within_what_the_truth_server_saw(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, first_token_ms=5, token_interval_ms=1, tokens=3) as srv:
            provider = make_provider("openai_compatible", base_url=srv.base_url)
            recorder = StreamRecorder()
            try:
                return [
                    await recorder.record(
                        provider, chat(), RecordContext(run_id="r", experiment="t", trial=i)
                    )
                    for i in range(REQUESTS)
                ]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    truths = {t.id: t for t in read_truth_log(log).requests}  # read after the server stopped
    assert len(records) == len(truths) == REQUESTS
    for rec in records:
        c = rec.client
        assert rec.error is None and rec.response_id is not None
        truth = truths[rec.response_id]
        assert rec.t_start_mono_ns is not None and truth.t_headers_ns is not None
        assert c.request_sent_ms is not None and c.send_ms is not None
        assert c.headers_ms is not None and c.ttft_ms is not None
        # the request path is the client's own: never negative, the connection (opened
        # inside the clock on the first request only) not in send_ms
        assert 0 <= c.send_ms <= c.request_sent_ms
        # the server read the whole request after the clock started ...
        assert truth.t_read_ns > rec.t_start_mono_ns
        # ... and the response head, kernel-stamped, arrived after the server sent it
        assert c.headers_ms >= (truth.t_headers_ns - rec.t_start_mono_ns) / 1e6
    first, *later = records
    assert first.client.new_connection is True and first.client.connect_ms is not None
    for rec in later:  # a kept-alive connection: the request path is the send alone
        assert rec.client.new_connection is False
        assert rec.client.send_ms == rec.client.request_sent_ms
