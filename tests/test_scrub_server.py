"""A server on 127.0.0.1 that echoes the key it received, in every encoding, in error bodies,
headers and streamed text, and sends terminal escapes: `labkit run` must show none of it.

The planted key arrives from a variable saved with CRLF. Every file of the run folder
(records, manifest, lab.json, summary.txt, report.md/html, summary.csv/parquet) and the
captured stdout/stderr are searched for the key in each encoding, and for its head and tail.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from labkit.cli import app
from tests.test_scrub import encodings, leaked

pytestmark = pytest.mark.integration

KEY = "sk-proj-Echo7PLANTEDq2Wd9Zx/kF+3mN_8vR-tY4uLb0"
HOSTILE = "\x1b[2J\x1b]0;owned\x07\x1b]8;;http://evil.test/\x1b\\click\x1b]8;;\x1b\\\x9b2J\x08\r"
TERMINAL = ("\x1b", "\x9b", "\x9d", "\x07", "\x08", "\r", "owned")


def _echoes(key: str) -> str:
    """The key, written as a server could echo it."""
    return " | ".join(f"{name}={form}" for name, form in encodings(key).items())


class EchoServer(ThreadingHTTPServer):
    """Answers by model name; remembers the keys it received."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.keys: list[str] = []
        self.models: list[str] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: EchoServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(404, b'{"error": {"message": "no such route"}}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        key = self.headers.get("authorization", "").removeprefix("Bearer ")
        self.server.keys.append(key)
        model = str(body.get("model"))
        self.server.models.append(model)
        echo_headers = {
            "x-request-id": key,
            "x-ratelimit-limit-requests": urllib.parse.quote(key, safe=""),
            "www-authenticate": "Basic " + base64.b64encode(f"u:{key}".encode()).decode(),
        }
        if model == "echo-401":
            every_char = "".join(f"\\u{ord(c):04x}" for c in key)
            message = f"Incorrect API key provided: {every_char}. {HOSTILE}"
            text = json.dumps({"error": {"message": "", "type": "auth"}}).replace(
                '"message": ""', '"message": "' + message.replace("\x1b", "\\u001b") + '"'
            )
            raw = text + " " + _echoes(key)
            self._send(401, raw.encode(), echo_headers)
        elif model == "echo-stream":
            chunks = [f"your key: {form} " for form in encodings(key).values()] + [HOSTILE]
            self._stream(chunks, echo_headers)
        else:  # an error event inside the 200 stream
            error = {"error": {"message": f"key {json.dumps(key)} revoked {HOSTILE}"}}
            self._stream(["ok "], echo_headers, json.dumps(error))

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, texts: list[str], headers: dict[str, str], error: str = "") -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        for text in texts:
            chunk = {"id": "c1", "choices": [{"index": 0, "delta": {"content": text}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if error:
            self.wfile.write(f"data: {error}\n\n".encode())
        done = {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self.wfile.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def server() -> Iterator[EchoServer]:
    srv = EchoServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


SINGLE = "{kind: single, prompt_cache: as_sent, prompts: [hi], repeats: 1, warmup: 0}"


def config(
    base_url: str,
    models: dict[str, str],
    key_env: str = "LABKIT_ECHO_KEY",
    experiment: str = SINGLE,
) -> str:
    providers = "".join(
        f"  - {{id: {pid}, kind: openai_compatible, model: {model}, base_url: '{base_url}', "
        f"api_key_env: {key_env if pid != 'nokey' else 'LABKIT_ECHO_UNSET'}}}\n"
        for pid, model in models.items()
    )
    return "name: echo\nproviders:\n" + providers + f"experiments:\n  - {experiment}\n"


def run(tmp_path: Path, text: str, report: bool = True) -> tuple[Any, Path | None]:
    cfg = tmp_path / "echo.yaml"
    cfg.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    args = ["run", str(cfg), "--out", str(out)] + ([] if report else ["--no-report"])
    result = CliRunner().invoke(app, args)
    runs = list(out.iterdir()) if out.exists() else []
    return result, (runs[0] if runs else None)


def outputs(result: Any, folder: Path) -> dict[str, str]:
    """Everything labkit wrote or printed, as text (parquet read back cell by cell)."""
    texts = {"stdout": result.stdout, "stderr": result.stderr}
    for path in folder.rglob("*"):
        if path.suffix == ".parquet":
            texts[str(path)] = pd.read_parquet(path).to_csv()
        elif path.is_file():
            texts[str(path)] = path.read_bytes().decode("utf-8", errors="replace")
    return texts


def test_a_key_echoed_in_every_encoding_reaches_no_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EchoServer
) -> None:
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY + "\r\n")  # a .env saved with CRLF
    monkeypatch.delenv("LABKIT_ECHO_UNSET", raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):  # a dead proxy: loopback bypasses
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    models = {"p401": "echo-401", "pstream": "echo-stream", "perr": "echo-error", "nokey": "x"}
    result, folder = run(tmp_path, config(server.base_url, models))
    assert folder is not None, result.output
    # The key was sent (stripped) and echoed; the unset variable's provider sent nothing.
    assert server.keys == [KEY] * 3
    assert sorted(server.models) == ["echo-401", "echo-error", "echo-stream"]
    assert "skipping provider 'nokey': set LABKIT_ECHO_UNSET to run it" in result.output
    texts = outputs(result, folder)
    assert {Path(p).name for p in texts} >= {
        "records.jsonl",
        "manifest.json",
        "lab.json",
        "summary.txt",
        "report.md",
        "report.html",
        "summary.csv",
        "summary.parquet",
    }
    for where, text in texts.items():
        assert leaked(text, KEY) == [], f"key leaked into {where}"
    for where in ("stdout", "stderr", "summary.txt", "report.md", "report.html"):
        text = next(t for p, t in texts.items() if p == where or p.endswith("/" + where))
        assert not [c for c in TERMINAL if c in text], f"terminal escapes in {where}"
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    by_id = {r["provider"]: r for r in records}
    assert by_id["p401"]["error"]["status"] == 401
    assert by_id["perr"]["error"]["kind"] == "stream_error"
    assert by_id["pstream"]["request_id"] == "***"
    # Records are data: the text is kept as sent (escapes included), only the key is masked.
    assert HOSTILE in by_id["pstream"]["output_text"]
    assert by_id["pstream"]["output_text"].count("***") >= len(encodings(KEY))


def test_worker_processes_read_the_key_themselves_and_leak_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EchoServer
) -> None:
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY + "\r\n")
    load = "{kind: load, concurrency: [2], requests: 2, warmup: 0, prompts: [hi], workers: 2}"
    text = config(server.base_url, {"p": "echo-stream"}, experiment=load)
    result, folder = run(tmp_path, text, False)
    assert folder is not None, result.output
    assert (folder / "worker-logs").is_dir()
    assert len(server.keys) >= 2 and set(server.keys) == {KEY}  # every worker sent it, stripped
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    assert {r["tags"].get("workers") for r in records if not r["warmup"]} == {"2"}
    for where, output in outputs(result, folder).items():
        assert leaked(output, KEY) == [], f"key leaked into {where}"


