"""The request statistics of every experiment: a group's counts and percentiles, and
its TTFT split by owner."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from labkit.figures.base import _Figures
from labkit.figures.stats import Mean, Percentiles, Quantile

__all__ = ["OLDER_SPLIT", "RequestStats", "TTFTSplit"]


class TTFTSplit(_Figures):
    """TTFT split by owner into parts that add up (`labkit.analysis.split`, the one
    definition): over the requests that had every part, the mean TTFT is labkit's own time
    inside the clock + the provider's queue + its prefill + the network and serving front
    end, each a `Mean` with its interval, and they sum to `ttft_ms` exactly. Where the
    provider reports no prefill, `unsplit_ms` (TTFT − labkit's own time) holds the provider
    and the network together, and no part of it is guessed."""

    ttft_ms: Mean | None = Field(
        default=None, description="Mean client TTFT of the requests the parts are over."
    )
    labkit_ms: Mean | None = Field(
        default=None,
        description="labkit's own time inside the clock: `client.send_ms` (t_start to the "
        "request handed to the kernel, less a connection opened inside) plus the first "
        "token's stamp lateness (`client.ttft_lateness_ms`, 0 under kernel stamps). None: "
        "not observed, so it is inside network and front end (said in `not_derived`).",
    )
    provider_queue_ms: Mean | None = None
    queue_source: str | None = Field(
        default=None,
        description="`reported` by the provider; `idle`: 0 by construction (labkit alone "
        "used a managed server and never had more requests in flight than its slots); "
        "`keepalive`: the wait between the headers and the first event while the server "
        "sent keep-alive comments; joined with ` / ` when requests differed.",
    )
    behind_gateway: str | None = Field(
        default=None,
        description="The gateway whose own processing comments came before the first event "
        "(`provider_timings.keepalive_gateway`: `openrouter`): the wait behind them holds the "
        "upstream's queue and prefill together, so no queue is derived from it (said in "
        "`not_derived`); None: no gateway's comments.",
    )
    provider_prefill_ms: Mean | None = None
    prefill_source: str | None = Field(default=None, description="The field the prefill came from.")
    network_front_end_ms: Mean | None = Field(
        default=None,
        description="Mean per request of TTFT − labkit's own time − queue − prefill.",
    )
    unsplit_ms: Mean | None = Field(
        default=None,
        description="Where queue or prefill is not derivable: mean of TTFT − labkit's own "
        "time, the provider and the network together.",
    )
    n_requests: int = Field(default=0, description="Measured requests of the group.")
    not_derived: list[str] = Field(
        default_factory=list, description="The terms that could not be derived, and why."
    )
    client_bound: str | None = Field(
        default=None,
        description="Why labkit's self-check flagged these requests' stamps as late "
        "(client-bound): every term holds labkit's own delay. None: not flagged.",
    )

    @model_validator(mode="before")
    @classmethod
    def _older_medians(cls, data: Any) -> Any:
        """A lab.json from before the split added up held medians (Quantile-shaped parts,
        `client_send_ms`): read as not derived, since medians are not a partition."""
        if not isinstance(data, dict):
            return data
        parts = ("ttft_ms", "provider_queue_ms", "provider_prefill_ms", "network_front_end_ms")
        old = "client_send_ms" in data or any(_a_median(data.get(k)) for k in parts)
        if not old:
            return data
        return {
            "queue_source": data.get("queue_source"),
            "prefill_source": data.get("prefill_source"),
            "not_derived": [OLDER_SPLIT],
            "client_bound": data.get("client_bound"),
        }


def _a_median(value: Any) -> bool:
    """A part as older labkit wrote it: a plain number, or a Quantile's dict."""
    if isinstance(value, dict):
        return "q" in value
    return isinstance(value, int | float) and not isinstance(value, bool)


#: What an older lab.json's split reads as (its parts were medians, which do not add up).
OLDER_SPLIT = "written by an older labkit as medians, which do not add up to a TTFT: not shown"


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
    provider_prefill_ms: Quantile = Field(
        default_factory=lambda: Quantile(q=0.5, n=0, min_n=6),
        description="Median of the provider's prefill (provider_timings.prefill_ms, else "
        "server_ttft_ms).",
    )
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
    client_bound_causes: list[Literal["busy", "waited"]] = Field(
        default_factory=list,
        description="Why its flagged levels were late: `busy` (labkit's thread used most of "
        "a CPU), `waited` (it waited for a CPU); empty where not flagged or its CPU time is "
        "unknown. The run's client-bound advice is chosen from them.",
    )
