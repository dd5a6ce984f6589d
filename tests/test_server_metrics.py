"""`labkit.server_metrics`: Prometheus text → typed samples, and a level's window of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.server_metrics import (
    ServerMetricsSample,
    histogram_quantile,
    metrics_file_name,
    parse_metrics_text,
    read_server_metrics,
    server_level_metrics,
)
from tests.runner.fake_metrics import shape, vllm_body

pytestmark = pytest.mark.unit

MS = 1_000_000


def test_llama_server_shape_gives_running_and_waiting_only() -> None:
    found, sources = parse_metrics_text(shape("llamacpp"))
    assert found == {"running": 0.0, "waiting": 0.0}
    assert sources == {
        "running": "llamacpp:requests_processing",
        "waiting": "llamacpp:requests_deferred",
    }


def test_vllm_shape_sums_series_and_keeps_the_fullest_kv_cache() -> None:
    found, sources = parse_metrics_text(shape("vllm"))
    assert found["running"] == 5.0  # engines 0 and 1 added up
    assert found["waiting"] == 1.0
    assert found["kv_cache_use"] == 0.42  # the fuller engine's cache
    assert found["ttft_buckets"] == [
        (0.001, 0.0), (0.01, 0.0), (0.02, 8.0), (0.04, 16.0), (float("inf"), 16.0)
    ]  # fmt: skip
    assert sources["itl_buckets"] == "vllm:inter_token_latency_seconds"


def test_a_body_that_is_not_prometheus_text_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics_text("<html><body>not metrics</body></html>\n")


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    buckets = [(0.01, 0.0), (0.02, 8.0), (0.04, 16.0), (float("inf"), 16.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.02)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.03)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.015)
    # In the open-ended bucket: the largest finite bound, as Prometheus answers.
    assert histogram_quantile(0.9, [(0.1, 1.0), (float("inf"), 10.0)]) == pytest.approx(0.1)
    assert histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) is None


def _sample(t_ms: int, n: int, **over: object) -> ServerMetricsSample:
    found, sources = parse_metrics_text(vllm_body(n, **over))  # type: ignore[arg-type]
    return ServerMetricsSample.model_validate(
        {**found, "provider": "p", "t_mono_ns": t_ms * MS, "at": "x", "scrape_ms": 1.0,
         "sources": sources}
    )  # fmt: skip


def _at(t_ms: int, ttft: list[tuple[float, float]], running: float) -> ServerMetricsSample:
    return ServerMetricsSample(
        provider="p", t_mono_ns=t_ms * MS, at="x", scrape_ms=1.0, running=running,
        waiting=running - 2, kv_cache_use=running / 10, ttft_buckets=ttft,
        sources={"running": "vllm:num_requests_running"},
    )  # fmt: skip


def test_a_level_takes_histogram_deltas_across_its_window() -> None:
    inf = float("inf")
    # Scrapes every 100 ms; the level runs from 150 to 450 ms. Before it the histogram
    # already holds 10 observations in (40, 80] ms (an earlier level's).
    before = [(0.02, 0.0), (0.04, 0.0), (0.08, 10.0), (inf, 10.0)]
    samples = [_at(0, before, 2.0), _at(100, before, 2.0)]
    for i, t in enumerate((200, 300, 400, 500)):
        # 5 more per scrape in (20, 40] ms: the level's own.
        n = 5.0 * (i + 1)
        samples.append(_at(t, [(0.02, 0.0), (0.04, n), (0.08, 10 + n), (inf, 10 + n)], 3.0 + i))
    m = server_level_metrics(samples, 150 * MS, 450 * MS)
    assert m is not None
    assert m.scrapes == 3  # 200, 300, 400 ms
    assert (m.running_p50, m.running_max, m.waiting_max) == (4.0, 5.0, 3.0)
    assert m.kv_cache_use_max == pytest.approx(0.5)
    # From the 100 ms scrape (last before the start) to the 500 ms one (first after the
    # end): 20 observations, none of the earlier 10.
    assert m.ttft_observations == 20
    assert m.ttft_ms_p50 == pytest.approx(30.0)  # halfway into the (20, 40] ms bucket
    assert m.ttft_ms_p90 == pytest.approx(38.0)
    assert m.itl_ms_p50 is None
    assert m.sources == {"running": "vllm:num_requests_running"}


def test_vllm_shape_windows_give_itl_from_bucket_deltas() -> None:
    samples = [_sample(t, t // 100) for t in (0, 100, 200)]
    m = server_level_metrics(samples, 50 * MS, 150 * MS)
    assert m is not None and m.ttft_observations == 10  # 5 per scrape, 0 → 200 ms
    assert m.itl_ms_p50 == pytest.approx(7.5)  # all in (5, 10] ms
    assert m.sources["ttft_buckets"] == "vllm:time_to_first_token_seconds"


def test_a_server_restart_inside_the_window_uses_the_later_counts() -> None:
    samples = [_sample(0, 10), _sample(100, 2)]  # the counts went down: a restart
    m = server_level_metrics(samples, 50 * MS, 100 * MS)
    assert m is not None and m.ttft_observations == 10


def test_no_scrape_near_the_window_is_none() -> None:
    assert server_level_metrics([_sample(0, 1)], 10 * MS, 20 * MS) is None
    assert server_level_metrics([], 0, 1) is None


def test_samples_round_trip_the_file_and_bad_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / metrics_file_name("a/b")
    assert "/" not in path.name[len("server-metrics-") :]
    lines = [_sample(t, t).model_dump_json() for t in (2, 1)]
    path.write_text(lines[0] + "\n" + lines[1] + "\n{not json\n" + json.dumps({"x": 1}) + "\n")
    back = read_server_metrics(tmp_path, "a/b")
    assert [s.t_mono_ns for s in back] == [1 * MS, 2 * MS]
    assert back[0].ttft_buckets is not None and back[0].ttft_buckets[-1][0] == float("inf")
    assert '"Infinity"' in lines[0]  # standard JSON: no bare Infinity token
    assert read_server_metrics(tmp_path, "other") == []
