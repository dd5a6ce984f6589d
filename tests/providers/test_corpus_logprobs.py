"""The logprob shapes of llama.cpp, OpenAI Chat, the Responses API and vLLM (the corpus's
``*_logprobs*`` fixtures), replayed over a real socket with logprobs asked for, through the
wire path and the official SDK: every token's logprob and candidates reach the record, and
each step's candidates' probabilities sum to at most 1."""

from __future__ import annotations

import asyncio
import math

import pytest

from labkit.experiments.variants import logprob_request
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import sdk_available
from labkit.records import RequestRecord
from tests.providers.streams import chat
from tests.providers.streams.corpus import Fixture, check_record, load_corpus
from tests.providers.test_corpus import provider_for, serve

pytestmark = pytest.mark.integration

LOGPROB_CORPUS = [f for f in load_corpus() if "_logprobs" in f.name]
PATHS = [
    pytest.param(f, path, id=f"{f.name}-{path}")
    for f in LOGPROB_CORPUS
    for path in ("wire", "sdk")
    if path == "wire" or sdk_available(f.kind)
]


def replay_asking(fixture: Fixture, path: str, top_k: int | None) -> RequestRecord:
    """Record the fixture once, asking for `top_k` candidates per token (None: not asked)."""

    async def go() -> RequestRecord:
        async with serve(fixture) as root:
            provider = provider_for(fixture, root)
            request = logprob_request(provider, chat(max_tokens=64), top_k)
            ctx = RecordContext(run_id="corpus", experiment=fixture.name)
            try:
                if path == "wire":
                    return await StreamRecorder().record(provider, request, ctx)
                sdk = SDKRecorder()
                try:
                    return await sdk.record(provider, request, ctx)
                finally:
                    await sdk.aclose()
            finally:
                await provider.aclose()

    return asyncio.run(go())


def test_the_four_shapes_are_there() -> None:
    assert {f.kind for f in LOGPROB_CORPUS} == {
        "llamacpp",
        "openai",
        "openai_compatible",
        "openai_responses",
    }
    assert any("vllm" in f.source for f in LOGPROB_CORPUS)


@pytest.mark.parametrize(("fixture", "path"), PATHS)
def test_every_token_and_its_candidates_reach_the_record(fixture: Fixture, path: str) -> None:
    top_k = fixture.expect["logprob_top_k"]
    record = replay_asking(fixture, path, top_k)
    check_record(record, fixture.expect)
    assert record.logprobs is not None
    assert [s.token for s in record.logprobs.steps] == fixture.expect["logprob_tokens"]
    assert [c.token for c in record.logprobs.steps[0].top] == fixture.expect["logprob_first_top"]
    assert record.logprobs.top_k == top_k and not record.logprobs.truncated
    for step in record.logprobs.steps:
        assert len(step.top) <= top_k
        assert step.logprob <= 0
        # A distribution's top-k share at most all of it (summed in floats: a tolerance).
        assert math.fsum(math.exp(c.logprob) for c in step.top) <= 1 + 1e-6


@pytest.mark.parametrize("fixture", LOGPROB_CORPUS, ids=[f.name for f in LOGPROB_CORPUS])
def test_not_asked_the_record_has_none(fixture: Fixture) -> None:
    record = replay_asking(fixture, "wire", None)
    check_record(record, fixture.expect)
    assert record.logprobs is None


#: Every shape whose reply calls a tool, with each path it is replayed through.
TOOL_PATHS = [
    pytest.param(f, path, id=f"{f.name}-{path}")
    for f in load_corpus()
    if f.expect.get("tool_calls")
    for path in ("wire", "sdk")
    if path == "wire" or sdk_available(f.kind)
]


@pytest.mark.parametrize(("fixture", "path"), TOOL_PATHS)
def test_asked_beside_tool_calls_only_the_text_has_steps(fixture: Fixture, path: str) -> None:
    # Logprobs asked on a reply that calls a tool: the calls are read as when not asked,
    # and the steps are the visible text's tokens only (none for a tool call's arguments or
    # for reasoning, although llama.cpp sends logprobs on those chunks too).
    record = replay_asking(fixture, path, 2)
    check_record(record, fixture.expect)
    steps = record.logprobs.steps if record.logprobs is not None else []
    assert "".join(s.token for s in steps) in ("", record.output_text)
