"""The whole lab against respx-mocked OpenAI and Anthropic streams: five answers each."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import httpx2
import pytest
import respx
from typer.testing import CliRunner

from labkit.cli import app
from labkit.figures import AttributionKey
from labkit.measurement.sdkpath import SDKRecorder
from labkit.records import LabResults, RequestRecord

pytestmark = pytest.mark.unit

LAB = """
name: lab-mocked
providers:
  - {id: openai, kind: openai, model: gpt-4-turbo, api_key_env: OPENAI_API_KEY}
  - {id: claude, kind: anthropic, model: claude-haiku-4-5, api_key_env: ANTHROPIC_API_KEY}
experiments:
  - {kind: single, repeats: 2}
  - {kind: token_ratio}
  - {kind: determinism, repeats: 2}
  - {kind: prefill_decode, repeats: 1, prompt_tokens: [16, 256, 1024], cache_repeats: 1}
  - {kind: attribution, repeats: 2}
"""


def _sse(*objs: object) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs) + b"data: [DONE]\n\n"
    )


def _openai(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    prompt = " ".join(m["content"] for m in body["messages"])
    n_in = max(1, len(prompt) // 4)
    n_out = min(5, body.get("max_completion_tokens") or 5)
    chunks: list[object] = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    chunks += [
        {
            "id": "c1",
            "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "delta": {"content": f" w{i}"}}],
        }
        for i in range(n_out)
    ]
    chunks.append({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    chunks.append(
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": n_in, "completion_tokens": n_out}}
    )
    return httpx.Response(
        200,
        headers={
            "content-type": "text/event-stream",
            "x-request-id": "req_1",
            "openai-processing-ms": "7",
        },
        content=_sse(*chunks),
    )


def _anthropic(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    prompt = " ".join(m["content"] for m in body["messages"])
    n_in = max(1, len(prompt) // 4)
    n_out = min(5, body["max_tokens"])
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {"id": "msg_1", "usage": {"input_tokens": n_in, "output_tokens": 1}},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    events += [
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": f" w{i}"},
            },
        )
        for i in range(n_out)
    ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens"},
                "usage": {"output_tokens": n_out},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    data = b"".join(f"event: {e}\ndata: {json.dumps(d)}\n\n".encode() for e, d in events)
    return httpx.Response(
        200, headers={"content-type": "text/event-stream", "request-id": "req_a"}, content=data
    )


def _count(request: httpx.Request) -> httpx.Response:
    text = json.loads(request.content)["messages"][0]["content"]
    return httpx.Response(200, json={"input_tokens": max(1, len(text) // 3)})


ROUTES = {
    "https://api.openai.com/v1/chat/completions": _openai,
    "https://api.anthropic.com/v1/messages": _anthropic,
    "https://api.anthropic.com/v1/messages/count_tokens": _count,
}


def _sdk_transport() -> httpx2.MockTransport:
    """The same mocks for the SDK path: respx patches httpx only, the SDKs use httpx2."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        url = str(request.url).split("?")[0]
        wire = httpx.Request(
            request.method, url, headers=dict(request.headers), content=request.read()
        )
        response = ROUTES[url](wire)
        return httpx2.Response(
            response.status_code, headers=dict(response.headers), content=response.content
        )

    return httpx2.MockTransport(handler)


def test_lab_with_mocked_openai_and_anthropic(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(
        SDKRecorder,
        "_http_client",
        lambda self, provider: httpx2.AsyncClient(transport=_sdk_transport()),
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    cfg = tmp_path / "lab.yaml"
    cfg.write_text(LAB, encoding="utf-8")
    with respx.mock(assert_all_called=True) as mock:
        mock.post("https://api.openai.com/v1/chat/completions").mock(side_effect=_openai)
        mock.post("https://api.anthropic.com/v1/messages").mock(side_effect=_anthropic)
        mock.post("https://api.anthropic.com/v1/messages/count_tokens").mock(side_effect=_count)
        result = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path), "--no-report"])
    assert result.exit_code == 0, result.output
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    got = {(a.provider, a.experiment): a for a in lab.answers}
    kinds = ["single", "token_ratio", "determinism", "prefill_decode", "attribution"]
    for provider in ("openai", "claude"):
        for kind in kinds:
            answer = got[(provider, kind)]
            assert answer.status == "ok", (provider, kind, answer.answer)
            assert any(ch.isdigit() for ch in answer.answer)
    # token counts: tiktoken for the OpenAI model (cl100k), count_tokens for Anthropic
    openai_rows = got[("openai", "token_ratio")].figures.rows
    assert all(r.token_source == "tiktoken:cl100k_base" for r in openai_rows)
    assert all(r.tiktoken_tokens == r.tokens for r in openai_rows)
    claude_rows = got[("claude", "token_ratio")].figures.rows
    assert all(r.token_source == "anthropic:count_tokens" for r in claude_rows)
    # the fit and the fingerprints come from the mocked data
    fit = got[("openai", "prefill_decode")].figures.fit
    assert fit.n == 3
    fingerprints = got[("openai", "determinism")].figures.variants[0].system_fingerprints
    assert fingerprints == ["fp_test"]
    attribution = {r.key: r for r in got[("claude", "attribution")].figures.rows}
    assert attribution[AttributionKey.PREFILL].note == "not reported by this provider"
    openai_attr = {r.key: r for r in got[("openai", "attribution")].figures.rows}
    assert openai_attr[AttributionKey.SERVER_PROCESSING].value_ms == 7.0
    records = [
        RequestRecord.from_json_line(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
    ]
    assert {r.provider for r in records} == {"openai", "claude"}
    # the attribution experiment sent each trial through the official SDKs too
    sdk = [r for r in records if r.app.client_path == "sdk"]
    assert {r.provider for r in sdk} == {"openai", "claude"}
    assert all(r.client.ttft_ms is not None and r.usage.output_tokens == 5 for r in sdk)
    for provider in ("openai", "claude"):
        rows = {r.key: r for r in got[(provider, "attribution")].figures.rows}
        assert rows[AttributionKey.SDK_TTFT].value_ms is not None
    assert all(r.error is None for r in records)
    assert any(r.warmup for r in records)
