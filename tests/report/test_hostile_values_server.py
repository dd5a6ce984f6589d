"""A server on 127.0.0.1 whose durations are `1e400`, measured by a provider whose id carries
terminal control characters, through `labkit run` as a process with its report: the process
ends normally (the PNG renderer once aborted it, SIGABRT, on such an id), nothing printed
holds a control character, and every JSON file of the run folder is strict JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from labkit.records import RequestRecord
from labkit.report.native import for_native_renderer

pytestmark = pytest.mark.integration

HOSTILE_ID = "evil\x1b]0;owned\x07\x1b[2J\x01\x08\ufffe"
CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]
# Written as text: json.dumps cannot write 1e400, a server can.
TIMINGS = (
    '{"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":2,"total_tokens":3},'
    '"timings":{"prompt_n":2,"prompt_ms":1e400,"prompt_per_second":-1e400,'
    '"predicted_n":1,"predicted_ms":1e400,"predicted_per_second":1e400}}'
)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        events = [json.dumps(c | {"id": "c1", "object": "chat.completion.chunk"}) for c in CHUNKS]
        body = "".join(f"data: {e}\n\n" for e in [*events, TIMINGS, "[DONE]"]).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in strict JSON")

    return json.loads(text, parse_constant=refuse)


def test_infinite_durations_and_a_control_character_id_end_well(
    tmp_path: Path, server: str
) -> None:
    config = tmp_path / "hostile.yaml"
    config.write_text(
        "name: hostile\n"
        f"providers: [{{id: {json.dumps(HOSTILE_ID)}, kind: openai_compatible, model: m, "
        f"base_url: {json.dumps(server)}}}]\n"
        "experiments: [{kind: single, prompt_cache: as_sent, "
        "prompts: [a, b], repeats: 3, warmup: 0}]\n"
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr  # a native abort would be -6
    printed = done.stdout + done.stderr
    for control in ("\x1b", "\x07", "\x01", "\x08", "owned\x07"):
        assert control not in printed
    (run_dir,) = list(out.iterdir())
    assert list((run_dir / "report_files").glob("*.png"))
    assert "report.md" in printed
    for name in ("lab.json", "manifest.json"):
        _strict((run_dir / name).read_text())
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json_line(json.dumps(_strict(line))) for line in lines]
    assert len(records) == 6 and all(r.error is None for r in records)
    for r in records:  # each record kept, the infinite durations as no value
        assert r.provider_timings.prefill_ms is None and r.provider_timings.decode_ms is None
        assert r.provider_timings.prefill_tokens == 2


def test_every_string_handed_to_the_renderer_is_one_it_can_draw() -> None:
    import vl_convert

    spec = {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "title": HOSTILE_ID + "\ud800\uffff",
        "data": {"values": [{"provider": HOSTILE_ID, "v": 1}]},
        "mark": "bar",
        "encoding": {
            "x": {"field": "provider", "type": "nominal"},
            "y": {"field": "v", "type": "quantitative"},
        },
    }
    clean = for_native_renderer(spec)
    assert clean["data"]["values"][0]["provider"] == "evil"
    assert vl_convert.vegalite_to_png(clean, scale=1).startswith(b"\x89PNG")
