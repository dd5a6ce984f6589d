"""Per-token llama.cpp `timings` on the truth server: a Chat stream that asks
`timings_per_token` gets cumulative `timings` on every token chunk, whose
`prompt_ms + predicted_ms` the truth log keeps as `token_ms` and labkit's llamacpp parser
reads into `event_detail.server_ms`; one that does not ask gets none, as before."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

BODY = {"messages": [{"role": "user", "content": "a b c"}], "stream": True, "max_tokens": 6}


def _token_chunks(text: str) -> list[dict[str, object]]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: {"):
            obj = json.loads(line[6:])
            choices = obj.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                out.append(obj)
    return out


def test_per_token_timings_are_sent_only_when_asked_and_logged(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"

    async def go() -> tuple[list[float], RequestRecord]:
        with TruthServer(
            truth_log=log, tokens=6, tokens_per_event=2, jitter_ms=0.3, server_timings="llamacpp"
        ) as srv:
            root = f"http://127.0.0.1:{srv.port}"
            async with httpx.AsyncClient(base_url=root) as http:
                plain = await http.post("/v1/chat/completions", json=BODY)
                asked = await http.post(
                    "/v1/chat/completions", json={**BODY, "timings_per_token": True}
                )
            assert all("timings" not in c for c in _token_chunks(plain.text))
            chunks = _token_chunks(asked.text)
            assert len(chunks) == 3
            timings = [c["timings"] for c in chunks]
            assert [t["predicted_n"] for t in timings] == [2, 4, 6]  # type: ignore[index]
            sent = [t["prompt_ms"] + t["predicted_ms"] for t in timings]  # type: ignore[index]
            assert sent == sorted(sent) and timings[0]["predicted_ms"] == 0  # type: ignore[index]

            provider = make_provider("llamacpp", base_url=root, managed=False)
            try:
                request = chat("a b c", max_tokens=6, **provider.event_time_params())
                request.event_detail = True
                ctx = RecordContext(run_id="r", experiment="t")
                rec = await StreamRecorder().record(provider, request, ctx)
            finally:
                await provider.aclose()
            return sent, rec

    # The log is read once the server has stopped: it writes a request's line after the
    # stream has gone out, so on a busy host the client can be done before the line is.
    sent, rec = asyncio.run(go())
    assert rec.error is None and rec.event_detail is not None
    assert "".join(rec.event_detail.texts) == rec.output_text
    truth = read_truth_log(log).requests
    assert [t.token_ms is None for t in truth] == [True, False, False]
    assert truth[1].token_ms == pytest.approx(sent)
    assert rec.event_detail.server_ms == pytest.approx(truth[2].token_ms)
    assert len(rec.event_detail.texts) == len(rec.client.event_offsets_ms) == 3