def test_unset_key_variable_skips_an_openai_compatible_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EchoServer
) -> None:
    monkeypatch.delenv("LABKIT_ECHO_UNSET", raising=False)
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY)
    result, _ = run(tmp_path, config(server.base_url, {"nokey": "echo-stream"}), False)
    assert result.exit_code != 0
    assert server.models == []  # nothing was sent without the key
    assert "skipping provider 'nokey': set LABKIT_ECHO_UNSET to run it" in result.output


@pytest.mark.parametrize(
    "value", [KEY, "sk_live_51HxPLANTED0123456789abcdef", "a1b2c3d4e5f6a7b8c9d0e1f2"]
)
def test_a_key_given_as_api_key_env_is_refused_and_never_echoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EchoServer, value: str
) -> None:
    text = config(server.base_url, {"p": "echo-stream"}).replace("LABKIT_ECHO_KEY", f"'{value}'")
    result, folder = run(tmp_path, text, False)
    assert result.exit_code != 0 and folder is None and server.models == []
    assert "providers[0].api_key_env" in result.output
    assert value not in result.output and value[:12] not in result.output


def test_a_key_that_is_no_header_value_is_one_line_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: EchoServer
) -> None:
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY[:20] + "\x1b[2J\x01" + KEY[20:])
    result, folder = run(tmp_path, config(server.base_url, {"p": "echo-stream"}), False)
    assert server.models == []
    assert "skipping provider 'p': LABKIT_ECHO_KEY holds characters a key cannot have" in (
        result.output
    )
    assert folder is not None
    for where, text in outputs(result, folder).items():
        assert leaked(text, KEY[:20]) == [] and KEY[20:] not in text, where
        assert "\x1b" not in text and "\x01" not in text, where


def test_a_dead_proxy_for_a_remote_host_is_named_without_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name in ("HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://me:hunter2pass@127.0.0.1:{port}")
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY)
    result, folder = run(tmp_path, config("http://api.remote.test/v1", {"p": "m"}), False)
    assert folder is not None
    (record,) = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    assert record["error"]["kind"] == "connection"
    assert f"proxy http://127.0.0.1:{port} (from HTTP_PROXY)" in record["error"]["message"]
    for where, text in outputs(result, folder).items():
        assert "hunter2pass" not in text, where


def test_a_socks_proxy_without_its_extra_is_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALL_PROXY", "socks5://me:hunter2pass@127.0.0.1:1080")
    monkeypatch.setenv("LABKIT_ECHO_KEY", KEY)
    result, _ = run(tmp_path, config("http://api.remote.test/v1", {"p": "m"}), False)
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "skipping provider 'p': requests would go through proxy socks5://127.0.0.1:1080 " in (
        result.output
    )
    assert "(from ALL_PROXY)" in result.output
    assert "httpx[socks]" in result.output and "hunter2pass" not in result.output
    assert "Traceback" not in result.output
