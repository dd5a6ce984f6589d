"""Server text is stored at a bounded length: a record's JSON line stays within
`MAX_RECORD_JSON` beside its reply, however long the strings a server sends.

The worst case is served by a real server on 127.0.0.1 through both transports: response
headers as large as HTTP readers take (a 60 kB ``x-request-id``, rate-limit headers with
control characters), a 1 MB logprob token, more logprob steps than a record keeps, each with
20 long alternatives, and 100 kB ids, fingerprint, stop reason and timing object. Shapes:
OpenAI Chat Completions chunks with ``logprobs.content`` (openai-python
``types/chat/chat_completion_token_logprob.py``), llama.cpp's ``timings`` object
(tools/server/README.md), OpenAI's ``x-request-id`` and ``x-ratelimit-*`` headers (API
reference, "Rate limits" and "Debugging requests").
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.records import (
    MAX_ERROR_TEXT,
    MAX_LOGPROBS_JSON,
    MAX_RATE_LIMIT_HEADERS,
    MAX_RAW_JSON,
    MAX_RECORD_JSON,
    MAX_SERVER_TEXT,
    MAX_TOKEN_TEXT,
    LogprobStep,
    OutputLogprobs,
    RecordError,
    RequestRecord,
    TokenCandidate,
    bound_raw,
    cut_text,
)
from tests.providers.streams import chat, oa_chunk, sse
from tests.support.misbehaving import MisbehavingServer

_LONG = 100_000


def _head() -> bytes:
    # 60 kB of request id and 20 rate-limit headers of 1.5 kB: 90 kB, within the 100 KiB
    # both HTTP readers take. \x01 is allowed in a field value and is 6 bytes of JSON.
    fields = [
        b"HTTP/1.1 200 OK",
        b"content-type: text/event-stream",
        b"connection: close",
        b"x-request-id: " + b"r" * 60_000,
        *(b"x-ratelimit-limit-%d: %s" % (i, b"\x01" * 1500) for i in range(20)),
    ]
    return b"\r\n".join(fields) + b"\r\n\r\n"


def _entry(token: str, top: int) -> dict[str, Any]:
    alts = [{"token": token + str(i), "logprob": -1.5} for i in range(top)]
    return {"token": token, "logprob": -0.5, "top_logprobs": alts}


def _events() -> list[bytes]:
    def chunk(entries: list[dict[str, Any]], **more: Any) -> bytes:
        obj = oa_chunk("a", rid="i" * _LONG, fingerprint="f" * _LONG, **more)
        obj["choices"][0]["logprobs"] = {"content": entries}
        return sse(obj)

    # A token of 1 MB with 5 alternatives as long (6 MB: an event may be 8 MiB), then 30
    # events of 70 steps, each with 20 alternatives of 300 characters (non-ASCII and quotes:
    # more JSON bytes than characters).
    events = [chunk([_entry("t" * 1_000_000, 5)])]
    events += [chunk([_entry('é"' * 150, 20) for _ in range(70)]) for _ in range(30)]
    timings = {"prompt_ms": 1.0, "predicted_ms": 2.0, "note": "n" * _LONG}
    timings |= {f"k{i}": "v" * 500 for i in range(100)}
    last = oa_chunk(rid="i" * _LONG, finish="s" * _LONG)
    last["timings"] = timings
    return [*events, sse(last), b"data: [DONE]\n\n"]


def _record(base_url: str, transport: str) -> RequestRecord:
    async def main() -> RequestRecord:
        cls = provider_class("openai_compatible")
        settings = cls.settings_model.model_validate(
            {
                "id": "p",
                "kind": "openai_compatible",
                "model": "m",
                "base_url": base_url + "/v1",
                "transport": transport,
            }
        )
        provider = cls(settings)
        request = chat()
        request.top_logprobs = 20
        try:
            return await StreamRecorder().record(provider, request, RecordContext("r", "t"))
        finally:
            await provider.aclose()

    return asyncio.run(main())


@pytest.mark.integration
@pytest.mark.parametrize("transport", ["httpx", "lean"])
def test_the_worst_case_record_stays_within_its_documented_bound(transport: str) -> None:
    reply = [_head(), *_events()]
    with MisbehavingServer(lambda _: reply) as server:
        rec = _record(server.base_url, transport)
    assert rec.error is None, rec.error
    line = rec.to_json_line().encode()
    assert len(line) <= MAX_RECORD_JSON
    assert rec.logprobs is not None and rec.logprobs.truncated
    assert len(rec.logprobs.model_dump_json().encode()) <= MAX_LOGPROBS_JSON
    first = rec.logprobs.steps[0].token
    assert len(first) == MAX_TOKEN_TEXT and first.endswith("…[cut from 1000000 chars]")
    for text in (rec.request_id, rec.response_id, rec.system_fingerprint, rec.stop_reason_raw):
        assert text is not None and len(text) == MAX_SERVER_TEXT and "[cut from" in text
    assert rec.request_id is not None and rec.request_id.startswith("r" * 200)
    assert rec.rate_limits is not None and len(rec.rate_limits) == MAX_RATE_LIMIT_HEADERS
    assert all(len(v) <= MAX_SERVER_TEXT for v in rec.rate_limits.values())
    assert rec.provider_timings.prefill_ms == 1.0  # the timings were read before the cut
    raw = rec.provider_timings.raw
    assert raw is not None and len(json.dumps(raw, ensure_ascii=False).encode()) <= MAX_RAW_JSON
    assert RequestRecord.from_json_line(line.decode()) == rec  # the cut survives a round trip


@pytest.mark.unit
@given(text=st.text(max_size=600), limit=st.integers(1, 400))
def test_cut_text_keeps_the_start_within_the_limit_and_cutting_again_changes_nothing(
    text: str, limit: int
) -> None:
    cut = cut_text(text, limit)
    assert len(cut) <= limit
    assert cut == text if len(text) <= limit else text.startswith(cut.split("…[cut from")[0])
    assert cut_text(cut, limit) == cut


@pytest.mark.unit
@given(
    tokens=st.lists(st.text(min_size=1, max_size=400), min_size=1, max_size=5),
    steps=st.integers(1, 3000),
)
def test_the_logprobs_group_stays_within_its_json_budget(tokens: list[str], steps: int) -> None:
    top = [TokenCandidate(token=t, logprob=-1.0) for t in tokens * 4][:20]
    step = LogprobStep(token=tokens[0], logprob=-0.5, top=top)
    group = OutputLogprobs(top_k=20, steps=[step] * steps)
    assert len(group.model_dump_json().encode()) <= MAX_LOGPROBS_JSON
    assert group.truncated == (len(group.steps) < steps)


@pytest.mark.unit
def test_an_error_message_and_a_timing_object_are_bounded() -> None:
    error = RecordError(kind="protocol", message="m" * 50_000)
    assert len(error.message) == MAX_ERROR_TEXT
    assert bound_raw({"headers": {"x-t": "1"}}) == {"headers": {"x-t": "1"}}
    huge = bound_raw({f"k{i}": "v" * 200 for i in range(500)})
    assert list(huge) == ["cut"] and "bytes of JSON" in huge["cut"]
