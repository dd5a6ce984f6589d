"""The request statistics of every experiment: a group's counts and percentiles, and
its TTFT split by owner."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from labkit.figures.base import _Figures
from labkit.figures.stats import Percentiles, Quantile

__all__ = ["RequestStats", "TTFTSplit"]


class TTFTSplit(_Figures):
    """TTFT split by owner: the provider's queue, the provider's prefill, and the rest
    (network and serving front end); each a median, with its interval, over the requests
    that had it (`labkit.analysis.split`, the one definition)."""

    ttft_ms: Quantile | None = None
    provider_queue_ms: Quantile | None = None
    queue_source: str | None = Field(
        default=None,
        description="`reported` by the provider; `idle`: 0 by construction (labkit alone "
        "used a managed server and never had more requests in flight than its slots); "
        "`keepalive`: the wait between the headers and the first event while the server "
        "sent keep-alive comments; joined with ` / ` when requests differed.",
    )
    provider_prefill_ms: Quantile | None = None
    prefill_source: str | None = Field(default=None, description="The field the prefill came from.")
    network_front_end_ms: Quantile | None = Field(
        default=None, description="Median per request of TTFT − queue − prefill."
    )
    not_derived: list[str] = Field(
        default_factory=list, description="The terms that could not be derived, and why."
    )
    client_bound: str | None = Field(
        default=None,
        description="Why labkit's self-check flagged these requests' stamps as late "
        "(client-bound): every term holds labkit's own delay. None: not flagged.",
    )
    # -- TTFT's client-side part (issue 30) --
    client_send_ms: Quantile | None = Field(
        default=None,
        description="Median per request of `client.send_ms`: the client's own side of the "
        "request path (t_start to the request's last byte handed to the kernel, less a "
        "connection opened inside), a part of network + front end.",
    )

    @field_validator(
        "ttft_ms", "provider_queue_ms", "provider_prefill_ms", "network_front_end_ms", mode="before"
    )
    @classmethod
    def _older_median(cls, value: Any) -> Any:
        """A lab.json from before intervals held a plain median: kept, its n unknown (0)."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"q": 0.5, "value": float(value), "n": 0, "min_n": 6}
        return value


class RequestStats(_Figures):
    """One provider × experiment × model × client path: its requests counted and its
    latencies' percentiles (`labkit.analysis.requests`). Computed once per run into
    `lab.json` (`LabResults.requests`); the run summary, the report's statistics and split
    tables and summary.csv render it."""

    provider: str
    experiment: str
    model: str | None = None
    client_path: str = Field(default="wire", description="`wire` or `sdk` (app.client_path).")
    levels: list[str] = Field(
        default_factory=list,
        description="The load levels these requests pool (tags.level); their own rows are "
        "the experiment's `LoadLevel`s.",
    )
    records: int = Field(description="All records of the group, warm-ups included.")
    warmup_excluded: int
    errors: int = Field(description="Failed requests, warm-ups not counted.")
    error_kinds: dict[str, int] = Field(default_factory=dict)
    n: int = Field(description="Requests in the statistics: not warm-up, not failed.")
    ttft_ms: Percentiles
    decode_ms_per_token: Percentiles
    e2e_ms: Percentiles
    output_tokens_per_s: Percentiles
    input_tokens_p50: float | None = None
    output_tokens_p50: float | None = None
    stop_reasons: dict[str, int] = Field(default_factory=dict)
    provider_decode_ms_per_token: Quantile = Field(
        description="Median of provider_timings.decode_ms_per_token."
    )
    decode_gap_ms_per_token: Quantile = Field(
        description="Median per request of client − provider decode ms per output token."
    )
    decode_gap_client_bound: str | None = Field(
        default=None, description="Why the decode gap is labkit's doing (it is below 0)."
    )
    ttft_split: TTFTSplit
    client_bound: str | None = Field(
        default=None,
        description="The self-check's reason where it flagged the group's stamps as late "
        "(`labkit.analysis.selfcheck`); every latency of the group then holds labkit's own delay.",
    )
