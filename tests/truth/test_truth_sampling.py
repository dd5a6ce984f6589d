"""Seeded sampling and logprobs through labkit's own clients: each record's logprobs are the
probabilities the truth log says the server drew from, a seed repeats a sampled reply, and
the first step where two replies differ is the one the log shows."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers.base import ChatRequest
from labkit.records import RequestRecord
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import make_provider

pytestmark = pytest.mark.integration

SCHEDULE = {"first_token_ms": 1, "token_interval_ms": 0.5, "tokens": 12, "sampling": True}
TOP = 3


def served(
    tmp_path: Path, kind: str, params: list[dict[str, Any]], **schedule: Any
) -> list[tuple[RequestRecord, TruthRequest]]:
    log = tmp_path / f"{kind}.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **{**SCHEDULE, **schedule}) as server:
            root = f"http://127.0.0.1:{server.port}"
            settings: dict[str, Any] = {"base_url": server.base_url}
            if kind == "llamacpp":
                settings = {"base_url": root, "managed": False}
            provider = make_provider(kind, **settings)
            asked = provider.logprob_params(TOP)
            messages = [{"role": "user", "content": "Say something."}]
            ctx = RecordContext(run_id="r", experiment="t")
            try:
                return [
                    await StreamRecorder().record(
                        provider, ChatRequest(messages, {**asked, **p}, top_logprobs=TOP), ctx
                    )
                    for p in params
                ]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    return list(zip(records, read_truth_log(log).requests, strict=True))


def assert_logprobs_are_the_logged_draws(rec: RequestRecord, truth: TruthRequest) -> None:
    assert rec.error is None and rec.logprobs is not None
    assert len(rec.logprobs.steps) == len(truth.steps) == truth.output_tokens
    for got, drawn in zip(rec.logprobs.steps, truth.steps, strict=True):
        assert got.token == drawn.token
        assert got.logprob == pytest.approx(math.log(drawn.probability), abs=1e-12)
        assert [c.token for c in got.top] == [t for t, _ in drawn.candidates[:TOP]]
        for c, (_, p) in zip(got.top, drawn.candidates, strict=False):
            assert c.logprob == pytest.approx(math.log(p), abs=1e-12)
    assert rec.output_text == "".join(s.token for s in truth.steps)


@pytest.mark.parametrize("kind", ["openai_compatible", "llamacpp", "openai_responses"])
def test_logprobs_equal_the_probabilities_the_server_drew_from(tmp_path: Path, kind: str) -> None:
    extra = {"server_timings": "llamacpp"} if kind == "llamacpp" else {}
    ((rec, truth),) = served(tmp_path, kind, [{"temperature": 0.8, "seed": 3}], **extra)
    assert truth.temperature == 0.8
    assert truth.seed == (None if kind == "openai_responses" else 3)  # Responses has no seed
    assert_logprobs_are_the_logged_draws(rec, truth)


def test_a_seed_repeats_a_reply_and_the_divergence_step_is_the_logged_one(
    tmp_path: Path,
) -> None:
    pairs = served(
        tmp_path,
        "openai_compatible",
        [
            {"temperature": 1, "seed": 11},
            {"temperature": 1, "seed": 11},
            {"temperature": 1, "seed": 12},
            {"temperature": 0},
            {"temperature": 0},
        ],
    )
    for rec, truth in pairs:
        assert_logprobs_are_the_logged_draws(rec, truth)
    texts = [rec.output_text for rec, _ in pairs]
    assert texts[0] == texts[1] and texts[3] == texts[4]
    a, b = (([s.token for s in t.steps]) for _, t in pairs[1:3])
    diverged = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    assert diverged is not None  # another seed: the log says at which step it left
    got = [[s.token for s in rec.logprobs.steps] for rec, _ in pairs[1:3] if rec.logprobs]
    assert got[0][:diverged] == got[1][:diverged] and got[0][diverged] != got[1][diverged]


def test_llamacpp_entries_carry_token_ids_as_llama_server_sends_them(tmp_path: Path) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "logprobs": True,
        "top_logprobs": 2,
        "max_tokens": 2,
    }
    with TruthServer(truth_log=tmp_path / "t.jsonl", server_timings="llamacpp", **SCHEDULE) as srv:
        lines = httpx.post(srv.base_url + "/chat/completions", json=body).text.splitlines()
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    entry = next(c for c in chunks if c["choices"] and c["choices"][0].get("logprobs"))
    first = entry["choices"][0]["logprobs"]["content"][0]
    assert list(first) == ["id", "token", "bytes", "logprob", "top_logprobs"]
    assert list(first["top_logprobs"][0]) == ["id", "token", "bytes", "logprob"]
    assert first["bytes"] == list(first["token"].encode())
