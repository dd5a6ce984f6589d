"""Scraping a server's /metrics during a run, over real sockets on 127.0.0.1: a fake
endpoint serving vLLM's and llama-server's documented shapes, a dead one, a wrong one."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.providers import provider_class
from labkit.providers.fake import FakeSchedule
from labkit.report import write_report
from labkit.runner import RunOptions, prepare_run
from labkit.runner.run import RunResult
from labkit.runner.scrape import MetricsScraper
from labkit.runner.summary import load_tables
from labkit.server_metrics import metrics_file_name, read_server_metrics
from labkit.truth.process import TruthServer
from tests.runner.fake_metrics import MetricsServer, shape, vllm_body
from tests.support.misbehaving import MisbehavingServer, body_reply, http_head, repeat

pytestmark = pytest.mark.integration


def _scrape_for(scraper: MetricsScraper, seconds: float) -> None:
    scraper.start()
    time.sleep(seconds)
    scraper.stop()


def test_scrapes_land_on_the_records_clock_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / metrics_file_name("v")
    with MetricsServer(vllm_body) as server:
        before = time.perf_counter_ns()
        scraper = MetricsScraper("v", server.url, path, interval_s=0.05)
        _scrape_for(scraper, 0.3)
        after = time.perf_counter_ns()
    report = scraper.report
    assert report.failed == 0 and 4 <= report.scrapes <= 8, report
    assert server.scrapes == report.scrapes and set(server.paths) == {"/metrics"}
    samples = read_server_metrics(tmp_path, "v")
    assert len(samples) == report.scrapes == len(path.read_text().splitlines())
    assert all(before <= s.t_mono_ns <= after for s in samples)
    gaps = [(b.t_mono_ns - a.t_mono_ns) / 1e6 for a, b in itertools.pairwise(samples)]
    assert all(30 < g < 150 for g in gaps), gaps  # a fixed 50 ms schedule, late wake-ups aside
    assert samples[0].running == 4.0 and samples[0].waiting == 2.0
    assert samples[-1].ttft_buckets is not None and samples[-1].ttft_buckets[-1][1] > 0


def test_a_dead_endpoint_is_counted_not_raised(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraper = MetricsScraper(
        "d", f"http://127.0.0.1:{port}/metrics", tmp_path / "m.jsonl", interval_s=0.05
    )
    _scrape_for(scraper, 0.25)
    report = scraper.report
    assert report.scrapes == 0 and report.failed >= 3
    assert report.first_error is not None and "Connect" in report.first_error
    note = report.failure_note("d")
    assert note is not None and f"{report.failed} of {report.failed} scrapes" in note


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (body_reply(501, b'{"error":"no metrics"}', "application/json"), "HTTP 501"),
        (body_reply(200, b"<html>\n<body>hi</body></html>\n", "text/html"), "ValueError"),
        (
            [
                http_head(200, {"content-type": "text/plain", "connection": "close"}),
                *repeat(b"# " + b"x" * 1022 + b"\n", 2048),
            ],
            "body over",
        ),
    ],
    ids=["501", "not-prometheus", "too-large"],
)
def test_a_wrong_answer_is_one_failure_per_scrape(
    tmp_path: Path, reply: list[bytes | float], expected: str
) -> None:
    with MisbehavingServer(lambda head: reply) as server:
        scraper = MetricsScraper(
            "w",
            server.base_url + "/metrics",
            tmp_path / "m.jsonl",
            interval_s=0.1,
            max_body_bytes=1024 * 1024,
        )
        _scrape_for(scraper, 0.15)
    assert scraper.report.scrapes == 0 and scraper.report.failed >= 1
    assert expected in (scraper.report.first_error or "")


SCHEDULE = FakeSchedule(first_token_ms=20, token_interval_ms=4, tokens=16)


def _run_load(
    tmp_path: Path, metrics_url: str, experiment: dict[str, Any] | None = None
) -> RunResult:
    async def main() -> RunResult:
        with TruthServer.of(SCHEDULE) as chat:
            provider = {
                "id": "s",
                "kind": "openai_compatible",
                "model": "m",
                "base_url": chat.base_url,
                "metrics_url": metrics_url,
                "metrics_interval_s": 0.05,
            }
            config = parse_config(
                {
                    "name": "scrape",
                    "providers": [provider],
                    "experiments": [
                        {
                            "kind": "load",
                            "concurrency": [1, 4],
                            "requests": 8,
                            "warmup": 1,
                            **(experiment or {}),
                        }
                    ],
                }
            )
            return await prepare_run(config, RunOptions(out_dir=tmp_path)).run()

    return asyncio.run(main())


def test_a_load_run_stores_the_scrapes_and_reports_them_per_level(tmp_path: Path) -> None:
    with MetricsServer(vllm_body) as server:
        result = _run_load(tmp_path, server.url)
    assert result.status == "completed"
    folder = result.folder.path
    samples = read_server_metrics(folder, "s")
    assert samples and all(s.sources.get("running") == "vllm:num_requests_running" for s in samples)
    (answer,) = result.lab.answers
    rows = answer.figures.levels  # type: ignore[union-attr]
    for row in rows:
        m = row.server
        assert m is not None, row.level
        assert m.running_max == 4.0 and m.waiting_max == 2.0
        # The fake adds 5 observations of 30 ms per scrape: all in the (20, 40] ms bucket.
        assert m.ttft_observations and m.ttft_observations % 5 == 0
        assert m.ttft_ms_p50 is not None and 20.0 < m.ttft_ms_p50 <= 40.0
        assert m.itl_ms_p50 is not None and 5.0 < m.itl_ms_p50 <= 10.0
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = manifest["providers"]["s"]["server_metrics"]
    assert entry["failed"] == 0 and entry["scrapes"] == len(samples)
    assert entry["file"] == metrics_file_name("s")
    # The report works from the folder alone, copied elsewhere with no server around.
    copy = tmp_path / "copied"
    copy.mkdir()
    for f in folder.iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    report = write_report(copy).md.read_text()
    assert "server TTFT p50" in report and "vllm:time_to_first_token_seconds" in report
    assert "waiting max" in report
    (table,) = load_tables(result.lab)
    assert any("server" in str(c.header) for c in table.columns)


def test_a_dead_metrics_endpoint_never_fails_the_run(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    messages: list[str] = []
    url = f"http://127.0.0.1:{port}/metrics"

    async def main() -> RunResult:
        with TruthServer.of(SCHEDULE) as chat:
            config = parse_config(
                {
                    "name": "dead",
                    "providers": [
                        {
                            "id": "s",
                            "kind": "openai_compatible",
                            "model": "m",
                            "base_url": chat.base_url,
                            "metrics_url": url,
                            "metrics_interval_s": 0.05,
                        }
                    ],
                    "experiments": [
                        {"kind": "load", "concurrency": [2], "requests": 4},
                        {"kind": "single", "prompt_cache": "as_sent", "repeats": 2},
                    ],
                }
            )
            runner = prepare_run(config, RunOptions(out_dir=tmp_path))
            runner.on_message = messages.append
            return await runner.run()

    result = asyncio.run(main())
    assert result.status == "completed"
    assert all(r.error is None for r in result.records)
    notes = [m for m in messages if "scrapes" in m]
    assert len(notes) == 1 and url in notes[0], messages  # once, not per scrape or experiment
    load = next(a for a in result.lab.answers if a.experiment == "load")
    assert all(row.server is None for row in load.figures.levels)  # type: ignore[union-attr]
    report = write_report(result.folder.path).md.read_text()
    assert "scrapes of its server's metrics" in report


def test_metrics_url_may_be_a_path_on_the_base_url_host(tmp_path: Path) -> None:
    with MetricsServer(lambda n: shape("llamacpp")) as server:
        base = server.url.removesuffix("/metrics")
        config = parse_config(
            {
                "name": "p",
                "providers": [
                    {
                        "id": "s",
                        "kind": "openai_compatible",
                        "model": "m",
                        "base_url": base + "/v1",
                        "metrics_url": "/metrics",
                    }
                ],
                "experiments": [{"kind": "single", "prompt_cache": "as_sent"}],
            }
        )
        settings = config.providers[0]
        provider = provider_class(settings.kind)(settings)
        assert provider.metrics_url() == server.url
        asyncio.run(provider.aclose())
