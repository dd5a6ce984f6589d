"""`labkit export-otel` against failing collectors, real HTTP servers on 127.0.0.1: the
OpenTelemetry SDK's own log lines never reach the terminal raw (a Bearer token in
OTEL_EXPORTER_OTLP_HEADERS stays masked, a collector's terminal controls are stripped),
labkit says one line, and a failed export exits non-zero."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

RUN = Path(__file__).resolve().parents[1] / "scoring/peer_results/labkit/run"
TOKEN = "sk-otlp-token-4f8a9c2e71b3d605"


class _Denying(http.server.BaseHTTPRequestHandler):
    """A collector that answers 401, echoing the Authorization it got, with terminal
    controls, as a misconfigured proxy does."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = f"denied {self.headers.get('authorization')} \x1b[2J\x1b]0;owned\x07".encode()
        self.send_response(401, f"no {self.headers.get('authorization')}")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def denying_collector() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Denying)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("collector", ["denying", "closed"])
def test_a_failing_collector_is_one_line_with_no_token_and_a_failing_exit(
    tmp_path: Path, collector: str, request: pytest.FixtureRequest
) -> None:
    endpoint = (
        request.getfixturevalue("denying_collector") if collector == "denying" else _closed_port()
    )
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    env = {
        **os.environ,
        # the token, and a malformed second header the SDK quotes back with its controls
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{TOKEN},x-odd=\x1b[31m{TOKEN}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "COLUMNS": "300",
    }
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "export-otel", str(run), "--endpoint", endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    everything = done.stdout + done.stderr
    for path in run.rglob("*"):
        if path.is_file():
            everything += path.read_text(errors="replace")
    assert TOKEN not in everything and TOKEN[:12] not in everything
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout + done.stderr
    assert "Traceback" not in everything
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines  # labkit's one line; none of the SDK's own
    assert re.search(r"exported 0 spans to http://127\.0\.0\.1:\d+", lines[0])
    assert "spans to http" in lines[0] and "metrics to http" in lines[0]
