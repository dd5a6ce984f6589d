"""The request path (`client.request_sent_ms`, `client.send_ms`: TTFT's client-side part)
against the truth server's log: the clock starts before the server reads the request, and
the response head's arrival stamp comes after the server sent it.

What the truth allows and what it does not: the request's bytes were handed to the kernel
within the `send` call that `request_sent_ms` stamps, so the server reads them no earlier
than `t_start`. It may read them before that call returns (the server, woken by the write,
can run before the writer returns from it): where the kernel stamps sends, `request_sent_ms`
is the last byte's transmit stamp, taken inside the call before the server is woken, and the
server's read never comes before it; where it does not, no order is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from labkit.wire.lean.stamps import KERNEL_STAMPS, ask_send_stamps, loopback_pair
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

REQUESTS = 3

#: The transmit stamp is CLOCK_REALTIME put on labkit's clock by an offset read between two
#: reads of the latter a moment later: this much error at most but for a preemption there.
CONVERSION_SLACK_MS = 0.05


def _sends_stamped() -> bool:
    if KERNEL_STAMPS is None:
        return False
    with loopback_pair() as (sender, _):
        return ask_send_stamps(sender)


@contextlib.contextmanager
def _one_cpu(server: TruthServer, on: bool) -> Iterator[None]:
    """This thread and the server on one CPU (where `on`): the server, woken by the write,
    then most often runs before the writer's `send` returns — the bundled llama-server's
    case wherever it shares the client's CPUs."""
    if not on:
        yield
        return
    assert server.proc is not None
    server_pid = server.proc.pid
    mine, theirs = os.sched_getaffinity(0), os.sched_getaffinity(server_pid)
    cpu = {min(mine)}
    os.sched_setaffinity(server_pid, cpu)
    os.sched_setaffinity(0, cpu)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(server_pid, theirs)


# `auto` reads a server on this machine through the lean transport; `httpx` asked for.
@pytest.mark.parametrize(("transport", "shared_cpu"), [("httpx", False), ("auto", True)])
def test_the_request_path_lies_within_what_the_truth_server_saw(
    tmp_path: Path, transport: str, shared_cpu: bool
) -> None:
    log = tmp_path / "truth.jsonl"
    requests = REQUESTS * 4 if shared_cpu else REQUESTS

    async def go() -> list[RequestRecord]:
        with (
            TruthServer(truth_log=log, first_token_ms=5, token_interval_ms=1, tokens=3) as srv,
            _one_cpu(srv, shared_cpu),
        ):
            provider = make_provider(
                "openai_compatible", base_url=srv.base_url, transport=transport
            )
            recorder = StreamRecorder()
            try:
                return [
                    await recorder.record(
                        provider, chat(), RecordContext(run_id="r", experiment="t", trial=i)
                    )
                    for i in range(requests)
                ]
            finally:
                await provider.aclose()

    stamped = transport != "httpx" and _sends_stamped()
    records = asyncio.run(go())
    truths = {t.id: t for t in read_truth_log(log).requests}  # read after the server stopped
    assert len(records) == len(truths) == requests
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
        # ... and, where the last byte's transmit stamp is the figure, after that stamp
        if stamped:
            read_ms = (truth.t_read_ns - rec.t_start_mono_ns) / 1e6
            assert c.request_sent_ms <= read_ms + CONVERSION_SLACK_MS
        # ... and the response head, kernel-stamped, arrived after the server sent it
        assert c.headers_ms >= (truth.t_headers_ns - rec.t_start_mono_ns) / 1e6
    first, *later = records
    assert first.client.new_connection is True and first.client.connect_ms is not None
    for rec in later:  # a kept-alive connection: the request path is the send alone
        assert rec.client.new_connection is False
        assert rec.client.send_ms == rec.client.request_sent_ms
