"""A forward proxy on 127.0.0.1 that echoes the `Proxy-Authorization` it received — in a
response header, in the streamed text and in an error body — behind `HTTP_PROXY` with
credentials: no file of the run folder and nothing printed holds the proxy's password, its
`user:password`, or their base64 (`Basic ...`)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from tests.test_scrub import leaked

pytestmark = pytest.mark.integration

USER, PASSWORD = "lab-user", "Pr0xy-pa55word-Echo"
TARGET = "http://api.example.test/v1"  # never resolved: a proxied request names it only


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Proxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(404, {"x-proxy-echo": self._auth()}, b'{"error": "no such route"}')

    def _auth(self) -> str:
        return self.headers.get("proxy-authorization", "")

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        auth = self._auth()
        self.server.seen.append(f"{self.path} {auth}")
        echo = f"you sent Proxy-Authorization: {auth} ({USER}:{PASSWORD})"
        if body.get("model") == "echo-407":
            err = json.dumps({"error": {"message": echo, "type": "proxy"}}).encode()
            self._send(502, {"x-proxy-echo": auth, "content-type": "application/json"}, err)
            return
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": echo}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        events = "".join(f"data: {json.dumps(c | {'id': 'c'})}\n\n" for c in chunks)
        data = (events + "data: [DONE]\n\n").encode()
        self._send(200, {"x-proxy-echo": auth, "content-type": "text/event-stream"}, data)


@pytest.fixture
def proxy() -> Iterator[_Proxy]:
    server = _Proxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_proxy_echoing_its_credentials_leaves_no_trace(
    tmp_path: Path, proxy: _Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = proxy.server_address[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://{USER}:{PASSWORD}@127.0.0.1:{port}")
    for name in ("HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "proxy.yaml"
    config.write_text(
        "name: proxied\nproviders:\n"
        + "".join(
            f"  - {{id: {m}, kind: openai_compatible, model: {m}, base_url: {TARGET}, "
            "transport: httpx}\n"
            for m in ("echo-ok", "echo-407")
        )
        + "experiments: [{kind: single, prompt_cache: as_sent, "
        "prompts: [a], repeats: 2, warmup: 0}]\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(out)])
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert proxy.seen and all(basic in s and TARGET in s for s in proxy.seen)  # it went there
    (run_dir,) = list(out.iterdir())
    assert (run_dir / "report.html").exists(), result.output
    secrets = [PASSWORD, f"{USER}:{PASSWORD}", basic]
    for path in [p for p in run_dir.rglob("*") if p.is_file()]:
        text = path.read_bytes().decode("utf-8", "replace")
        for secret in secrets:
            assert leaked(text, secret) == [], (path.name, secret)
    printed = result.stdout + result.stderr
    for secret in secrets:
        assert leaked(printed, secret) == [], secret
