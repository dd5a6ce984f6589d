"""The server's own timings are what the fake server did: llama.cpp's ``timings`` field by
field against the truth log, OpenAI's ``openai-processing-ms`` against the headers' send,
and the wait for a slot as the queue of the shapes that have one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration


def served(
    tmp_path: Path, kind: str, prompts: list[str], at_once: bool = False, **schedule: Any
) -> list[tuple[RequestRecord, TruthRequest]]:
    """The prompts from a provider of `kind` (`at_once`: each on its own connection, all
    together); each record with its truth log line."""
    log = tmp_path / "truth.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **schedule) as server:
            root = f"http://127.0.0.1:{server.port}"
            settings: dict[str, Any] = {"base_url": server.base_url}
            if kind == "llamacpp":
                settings = {"base_url": root, "managed": False}
            providers = [make_provider(kind, **settings) for _ in prompts]
            recorder = StreamRecorder()
            ctx = RecordContext(run_id="r", experiment="t")
            try:
                pairs = zip(providers, prompts, strict=True)
                jobs = [recorder.record(p, chat(text), ctx) for p, text in pairs]
                if at_once:
                    return list(await asyncio.gather(*jobs))
                return [await job for job in jobs]
            finally:
                for provider in providers:
                    await provider.aclose()

    records = asyncio.run(go())
    by_id = {t.id: t for t in read_truth_log(log).requests}
    return [(r, by_id[r.response_id or ""]) for r in records]


def test_llamacpp_timings_are_what_the_server_did(tmp_path: Path) -> None:
    pairs = served(
        tmp_path,
        "llamacpp",
        ["a b c d e f g h", "a b c d e f g h i j"],
        first_token_ms=3,
        token_interval_ms=1.5,
        tokens=5,
        tokens_per_event=2,
        prefill_ms_per_token=0.25,
        cached_ms_per_token=0.125,
        cache_tokens=1000,
        end_token=True,
        jitter_ms=0.5,
        server_timings="llamacpp",
    )
    for rec, truth in pairs:
        raw = rec.provider_timings.raw or {}
        assert raw["cache_n"] == truth.cached_tokens
        assert raw["prompt_n"] == truth.prompt_tokens - truth.cached_tokens
        assert raw["prompt_ms"] == truth.prefill_ms  # jittered: what this request got
        assert raw["predicted_n"] == truth.usage_output_tokens == 6
        assert raw["predicted_ms"] == truth.decode_ms
        assert raw["predicted_per_token_ms"] == pytest.approx(truth.decode_ms / 5)
        assert raw["prompt_per_token_ms"] == pytest.approx(truth.prefill_ms / raw["prompt_n"])
        assert truth.reported is not None and truth.reported["fields"]["timings"] == raw
    assert pairs[1][1].cached_tokens == 8


def test_openai_processing_ms_is_the_time_to_the_headers(tmp_path: Path) -> None:
    ((rec, truth),) = served(
        tmp_path, "openai_compatible", ["hi"], queue_ms=12, server_timings="openai"
    )
    assert truth.t_headers_ns is not None and truth.reported is not None
    sent = truth.reported["headers"]["openai-processing-ms"]
    assert rec.provider_timings.processing_ms == float(sent)
    assert truth.t_admit_ns is not None
    assert int(sent) == round((truth.t_headers_ns - truth.t_admit_ns) / 1e6)
    assert truth.queue_ms == 12  # the queue is before the headers: in the processing time


def test_a_slot_s_wait_is_groq_s_queue_time(tmp_path: Path) -> None:
    pairs = served(
        tmp_path,
        "openai_compatible",
        ["one", "two", "three"],
        at_once=True,
        first_token_ms=40,
        token_interval_ms=1,
        tokens=3,
        slots=1,
        server_timings="groq",
    )
    queues = sorted(truth.queue_ms for _, truth in pairs)
    assert queues[0] == 0 and queues[2] > queues[1] > 0
    for rec, truth in pairs:
        assert rec.provider_timings.queue_ms == pytest.approx(truth.queue_ms)
        assert truth.queue_ms * 1e6 == pytest.approx(truth.t_start_ns - truth.t_admit_ns)
