"""A load level's row, shared by the kinds that run levels (`load`, `sweep`, `trace`),
with the server's own metrics and the prompt-cache hits over it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures
from labkit.figures.slo import SLOReport
from labkit.figures.stats import Percentiles

__all__ = ["LoadLevel", "LoadLevelCache", "RunsLevels", "ServerLevelMetrics"]


class ServerLevelMetrics(_Figures):
    """What the server's own Prometheus metrics said over one load level
    (`labkit.server_metrics`): gauges from the scrapes inside the level's window, the
    latency quantiles from histogram bucket deltas across it."""

    scrapes: int = Field(default=0, description="Scrapes taken inside the level's window.")
    running_p50: float | None = Field(default=None, description="Requests running, median.")
    running_max: float | None = Field(default=None, description="Requests running, most.")
    waiting_p50: float | None = Field(
        default=None, description="Requests waiting in the server's queue, median."
    )
    waiting_max: float | None = Field(default=None, description="Requests waiting, most.")
    kv_cache_use_max: float | None = Field(
        default=None, description="Largest fraction of the KV cache in use (0–1)."
    )
    ttft_observations: int | None = Field(
        default=None, description="Requests in the server's TTFT histogram over the level."
    )
    ttft_ms_p50: float | None = Field(default=None, description="Server TTFT p50 (histogram).")
    ttft_ms_p90: float | None = Field(default=None, description="Server TTFT p90 (histogram).")
    itl_ms_p50: float | None = Field(
        default=None, description="Server inter-token latency p50 (histogram)."
    )
    itl_ms_p90: float | None = Field(
        default=None, description="Server inter-token latency p90 (histogram)."
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="Figure → the server metric it was read from."
    )


class LoadLevelCache(_Figures):
    """A load level's prompt-cache hits as the provider counted them (`cached_tokens`,
    `cache_read_input_tokens`, llama.cpp `cache_n`), beside the TTFT they bought."""

    counted: int = Field(description="Successful requests that carried a cached-token count.")
    hits: int = Field(description="Of those, requests with at least half the prompt cached.")
    cached_tokens_p50: float | None = None
    cached_share: float | None = Field(
        default=None, description="Cached prompt tokens / prompt tokens, over the level."
    )
    ttft_ms_p50_hit: float | None = None
    ttft_ms_p50_miss: float | None = None


class LoadLevel(_Figures):
    """One pass of one load level: a row of the load table."""

    level: str = Field(description="`c8` or `r2.5`: the level's tag in records.")
    title: str = Field(description="`concurrency 8` or `2.5 req/s`.")
    mode: Literal["concurrency", "rate"]
    arrival: str | None = None
    target: float
    workers: int | None = None
    requests: int = 0
    ok: int = 0
    failed: int = 0
    duration_s: float | None = None
    achieved_rate_rps: float | None = None
    completed_rps: float | None = None
    mean_in_flight: float | None = None
    output_tokens_per_s: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    ttft: Percentiles | None = Field(
        default=None,
        description="Client TTFT p50, p90, p99 with their intervals: the ttft_ms_p* values, "
        "and what the answer and the tables say.",
    )
    decode_ms_per_token_p50: float | None = None
    decode_ms_per_token_p99: float | None = None
    e2e_ms_p50: float | None = None
    e2e_ms_p99: float | None = None
    queue_ms_p50: float | None = None
    queue_ms_p99: float | None = None
    queue_ms_max: float | None = None
    provider_queue_ms_p50: float | None = Field(
        default=None, description="The provider's own queue time (provider_timings.queue_ms)."
    )
    provider_queue_ms_p99: float | None = None
    ttft_beyond_prefill_ms_p50: float | None = Field(
        default=None,
        description="Median of client TTFT minus the provider's prefill (or its own TTFT): "
        "queue, network and front end together, where the provider reports no queue.",
    )
    loop_lag_ms_p50: float | None = None
    loop_lag_ms_max: float | None = None
    stamp_lateness_ms_p50: float | None = Field(
        default=None,
        description="What the level's output-event stamps are late by (labkit's self-check, "
        "client.stamp_lateness_ms_*): median over the events.",
    )
    stamp_lateness_ms_p99: float | None = Field(
        default=None, description="The same, 99th percentile over the level's events."
    )
    labkit_cpu_share: float | None = None
    client_bound: bool = False
    client_bound_fix: str | None = None
    slo: SLOReport | None = Field(default=None, description="The SLOs over this level.")
    server: ServerLevelMetrics | None = Field(
        default=None,
        description="The server's own metrics over the level, where it exposes /metrics.",
    )
    cache: LoadLevelCache | None = Field(
        default=None, description="Prompt-cache hits, where the provider counts them."
    )
    hosts: int | None = Field(
        default=None,
        description="Hosts that measured the level's records, where any was not the "
        "driver's (a level across machines); None: all on the driver's host.",
    )
    clock_uncertainty_ms: float | None = Field(
        default=None,
        description="How far those hosts' clocks may be off the driver's (the largest "
        "record's offset uncertainty plus half its drift; `labkit.clocksync`).",
    )

    @property
    def display_title(self) -> str:
        """The title as tables show it: the arrival process of a rate level included."""
        if self.mode == "rate" and self.arrival:
            return f"{self.title} ({self.arrival})"
        return self.title


class RunsLevels(ABC):
    """Figures of a kind that runs load levels: the run summary shows each answer's levels
    as a table, without knowing its kind."""

    @abstractmethod
    def levels_run(self) -> list[LoadLevel]:
        """The levels the answer ran, in the order they ran."""

    def levels_title(self) -> str:
        """What the table's title adds after `experiment · provider` (default: nothing)."""
        return ""
