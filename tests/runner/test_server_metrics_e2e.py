"""A `load` run against the managed llama-server (started with `--metrics`) scrapes its
/metrics, stores the samples in the run folder, and the report shows them per level."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.local import ensure_setup
from labkit.report import write_report
from labkit.runner import RunOptions, prepare_run
from labkit.server_metrics import read_server_metrics

pytestmark = pytest.mark.e2e


def test_load_on_the_managed_llama_server_shows_its_queue_per_level(tmp_path: Path) -> None:
    ensure_setup()
    config = parse_config(
        {
            "name": "server-metrics",
            "providers": [{"id": "local", "kind": "llamacpp", "slots": 1, "ctx_size": 1024,
                           "metrics_interval_s": 0.2}],
            "experiments": [
                {"kind": "load", "concurrency": [1, 3], "requests": 6, "warmup": 1,
                 "output_tokens": 24, "workers": 1}
            ],
        }
    )  # fmt: skip
    result = asyncio.run(prepare_run(config, RunOptions(out_dir=tmp_path)).run())
    assert result.status == "completed"
    assert all(r.error is None for r in result.records)
    samples = read_server_metrics(result.folder.path, "local")
    assert len(samples) >= 3
    assert samples[0].sources == {
        "running": "llamacpp:requests_processing",
        "waiting": "llamacpp:requests_deferred",
    }
    (answer,) = result.lab.answers
    c1, c3 = answer.figures.levels  # type: ignore[union-attr]
    assert c1.server is not None and c3.server is not None
    assert c1.server.scrapes >= 1 and c3.server.scrapes >= 1
    # One slot: never more than one request running; three streams leave two deferred.
    assert c1.server.running_max is not None and c1.server.running_max <= 1
    assert c3.server.running_max == 1
    assert c1.server.waiting_max == 0
    assert c3.server.waiting_max is not None and c3.server.waiting_max >= 1
    assert c3.server.ttft_ms_p50 is None  # llama-server exports no TTFT histogram
    assert "median TTFT at concurrency 3" in answer.answer  # the server's figures are tables
    paths = write_report(result.folder.path)
    report = paths.md.read_text()
    assert "llamacpp:requests_deferred" in report and "waiting max" in report
    assert "Requests running and waiting in the server" in report
    assert (paths.files / "server_queue.png").stat().st_size > 1000
