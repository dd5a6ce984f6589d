"""Keys never reach a run folder, stdout or stderr — even when a provider echoes them back.

And the kill switch: a test that tries to reach a real host fails loudly.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx
from typer.testing import CliRunner

from labkit.cli import app
from tests.conftest import NetworkBlockedError
from tests.providers.streams import oa_usage, openai_events, sse, sse_response

KEY = "sk-test-PLANTED-0123456789"
OPENAI = "https://api.openai.com/v1/chat/completions"
ANTHROPIC = "https://api.anthropic.com/v1/messages"

CONFIG = """\
name: secrets
providers:
  - id: gpt
    kind: openai
    model: gpt-4.1-mini
    api_key_env: LABKIT_TEST_OPENAI_KEY
  - id: claude
    kind: anthropic
    model: claude-haiku-4-5
    api_key_env: LABKIT_TEST_ANTHROPIC_KEY
experiments:
  - kind: single
    prompt_cache: as_sent
    prompts: ["hi"]
    repeats: 2
    warmup: 0
"""

ECHO_BODY = {
    "error": {
        "message": f"Incorrect API key provided: {KEY}. Authorization: Bearer {KEY}",
        "type": "invalid_request_error",
        "code": "invalid_api_key",
    }
}


def run_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report: bool = False):
    monkeypatch.setenv("LABKIT_TEST_OPENAI_KEY", KEY)
    monkeypatch.setenv("LABKIT_TEST_ANTHROPIC_KEY", KEY)
    cfg = tmp_path / "secrets.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    out = tmp_path / "out"
    args = ["run", str(cfg), "--out", str(out)] + ([] if report else ["--no-report"])
    result = CliRunner().invoke(app, args)
    (run,) = list(out.iterdir())
    return result, run


def assert_no_secret(result, run: Path, *routes: respx.Route) -> None:
    # The key was really sent (so the test would catch a leak of what was sent) ...
    sent = [call.request.headers for route in routes for call in route.calls]
    assert sent, "no request reached the mock"
    for headers in sent:
        assert KEY in (headers.get("authorization", "") + headers.get("x-api-key", ""))
    # ... and is nowhere in what labkit wrote or printed.
    texts = {"output": result.output, "stderr": result.stderr}
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "records.jsonl" for p in files)
    for p in files:
        texts[str(p)] = p.read_bytes().decode("utf-8", errors="replace")
    for where, text in texts.items():
        assert KEY not in text, f"key leaked into {where}"
        assert "PLANTED" not in text, f"part of the key leaked into {where}"
        assert f"Bearer {KEY}" not in text
        assert "0123456789" not in text, f"the key's tail leaked into {where}"


@pytest.mark.unit
def test_key_echoed_in_401_body_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with respx.mock() as router:
        r1 = router.post(OPENAI).mock(return_value=httpx.Response(401, json=ECHO_BODY))
        r2 = router.post(ANTHROPIC).mock(
            return_value=httpx.Response(
                401,
                json={
                    "type": "error",
                    "error": {
                        "type": "authentication_error",
                        "message": f"invalid x-api-key: {KEY}",
                    },
                },
            )
        )
        result, run = run_cli(tmp_path, monkeypatch, report=True)
    assert result.exit_code != 0  # every provider failed
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    assert {r["error"]["status"] for r in records} == {401}
    assert all("***" in r["error"]["body_excerpt"] for r in records)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["providers"][0]["api_key_env"] == "LABKIT_TEST_OPENAI_KEY"
    assert (run / "report.md").is_file()  # the report is scanned too
    assert_no_secret(result, run, r1, r2)


@pytest.mark.unit
def test_key_echoed_inside_a_stream_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_err = sse(
        {"error": {"type": "invalid_request_error", "message": f"key {KEY} was revoked mid-stream"}}
    )
    anthropic_err = sse(
        {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {KEY}"}},
        "error",
    )
    good = list(openai_events(["ok"], usage=oa_usage(3, 1)))
    with respx.mock() as router:
        r1 = router.post(OPENAI).mock(
            side_effect=[
                sse_response(good, headers={"x-request-id": "req_1"}),
                sse_response([good[0], good[1], openai_err, b"data: [DONE]\n\n"]),
            ]
        )
        r2 = router.post(ANTHROPIC).mock(side_effect=lambda request: sse_response([anthropic_err]))
        result, run = run_cli(tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    kinds = sorted(r["error"]["kind"] if r["error"] else "ok" for r in records)
    assert kinds == ["ok", "stream_error", "stream_error", "stream_error"]
    assert_no_secret(result, run, r1, r2)


@pytest.mark.unit
def test_kill_switch_blocks_real_hosts() -> None:
    # httpx reports the block as the connection failure it stands for.
    with pytest.raises(httpx.ConnectError, match=r"api\.openai\.com"):
        httpx.get("https://api.openai.com/v1/models", timeout=2)
    import socket

    with pytest.raises(NetworkBlockedError):
        socket.create_connection(("93.184.216.34", 443), timeout=1)


@pytest.mark.integration
def test_kill_switch_allows_loopback() -> None:
    import socket

    # Nothing listens on this port: the connection is refused, not blocked.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", 9), timeout=1).close()
