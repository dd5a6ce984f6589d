"""An Ollama entry's `api_key_env` is sent: ``Authorization: Bearer KEY`` on `/api/chat` and
`/api/version` (ollama.com's hosted API and authenticating proxies read it), never shown in
an output; an entry without one sends no Authorization header. Against a real server on
127.0.0.1 speaking Ollama's NDJSON (shapes from Ollama's API reference, docs/api.md "Generate
a chat completion": `message` lines with `done: false`, then `done: true` with `done_reason`
and the nanosecond durations)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labkit.cli import app

pytestmark = pytest.mark.integration

KEY = "0f3c9a7e5b2d4e61a8c7b9d0e1f2a3b4.Qw7ZpL2xVn9RkT4mYc8HsJ"  # ollama.com key shape


class _OllamaServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.auth: list[tuple[str, str | None]] = []


class _Handler(BaseHTTPRequestHandler):
    server: _OllamaServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.auth.append((self.path, self.headers.get("authorization")))
        self._reply(b'{"version": "0.12.6"}', "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.auth.append((self.path, self.headers.get("authorization")))
        lines = [
            {"model": "m", "message": {"role": "assistant", "content": w}, "done": False}
            for w in ("Hello", " there")
        ] + [
            {
                "model": "m",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "total_duration": 9_000_000,
                "prompt_eval_count": 3,
                "prompt_eval_duration": 1_000_000,
                "eval_count": 2,
                "eval_duration": 2_000_000,
            }
        ]
        body = "".join(json.dumps(x) + "\n" for x in lines).encode()
        self._reply(body, "application/x-ndjson")


@pytest.fixture
def server() -> Iterator[_OllamaServer]:
    srv = _OllamaServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _run(tmp_path: Path, server: _OllamaServer, key_env: str | None) -> tuple[Any, Path]:
    root = f"http://127.0.0.1:{server.server_address[1]}"
    key = f", api_key_env: {key_env}" if key_env else ""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: ollama-key\n"
        f"providers: [{{id: o, kind: ollama, model: m, base_url: '{root}'{key}}}]\n"
        "experiments: [{kind: single, prompts: [hi], repeats: 1, warmup: 0}]\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (folder,) = out.iterdir()
    return result, folder


def test_the_key_is_sent_as_bearer_and_shown_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: _OllamaServer
) -> None:
    monkeypatch.setenv("LABKIT_OLLAMA_TEST_KEY", KEY)
    result, folder = _run(tmp_path, server, "LABKIT_OLLAMA_TEST_KEY")
    assert ("/api/chat", f"Bearer {KEY}") in server.auth
    assert all(auth == f"Bearer {KEY}" for _, auth in server.auth), server.auth
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    assert records and all(r["error"] is None for r in records)
    assert {r["output_text"] for r in records} == {"Hello there"}
    texts = [result.output] + [
        p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file()
    ]
    assert not [t for t in texts if KEY in t or KEY[:20] in t]


def test_no_key_no_authorization_header(tmp_path: Path, server: _OllamaServer) -> None:
    _run(tmp_path, server, None)
    assert server.auth and all(auth is None for _, auth in server.auth), server.auth
