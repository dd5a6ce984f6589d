"""A fake Prometheus ``/metrics`` endpoint on 127.0.0.1, serving documented shapes.

`MetricsServer(body)` answers every GET with `body(n)` (n: the scrape's number, from 0), so
a test can make gauges and histograms move from one scrape to the next. The shapes in
``metrics_shapes/`` are llama-server's output as the pinned build writes it (captured from
the real binary with ``--metrics``) and vLLM's, as its documentation shows it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

SHAPES = Path(__file__).parent / "metrics_shapes"


def shape(name: str) -> str:
    """One stored /metrics body (`vllm`, `llamacpp`)."""
    return (SHAPES / f"{name}.prom").read_text(encoding="utf-8")


def vllm_body(
    n: int, *, running: float = 4.0, waiting: float = 2.0, ttft_s: float = 0.03, per_scrape: int = 5
) -> str:
    """vLLM's shape after `n` scrapes, each adding `per_scrape` TTFT observations of
    `ttft_s` seconds and as many inter-token gaps of 5–10 ms."""
    bounds = [0.01, 0.02, 0.04, 0.08]
    seen = n * per_scrape
    label = 'model_name="m"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{label}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{label}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{label}}} {min(1.0, 0.1 * n)}",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for le in bounds:
        count = seen if ttft_s <= le else 0
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}",{label}}} {count}')
    lines += [
        f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",{label}}} {seen}',
        f"vllm:time_to_first_token_seconds_count{{{label}}} {seen}",
        f"vllm:time_to_first_token_seconds_sum{{{label}}} {seen * ttft_s}",
        "# TYPE vllm:inter_token_latency_seconds histogram",
        f'vllm:inter_token_latency_seconds_bucket{{le="0.005",{label}}} 0',
        f'vllm:inter_token_latency_seconds_bucket{{le="0.01",{label}}} {seen}',
        f'vllm:inter_token_latency_seconds_bucket{{le="+Inf",{label}}} {seen}',
        f"vllm:inter_token_latency_seconds_count{{{label}}} {seen}",
        f"vllm:inter_token_latency_seconds_sum{{{label}}} {seen * 0.0075}",
    ]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves `body(n)` at any path; `status` other than 200 answers that instead."""

    def __init__(self, body: Callable[[int], str], status: int = 200) -> None:
        self.scrapes = 0
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                n = outer.scrapes
                outer.scrapes += 1
                outer.paths.append(self.path)
                data = body(n).encode()
                self.send_response(status)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
