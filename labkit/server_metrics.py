"""A server's own Prometheus metrics, scraped during a run: one sample per scrape, and what
they say over a time window (a load level).

The scraper (`labkit.runner.scrape`) parses each ``/metrics`` body with prometheus-client's
text parser and keeps a small typed summary of it (`ServerMetricsSample`: requests running and
waiting, KV-cache use, TTFT and inter-token histograms), one JSON line per scrape in
``server-metrics-<provider>.jsonl``. Which metric of llama-server, vLLM and SGLang fills each
figure: docs/experiments.md, "Load levels" (the server's own metrics). A leaf module
(records-level): the report reads these files from a copied run folder with no provider code
and no network.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labkit.figures import ServerLevelMetrics
from labkit.filenames import safe_filename
from labkit.timing import percentile

__all__ = [
    "ServerMetricsSample",
    "histogram_quantile",
    "metrics_file_name",
    "parse_metrics_text",
    "read_server_metrics",
    "server_level_metrics",
]

#: Cumulative histogram buckets: (upper bound in seconds, observations at or below it).
Buckets = list[tuple[float, float]]

# Candidate metric (family) names per summary figure, first match wins.
_RUNNING: tuple[str, ...] = (
    "llamacpp:requests_processing",
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
)
_WAITING: tuple[str, ...] = (
    "llamacpp:requests_deferred",
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
)
_KV_USE: tuple[str, ...] = (
    "llamacpp:kv_cache_usage_ratio",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
)
_TTFT: tuple[str, ...] = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
_ITL: tuple[str, ...] = (
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:time_per_output_token_seconds",
)


class ServerMetricsSample(BaseModel):
    """One scrape of a server's ``/metrics``: a line of ``server-metrics-<provider>.jsonl``."""

    # The open-ended bucket's bound is written "Infinity": standard JSON has no infinity.
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")

    provider: str = Field(description="The provider id whose server was scraped.")
    t_mono_ns: int = Field(
        description="`time.perf_counter_ns()` just before the scrape was sent: the records' "
        "clock (`RequestRecord.t_start_mono_ns`)."
    )
    at: str = Field(description="Wall clock (UTC ISO 8601) at `t_mono_ns`.")
    scrape_ms: float = Field(description="How long the scrape took, request to parsed body.")
    running: float | None = Field(default=None, description="Requests the server is running.")
    waiting: float | None = Field(
        default=None, description="Requests waiting in the server's queue (deferred)."
    )
    kv_cache_use: float | None = Field(
        default=None, description="Fraction of the server's KV cache in use (0–1)."
    )
    ttft_buckets: Buckets | None = Field(
        default=None,
        description="The server's time-to-first-token histogram, cumulative "
        "(upper bound s, count), since the server started.",
    )
    itl_buckets: Buckets | None = Field(
        default=None, description="The server's inter-token latency histogram, cumulative."
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="Summary field → the metric it was read from."
    )


def metrics_file_name(provider_id: str) -> str:
    """The run folder's file of one provider's scrapes."""
    return f"server-metrics-{safe_filename(provider_id)}.jsonl"


def parse_metrics_text(text: str) -> tuple[dict[str, float | Buckets], dict[str, str]]:
    """The summary figures found in one Prometheus text body, and the metric each came from.

    Names are matched by what arrives, whichever server sent it (first match wins); series of
    one metric with different labels (models, engines) are added up (gauges of use: the
    largest is kept).

    Raises ValueError when the body is not Prometheus text.
    """
    families = {f.name: f for f in text_string_to_metric_families(text)}
    found: dict[str, float | Buckets] = {}
    sources: dict[str, str] = {}
    for field, names, combine in (
        ("running", _RUNNING, sum),
        ("waiting", _WAITING, sum),
        ("kv_cache_use", _KV_USE, max),
    ):
        for name in names:
            family = families.get(name)
            values = [s.value for s in family.samples if s.name == name] if family else []
            if values:
                found[field] = float(combine(values))
                sources[field] = name
                break
    for field, names in (("ttft_buckets", _TTFT), ("itl_buckets", _ITL)):
        for name in names:
            family = families.get(name)
            if family is None or family.type != "histogram":
                continue
            totals: dict[float, float] = {}
            for s in family.samples:
                if s.name == name + "_bucket" and "le" in s.labels:
                    le = float(s.labels["le"])
                    totals[le] = totals.get(le, 0.0) + float(s.value)
            if totals:
                found[field] = sorted(totals.items())
                sources[field] = name
                break
    return found, sources


def read_server_metrics(run_dir: Path, provider_id: str) -> list[ServerMetricsSample]:
    """One provider's scrapes from a run folder, in time order (none: an empty list). Lines
    that are not samples (a last line cut short) are skipped."""
    path = Path(run_dir) / metrics_file_name(provider_id)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    samples = []
    for line in lines:
        try:
            samples.append(ServerMetricsSample.model_validate(json.loads(line)))
        except (ValueError, ValidationError):
            continue
    samples.sort(key=lambda s: s.t_mono_ns)
    return samples


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The `q`-quantile (0–1) of cumulative `buckets`, interpolated linearly inside the
    bucket it falls in, as Prometheus' `histogram_quantile` does (None: no observations).
    A quantile in the open-ended bucket is the largest finite bound."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


def _delta(end: Buckets, start: Buckets | None) -> Buckets:
    """Observations between two cumulative histograms; the later one alone when the
    counts went down (the server restarted in between)."""
    if not start:
        return end
    before = dict(start)
    delta = [(le, count - before.get(le, 0.0)) for le, count in end]
    return end if any(c < 0 for _, c in delta) else delta


def _window_buckets(
    samples: Sequence[ServerMetricsSample], start_ns: int, end_ns: int, field: str
) -> tuple[Buckets | None, str | None]:
    """The histogram `field`'s observations from the last scrape at or before `start_ns` to
    the first at or after `end_ns` (the nearest inside the window where there is none)."""
    having = [s for s in samples if getattr(s, field)]
    if not having:
        return None, None
    before = [s for s in having if s.t_mono_ns <= start_ns]
    after = [s for s in having if s.t_mono_ns >= end_ns]
    inside = [s for s in having if start_ns < s.t_mono_ns < end_ns]
    first = before[-1] if before else (inside[0] if inside else None)
    last = after[0] if after else (inside[-1] if inside else None)
    if first is None or last is None or last is first:
        return None, None
    end: Buckets = getattr(last, field)
    return _delta(end, getattr(first, field)), last.sources.get(field)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _values(samples: Iterable[ServerMetricsSample], field: str) -> list[float]:
    return sorted(v for s in samples if (v := getattr(s, field)) is not None)


def server_level_metrics(
    samples: Sequence[ServerMetricsSample], start_ns: int, end_ns: int
) -> ServerLevelMetrics | None:
    """What the server's metrics said from `start_ns` to `end_ns` (a level's first request
    sent to its last stream's end, on the records' clock); None: no scrape in the window
    and no histogram around it."""
    inside = [s for s in samples if start_ns <= s.t_mono_ns <= end_ns]
    ttft, ttft_source = _window_buckets(samples, start_ns, end_ns, "ttft_buckets")
    itl, itl_source = _window_buckets(samples, start_ns, end_ns, "itl_buckets")
    if not inside and ttft is None and itl is None:
        return None
    running = _values(inside, "running")
    waiting = _values(inside, "waiting")
    kv = _values(inside, "kv_cache_use")
    sources: dict[str, str] = {}
    for s in inside:
        sources.update(s.sources)
    for name, source in (("ttft_buckets", ttft_source), ("itl_buckets", itl_source)):
        if source:
            sources[name] = source
    return ServerLevelMetrics(
        scrapes=len(inside),
        running_p50=percentile(running, 50) if running else None,
        running_max=running[-1] if running else None,
        waiting_p50=percentile(waiting, 50) if waiting else None,
        waiting_max=waiting[-1] if waiting else None,
        kv_cache_use_max=kv[-1] if kv else None,
        ttft_observations=int(ttft[-1][1]) if ttft else None,
        ttft_ms_p50=_ms(histogram_quantile(0.5, ttft)) if ttft else None,
        ttft_ms_p90=_ms(histogram_quantile(0.9, ttft)) if ttft else None,
        itl_ms_p50=_ms(histogram_quantile(0.5, itl)) if itl else None,
        itl_ms_p90=_ms(histogram_quantile(0.9, itl)) if itl else None,
        sources=sources,
    )
