"""The typed figures behind each experiment's answer: what `lab.json` holds under `figures`.

Each experiment kind has one model, told apart by its `kind` field; the run summary and the
report read these fields, never a key of a loose dict and never a human label. Every
aggregate is computed once, in the experiment's `analyze`, and rendered from here (the
answer's sentences, the run summary's tables, the report's tables and plots).

Like `labkit.records`, this module is the contract a report reads from a run folder made
on another machine: it imports nothing of labkit's.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = [
    "FIGURE_KINDS",
    "AttributionFigures",
    "AttributionKey",
    "AttributionRow",
    "CacheEffect",
    "ConversationFigures",
    "ConversationTurn",
    "ConversationVariant",
    "CriticalPath",
    "DeterminismFigures",
    "Divergence",
    "Estimate",
    "Figures",
    "GreedyMiss",
    "LinearFit",
    "LoadFigures",
    "LoadLevel",
    "LoadLevelCache",
    "MarginalCost",
    "NextTokenFigures",
    "NextTokenStep",
    "NextTokenVariant",
    "Percentiles",
    "PrefillDecodeFigures",
    "PrefillPoint",
    "PromptCost",
    "Proportion",
    "Quantile",
    "RequestStats",
    "RequestTimeline",
    "SLOCheck",
    "SLOReport",
    "ServerLevelMetrics",
    "SessionFigures",
    "SessionRow",
    "SessionStep",
    "SingleFigures",
    "SweepFigures",
    "SweepProbe",
    "TTFTSplit",
    "TokenChoice",
    "TokenPieces",
    "TokenRatioFigures",
    "TokenRatioRow",
    "TokenizerCount",
    "TokenizerSpread",
    "TraceFigures",
    "VariantRow",
    "Verdict",
    "read_figures",
]


class _Figures(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- statistics (labkit.analysis.stats computes them) --------------------------------------


class Quantile(_Figures):
    """One quantile of a metric over n requests, with its 95% distribution-free interval.

    The interval is two order statistics of the sample (`lo`, `hi` are sample values) that
    hold the true quantile with probability at least `confidence`, whatever the metric's
    distribution; below `min_n` requests no such pair exists and both are None.
    """

    q: float = Field(description="The quantile as a fraction: 0.5, 0.9, 0.99.")
    value: float | None = Field(
        default=None, description="Point estimate (linear interpolation); None when n == 0."
    )
    lo: float | None = Field(default=None, description="Interval's lower bound (None: n < min_n).")
    hi: float | None = Field(default=None, description="Interval's upper bound (None: n < min_n).")
    n: int = Field(description="Values the quantile is over.")
    confidence: float = 0.95
    min_n: int = Field(
        description="The least n for which a two-sided interval at `confidence` exists "
        "(median 6, p90 29, p99 299 at 95%)."
    )

    @property
    def supported(self) -> bool:
        """Whether n is enough for an interval (`lo` and `hi` are set)."""
        return self.n >= self.min_n


class Proportion(_Figures):
    """A share k/n with its exact (Clopper–Pearson) interval at `confidence`."""

    k: int
    n: int
    value: float | None = Field(default=None, description="k / n; None when n == 0.")
    lo: float | None = None
    hi: float | None = None
    confidence: float = 0.95


# --- SLOs (any experiment) -----------------------------------------------------------------


Verdict: TypeAlias = Literal["pass", "fail", "undecided"]
"""An SLO's verdict at 95%: the requests show it held, show it did not, or cannot tell."""


def _verdict_of_passed(data: Any) -> Any:
    """A check or report written before verdicts (`passed`, `fraction`, `observed_ms`): its
    point verdict as `pass`/`fail`; the intervals it never had stay None."""
    if not isinstance(data, dict) or "passed" not in data:
        return data
    old = {k: v for k, v in data.items() if k not in ("passed", "fraction", "observed_ms")}
    old.setdefault("verdict", "pass" if data["passed"] else "fail")
    return old


class SLOCheck(_Figures):
    """One SLO (`ttft_ms_p90: 500`) judged over a set of requests.

    A request meets it when it succeeded and its `metric` is at most `bound_ms`. The set
    passes when the share of its requests that met it is at least `percentile`% with 95%
    confidence (the share's exact interval lies at or above it), fails when the interval
    lies below it, and is undecided otherwise: too few requests to tell. A failed request
    counts as missing every SLO.
    """

    name: str = Field(description="The SLO as configured: `ttft_ms_p90`.")
    metric: str = Field(description="The `client.*` field judged: `ttft_ms`.")
    percentile: float = Field(description="The share (%) of requests that must meet it.")
    bound_ms: float
    requests: int = Field(description="Requests judged (measured ones, failed included).")
    met: int = Field(description="Requests that met the bound.")
    share: Proportion | None = Field(
        default=None, description="met of requests, with its exact 95% interval."
    )
    observed: Quantile | None = Field(
        default=None, description="The metric's `percentile`-th percentile over ok requests."
    )
    verdict: Verdict = "undecided"

    _migrate = model_validator(mode="before")(_verdict_of_passed)

    @property
    def passed(self) -> bool:
        """Whether the requests show, at 95%, that the SLO held."""
        return self.verdict == "pass"


class SLOReport(_Figures):
    """Every configured SLO over one set of requests, and the goodput they allow."""

    checks: list[SLOCheck] = Field(default_factory=list)
    requests: int = 0
    good: int = Field(default=0, description="Requests that met every SLO.")
    good_share: Proportion | None = Field(
        default=None, description="good of requests, with its exact 95% interval."
    )
    goodput_rps: float | None = Field(
        default=None, description="Requests per second that met every SLO (good / span)."
    )
    goodput_low_rps: float | None = Field(
        default=None,
        description="The goodput's 95% interval: good_share's bounds × requests / span.",
    )
    goodput_high_rps: float | None = None
    verdict: Verdict = Field(
        default="undecided",
        description="`pass`: every check passed; `fail`: one failed; else `undecided`.",
    )

    _migrate = model_validator(mode="before")(_verdict_of_passed)

    @property
    def passed(self) -> bool:
        """Whether every check passed at 95%."""
        return self.verdict == "pass"


class _ExperimentFigures(_Figures):
    slo: SLOReport | None = Field(
        default=None, description="The experiment's SLOs over its measured requests."
    )


# --- single --------------------------------------------------------------------------------


class RequestTimeline(_Figures):
    """One representative request (the median TTFT) as offsets from t_start, in ms, with the
    server's own prefill and decode where it reported them: the request-anatomy picture."""

    record_id: str
    headers_ms: float | None = None
    first_event_ms: float | None = None
    ttft_ms: float | None = None
    last_token_ms: float | None = None
    e2e_ms: float | None = None
    event_offsets_ms: list[float] = Field(default_factory=list)
    provider_prefill_ms: float | None = None
    provider_decode_ms: float | None = None


class SingleFigures(_ExperimentFigures):
    """`single`: medians of each stage over the measured requests."""

    kind: Literal["single"] = "single"
    n: int = Field(description="Successful measured requests.")
    failed: int = Field(description="Failed measured requests.")
    input_tokens_p50: float | None = None
    output_tokens_p50: float | None = None
    headers_ms_p50: float | None = None
    first_event_ms_p50: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    last_token_ms_p50: float | None = None
    e2e_ms_p50: float | None = None
    decode_ms_per_token_p50: float | None = None
    provider_prefill_ms_p50: float | None = None
    provider_decode_ms_per_token_p50: float | None = None
    stop_reasons: dict[str, int] = Field(
        default_factory=dict, description="How often each stop reason occurred."
    )
    timeline: RequestTimeline | None = None
    ttft: Quantile | None = Field(
        default=None, description="Client TTFT median with its interval (the answer's lead)."
    )
    decode_per_token: Quantile | None = Field(
        default=None, description="Client decode ms per output token, median with its interval."
    )
    client_bound: str | None = Field(
        default=None,
        description="The self-check's reason where it found these requests' stamps late "
        "(their timings hold labkit's own delay); None: not flagged.",
    )


# --- prefill_decode ------------------------------------------------------------------------


class LinearFit(_Figures):
    """A least-squares line y = ms_per_token · tokens + intercept_ms."""

    ms_per_token: float
    intercept_ms: float
    r2: float
    n: int = Field(description="Points fitted.")
    ms_per_token_lo: float | None = Field(
        default=None, description="The slope's 95% confidence interval, low end (n ≥ 3)."
    )
    ms_per_token_hi: float | None = Field(
        default=None, description="The slope's 95% confidence interval, high end (n ≥ 3)."
    )

    @classmethod
    def least_squares(cls, xs: Sequence[float], ys: Sequence[float]) -> LinearFit | None:
        """Ordinary least squares over the points (scipy's `linregress`), with r²; None
        under 2 distinct x.

        The one straight line labkit draws: the experiments' figures and the report's plots
        (for a run whose lab.json has none) both take it from here.
        """
        if len(xs) < 2 or len(set(xs)) < 2:
            return None
        from scipy.stats import linregress, t  # scipy.stats is slow to import: only here

        line = linregress(xs, ys)
        r = float(line.rvalue)
        lo = hi = None
        if len(xs) >= 3 and line.stderr == line.stderr:  # a slope's interval needs 1 dof
            half = float(t.ppf(0.975, len(xs) - 2)) * float(line.stderr)
            lo, hi = float(line.slope) - half, float(line.slope) + half
        return cls(
            ms_per_token=float(line.slope),
            intercept_ms=float(line.intercept),
            r2=r * r if r == r else 1.0,  # NaN: every y the same, which the line fits exactly
            n=len(xs),
            ms_per_token_lo=lo,
            ms_per_token_hi=hi,
        )


class Estimate(_Figures):
    """A fitted quantity with its 95% confidence interval."""

    value: float
    lo: float | None = None
    hi: float | None = None


class PromptCost(_Figures):
    """A latency against prompt tokens, the model chosen by the data.

    A straight line (`linear`), or a line with a quadratic term (`quadratic`: prefill per
    token grows with the prompt, as attention over it does) when an F-test of that term
    against the line gives p < 0.05. Ordinary least squares (statsmodels); every interval is
    95%. The marginal cost is the slope of the chosen model at the shortest and the longest
    prompt; the fixed part (`intercept_ms`) is a fitted constant, stated only where its
    interval lies above 0 (`intercept_reading`).
    """

    model: Literal["linear", "quadratic"]
    n: int = Field(description="Requests fitted.")
    min_tokens: float
    max_tokens: float
    intercept_ms: Estimate
    ms_per_token: Estimate = Field(description="The linear coefficient.")
    ms_per_token_squared: Estimate | None = Field(
        default=None, description="The quadratic coefficient (ms per token²); None: linear."
    )
    curvature_p: float | None = Field(
        default=None,
        description="F-test p-value of the quadratic term over the line (None: fewer than 3 "
        "prompt lengths or 4 requests, no test).",
    )
    r2: float
    marginal_at_min: Estimate = Field(description="ms per prompt token at min_tokens.")
    marginal_at_max: Estimate = Field(description="ms per prompt token at max_tokens.")

    @property
    def intercept_reading(self) -> Literal["positive", "zero", "negative"]:
        """`zero`: the fixed part's interval holds 0 (not distinguishable from it);
        `negative`: it lies below 0, which is not physical (the model is wrong here)."""
        lo, hi = self.intercept_ms.lo, self.intercept_ms.hi
        if lo is not None and lo > 0:
            return "positive"
        if hi is not None and hi < 0:
            return "negative"
        return "zero"


class PrefillPoint(_Figures):
    """Medians of the cold requests at one target prompt length."""

    target_prompt_tokens: int
    input_tokens: float | None = None
    ttft_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms_per_token: float | None = None
    provider_decode_ms_per_token: float | None = None
    cached_tokens: float | None = None
    n: int = 0


class MarginalCost(_Figures):
    """TTFT cost of one more prompt token between two consecutive sweep points."""

    from_tokens: float
    to_tokens: float
    ms_per_token: float


class CacheEffect(_Figures):
    """The repeated-prefix variant: TTFT of the first send against the cache hits."""

    prefix_tokens: int | None = None
    prime_ttft_ms: float | None = None
    hit_ttft_ms: float | None = None
    prime_cached_tokens: float | None = None
    hit_cached_tokens: float | None = None
    hit_input_tokens: float | None = None
    n_hits: int = 0


class PrefillDecodeFigures(_ExperimentFigures):
    """`prefill_decode`: the sweep, its fits and the cache variant."""

    kind: Literal["prefill_decode"] = "prefill_decode"
    points: list[PrefillPoint] = Field(default_factory=list)
    fit: LinearFit | None = Field(default=None, description="Client TTFT against input tokens.")
    server_prefill_fit: LinearFit | None = None
    decode_fit: LinearFit | None = Field(
        default=None, description="Client decode ms/token against input tokens."
    )
    cold_cache_hits: int = 0
    cache_control: str = ""
    cache: CacheEffect | None = None
    marginal_ms_per_token: list[MarginalCost] = Field(default_factory=list)
    ttft_model: PromptCost | None = Field(
        default=None, description="Client TTFT against input tokens, the model the data chose."
    )
    server_prefill_model: PromptCost | None = Field(
        default=None, description="The server's own prefill against input tokens, likewise."
    )
    client_bound: str | None = Field(
        default=None,
        description="The self-check's reason where it found these requests' stamps late; "
        "None: not flagged.",
    )


# --- token_ratio ---------------------------------------------------------------------------


class TokenRatioRow(_Figures):
    """One text: its size in characters, bytes and tokens, and the 4-characters rule."""

    text_id: str
    chars: int
    bytes: int
    tokens: int | None = None
    token_source: str
    chars_per_token: float | None = None
    bytes_per_token: float | None = None
    rule_of_4_estimate: float
    rule_of_4_error_pct: float | None = None
    usage_input_tokens: float | None = None
    usage_text_tokens: float | None = None
    tiktoken_tokens: int | None = Field(
        default=None, description="The offline tokenizer's count, where labkit has one."
    )


class TokenizerCount(_Figures):
    """One text cut by one tokenizer (the side-by-side table)."""

    text_id: str
    tokenizer: str = Field(description="`tiktoken:o200k_base`, or a provider's own tokenizer.")
    tokens: int
    chars_per_token: float | None = None
    bytes_per_token: float | None = None


class TokenizerSpread(_Figures):
    """For one text: the tokenizer needing the fewest tokens and the one needing the most."""

    text_id: str
    most_efficient: str
    most_efficient_tokens: int
    least_efficient: str
    least_efficient_tokens: int
    ratio: float = Field(description="least_efficient_tokens / most_efficient_tokens.")


class TokenPieces(_Figures):
    """One text as one tokenizer cut it: each token's text (`display_piece`), in order."""

    text_id: str
    tokenizer: str
    pieces: list[str] = Field(default_factory=list)
    tokens_per_piece: list[int] = Field(
        default_factory=list,
        description="How many tokens each piece is: more than 1 where a character's bytes "
        "were split across tokens (the piece is then the whole character). Empty: 1 each.",
    )


class TokenRatioFigures(_ExperimentFigures):
    """`token_ratio`: a row per text, and every tokenizer at hand side by side."""

    kind: Literal["token_ratio"] = "token_ratio"
    rows: list[TokenRatioRow] = Field(default_factory=list)
    baseline_usage_input_tokens: float | None = None
    count_error: str | None = None
    side_by_side: list[TokenizerCount] = Field(default_factory=list)
    spread: list[TokenizerSpread] = Field(default_factory=list)
    input_tokens_local_diffs: list[int] = Field(
        default_factory=list,
        description="usage.input_tokens_local_diff of each request that has one.",
    )
    pieces: list[TokenPieces] = Field(
        default_factory=list, description="Token boundaries of each text, per tokenizer."
    )


# --- determinism ---------------------------------------------------------------------------


class VariantRow(_Figures):
    """One sampling variant: were its outputs identical, and where did they diverge."""

    variant: str
    params: dict[str, Any] = Field(default_factory=dict)
    n: int
    identical: bool | None = None
    distinct_outputs: int
    first_divergent_token: int | None = None
    common_prefix_tokens: int | None = None
    output_tokens: list[int] = Field(default_factory=list)
    system_fingerprints: list[str] = Field(default_factory=list)
    outputs: list[list[str]] = Field(
        default_factory=list,
        description="Each repeat's output as token texts, in send order (the compared tokens).",
    )


class DeterminismFigures(_ExperimentFigures):
    """`determinism`: a row per variant and the tokenizer the outputs were compared with."""

    kind: Literal["determinism"] = "determinism"
    variants: list[VariantRow] = Field(default_factory=list)
    tokenizer: str = "characters"
    next_token: NextTokenFigures | None = Field(
        default=None,
        description="The candidates behind the replies, with `top_logprobs` set (else None).",
    )


# --- attribution ---------------------------------------------------------------------------


class AttributionKey(StrEnum):
    """The stable key of each attribution row (its label is for people and may change)."""

    PREFILL = "prefill"
    DECODE_PER_TOKEN = "decode_per_token"
    SERVER_PROCESSING = "server_processing"
    TCP_CONNECT = "tcp_connect"
    TLS_HANDSHAKE = "tls_handshake"
    REQUEST_SENT = "request_sent"
    RESPONSE_HEADERS = "response_headers"
    TTFT_MINUS_PREFILL = "ttft_minus_prefill"
    DECODE_CLIENT_MINUS_PROVIDER = "decode_client_minus_provider"
    REQUEST_PREPARATION = "request_preparation"
    STREAM_PARSING = "stream_parsing"
    LABKIT_QUEUE = "labkit_queue"
    LOOP_LAG = "loop_lag"
    SDK_TTFT = "sdk_ttft"
    SDK_PER_TOKEN = "sdk_per_token"
    SDK_EVENT_DELAY = "sdk_event_delay"
    CPU_PER_EVENT_WIRE = "cpu_per_event_wire"
    CPU_PER_EVENT_SDK = "cpu_per_event_sdk"
    SDK_ADDED_CPU_PER_EVENT = "sdk_added_cpu_per_event"
    PROVIDER_QUEUE = "provider_queue"
    SERVER_TTFT = "server_ttft"
    SERVER_TOTAL = "server_total"
    KEEPALIVE_WAIT = "keepalive_wait"
    NETWORK_FRONT_END = "network_front_end"
    CLIENT_SEND = "client_send"


class AttributionRow(_Figures):
    """One measurement, its owner and median value, or why there is none."""

    key: AttributionKey
    measurement: str = Field(description="The measurement in words.")
    owner: str
    value_ms: float | None = None
    source: str
    note: str | None = None
    client_bound: str | None = Field(
        default=None,
        description="Why the value holds labkit's own delay (the self-check's reason, or a "
        "client decode faster than the server's); None: not flagged.",
    )


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


class AttributionFigures(_ExperimentFigures):
    """`attribution`: a row per measurement, and the SDK path's paired differences."""

    kind: Literal["attribution"] = "attribution"
    rows: list[AttributionRow] = Field(default_factory=list)
    ttft_ms_p50: float | None = None
    provider_reports_timings: bool = False
    n: int = 0
    n_fresh_connection: int = 0
    sdk_measured: bool = False
    n_sdk_pairs: int = 0
    sdk_ttft_ms: float | None = None
    sdk_event_delay_ms: float | None = None
    n_event_delay_pairs: int = 0
    cpu_us_per_event_wire: float | None = None
    n_cpu_wire: int = 0
    cpu_us_per_event_sdk: float | None = None
    n_cpu_sdk: int = 0
    sdk_cpu_us_per_event: float | None = None
    n_cpu_pairs: int = 0
    sdk_server_decode_ms_per_token: float | None = None
    ttft_split: TTFTSplit | None = Field(
        default=None,
        description="Median TTFT split into provider queue, provider prefill "
        "and network + front end, as far as the provider reports (None before this split).",
    )

    def row(self, key: AttributionKey) -> AttributionRow:
        """The row of `key` (KeyError when the figures have none)."""
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(key)

    def value(self, key: AttributionKey) -> float | None:
        """The median value of the row of `key`, in ms (None: not measured)."""
        return self.row(key).value_ms


# --- load ----------------------------------------------------------------------------------


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


class LoadFigures(_ExperimentFigures):
    """`load`: a row per level, in the order they ran."""

    kind: Literal["load"] = "load"
    levels: list[LoadLevel] = Field(default_factory=list)
    mode: Literal["concurrency", "rate"]


class TraceFigures(_Figures):
    """`trace`: one replay of a trace file, measured as one load level."""

    kind: Literal["trace"] = "trace"
    trace: str = Field(description="The trace file's name.")
    speedup: float = Field(description="How many times faster than recorded it was replayed.")
    replay: LoadLevel = Field(description="The replay as a load level (target: the trace's rate).")


# --- conversation --------------------------------------------------------------------------


class ConversationTurn(_Figures):
    """One turn number of one cache variant: medians over the sessions that reached it."""

    cache: Literal["on", "off"]
    turn: int = Field(description="0 for a session's first request.")
    ok: int = 0
    failed: int = 0
    input_tokens_p50: float | None = None
    cached_tokens_p50: float | None = Field(
        default=None, description="Prompt tokens the provider says it served from its cache."
    )
    reuse_p50: float | None = Field(
        default=None, description="cached / input tokens: the KV (prefix) reuse the count implies."
    )
    reusable_p50: float | None = Field(
        default=None,
        description="The previous turn's input and output tokens as a share of this prompt: "
        "what a perfect prefix cache could reuse (the chat template around the answer not "
        "counted).",
    )
    ttft_ms_p50: float | None = None
    ttft_ms_p90: float | None = None
    prefill_ms_p50: float | None = Field(default=None, description="The provider's own prefill.")


class ConversationVariant(_Figures):
    """One cache variant over all turns: how TTFT grew against the history it carried."""

    cache: Literal["on", "off"]
    sessions: int = Field(description="Sessions with at least one successful turn.")
    complete_sessions: int = 0
    first_ttft_ms: float | None = None
    last_ttft_ms: float | None = None
    first_input_tokens: float | None = None
    last_input_tokens: float | None = None
    last_reuse: float | None = None
    ttft_fit: LinearFit | None = Field(
        default=None, description="TTFT against input tokens, over every successful turn."
    )


class ConversationFigures(_Figures):
    """`conversation`: a row per turn number and cache variant, and each variant's growth."""

    kind: Literal["conversation"] = "conversation"
    turns: list[ConversationTurn] = Field(default_factory=list)
    variants: list[ConversationVariant] = Field(default_factory=list)
    cache_switch: bool = Field(
        default=True, description="Whether the provider can turn its prompt cache off."
    )


# --- session (agent jobs) -------------------------------------------------------------------


class CriticalPath(_Figures):
    """Where a session's time went along its critical path, in ms; the five terms add up to
    the session's completion time (`docs/measurement.md`, "Sessions")."""

    provider_queue_ms: float = Field(default=0.0, description="The provider's reported queue.")
    prefill_ms: float = Field(default=0.0, description="Send to first output, less the queue.")
    decode_ms: float = Field(default=0.0, description="First output to the stream's end.")
    tool_ms: float = Field(default=0.0, description="Simulated tools (or a trace's gaps).")
    labkit_ms: float = Field(default=0.0, description="The rest: labkit's own time.")

    @property
    def total_ms(self) -> float:
        """The five terms together: the session's completion time."""
        return (
            self.provider_queue_ms
            + self.prefill_ms
            + self.decode_ms
            + self.tool_ms
            + self.labkit_ms
        )

    def plus(self, other: CriticalPath) -> CriticalPath:
        """Term by term sum."""
        return CriticalPath(
            provider_queue_ms=self.provider_queue_ms + other.provider_queue_ms,
            prefill_ms=self.prefill_ms + other.prefill_ms,
            decode_ms=self.decode_ms + other.decode_ms,
            tool_ms=self.tool_ms + other.tool_ms,
            labkit_ms=self.labkit_ms + other.labkit_ms,
        )


class SessionStep(_Figures):
    """One model turn of one agent of one session, on the session's own time axis."""

    session: int
    agent: str = Field(description="`0` the main agent, `0.1` its first sub-agent.")
    step: int
    ok: bool = True
    start_ms: float = Field(description="Send, ms from the session's start.")
    end_ms: float = Field(description="Stream end, ms from the session's start.")
    tool_ms: float = Field(default=0.0, description="Tool (or sub-agent) time before it.")
    tool_calls: int = Field(default=0, description="Calls this turn made.")
    subagents: int = Field(default=0, description="Sub-agents the time before it waited for.")
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_share: float | None = Field(
        default=None, description="Prompt tokens served from the provider's cache / input."
    )
    tool_call_first_ms: float | None = Field(
        default=None, description="Send to the first tool-call token (a call turn's TTFT)."
    )
    tool_call_args_ms: float | None = Field(
        default=None, description="Send to the call's complete arguments (its last token)."
    )
    compacted: bool = Field(default=False, description="The history was compacted before it.")


class SessionRow(_Figures):
    """One session as a job."""

    session: int
    complete: bool = Field(description="Ended with a final answer (not the step limit).")
    resumed: bool = Field(default=False, description="Finished by a resumed run.")
    steps: int
    failed_steps: int = 0
    agents: int = 1
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: float = Field(description="Completion time: start to the last answer read.")
    critical: CriticalPath
    meets_slo: bool | None = None


class SessionFigures(_Figures):
    """`session`: agent sessions measured as jobs."""

    kind: Literal["session"] = "session"
    source: str = Field(default="generated", description="`generated`, or the trace's name.")
    sessions: list[SessionRow] = Field(default_factory=list)
    steps: list[SessionStep] = Field(default_factory=list)
    critical: CriticalPath = Field(
        default_factory=CriticalPath,
        description="Summed over the sessions measured in one run (resumed ones left out).",
    )
    completion_ms_p50: float | None = None
    completion_ms_p90: float | None = None
    steps_p50: float | None = None
    tool_call_first_ms_p50: float | None = None
    tool_call_args_ms_p50: float | None = None
    cached_share_p50: float | None = None
    slo_ms: float | None = Field(default=None, description="The session completion SLO.")
    queue_reported: bool = Field(
        default=False,
        description="Whether the provider reported its queue on any turn; where not, "
        "`provider_queue_ms` is 0 and any queueing is inside `prefill_ms`.",
    )
    goodput_sessions_per_s: float | None = Field(
        default=None,
        description="Sessions that completed within the SLO (all complete ones without one) "
        "per second of the run's span.",
    )


# --- sweep ---------------------------------------------------------------------------------


class SweepProbe(_Figures):
    """One load level a sweep ran, and what it decided."""

    step: int = Field(description="0: the synchronous baseline, 1: the throughput probe, ...")
    role: Literal["baseline", "throughput", "bisect"]
    level: LoadLevel = Field(description="The level's judged (latest, longest) pass.")
    verdict: Verdict = Field(
        default="undecided",
        description="`pass`: every SLO held at 95% without saturating; `fail`: an SLO "
        "failed at 95%, the level saturated or no request succeeded; `undecided`: still "
        "undecided at `max_requests_per_level` (or when the sweep's time ran out).",
    )
    met: bool = Field(description="verdict == pass.")
    saturated: bool = False
    passes: int = Field(default=1, description="Passes run: each undecided one ran longer.")
    requests_sent: int = Field(
        default=0, description="Measured requests over all its passes (the level's cost)."
    )
    why: str = Field(default="", description="Why it did not pass, in words (empty when met).")

    @model_validator(mode="before")
    @classmethod
    def _verdict_of_met(cls, data: Any) -> Any:
        """A probe written before verdicts: `met` was its point verdict."""
        if isinstance(data, dict) and "verdict" not in data and "met" in data:
            return {**data, "verdict": "pass" if data["met"] else "fail"}
        return data


class SweepFigures(_ExperimentFigures):
    """`sweep`: the probes in the order they ran, and the knee they bracket."""

    kind: Literal["sweep"] = "sweep"
    mode: Literal["concurrency", "rate"]
    probes: list[SweepProbe] = Field(default_factory=list)
    knee: float | None = Field(
        default=None, description="The largest rate (or concurrency) shown to meet the SLOs."
    )
    knee_low: float | None = Field(
        default=None,
        description="The knee lies in [low, high): low, the largest load that passed; high, "
        "the smallest that failed (None: none failed). Undecided levels lie inside.",
    )
    knee_high: float | None = None
    knee_goodput_rps: float | None = None
    knee_goodput_low_rps: float | None = Field(
        default=None, description="The knee level's goodput interval (SLOReport)."
    )
    knee_goodput_high_rps: float | None = None
    throughput_rps: float | None = Field(
        default=None, description="Completed requests/s of the throughput probe."
    )
    stopped: str = Field(default="", description="Why the sweep stopped, in words.")


# --- request statistics (every experiment) -------------------------------------------------


class Percentiles(_Figures):
    """p50, p90 and p99 of one metric over a group's measured requests, with intervals."""

    p50: Quantile
    p90: Quantile
    p99: Quantile


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


# --- next token (the model's candidates per step; also `determinism`'s `next_token`) -------


class TokenChoice(_Figures):
    """A token and its probability at one step."""

    token: str
    p: float = Field(description="Probability (exp of the provider's logprob), 0..1.")


class NextTokenStep(_Figures):
    """One output token of one reply: the token taken, its probability, the candidates."""

    token: str
    p: float
    entropy_bits: float = Field(
        description="Entropy of the step's top candidates with the rest of the probability "
        "as one outcome (scipy.stats.entropy, base 2): a lower bound of the full entropy."
    )
    candidates: list[TokenChoice] = Field(default_factory=list)


class Divergence(_Figures):
    """Where the repeats of one variant first took different tokens, and how likely each was."""

    step: int = Field(description="0-based index of the first output token that differs.")
    prefix: str = Field(description="The text all repeats shared before it.")
    taken: list[TokenChoice] = Field(
        description="What each distinct branch took there, with its probability (first "
        "reply's first)."
    )
    candidates: list[TokenChoice] = Field(
        default_factory=list, description="The first reply's candidates at that step."
    )
    margin: float | None = Field(
        default=None, description="Probability of the top candidate minus the second's."
    )


class GreedyMiss(_Figures):
    """A step at temperature 0 where the token taken was not the top candidate."""

    step: int
    taken: TokenChoice
    top: TokenChoice
    margin: float = Field(description="Probability of the top candidate minus the second's.")


class NextTokenVariant(_Figures):
    """One sampling variant's replies as steps, and what the candidates explain."""

    variant: str
    params: dict[str, Any] = Field(default_factory=dict)
    replies: list[list[NextTokenStep]] = Field(
        default_factory=list, description="Each repeat's steps, in send order."
    )
    truncated: bool = Field(
        default=False, description="Some reply's logprobs were cut at the record's bound."
    )
    divergence: Divergence | None = Field(
        default=None, description="Where the repeats first differed; None: they never did."
    )
    greedy: bool | None = Field(
        default=None,
        description="At temperature 0: whether the top candidate was taken at every step "
        "of every repeat; None above temperature 0.",
    )
    greedy_misses: list[GreedyMiss] = Field(default_factory=list)


class NextTokenFigures(_ExperimentFigures):
    """`next_token`: per variant, each reply's steps with candidates, divergence, greedy check."""

    kind: Literal["next_token"] = "next_token"
    top_k: int
    inspected: bool = Field(description="Whether the provider returned any logprobs.")
    not_inspected_because: str | None = None
    variants: list[NextTokenVariant] = Field(default_factory=list)


DeterminismFigures.model_rebuild()  # its `next_token` names the figures defined above


Figures: TypeAlias = Annotated[
    SingleFigures
    | PrefillDecodeFigures
    | TokenRatioFigures
    | DeterminismFigures
    | AttributionFigures
    | LoadFigures
    | ConversationFigures
    | TraceFigures
    | SweepFigures
    | SessionFigures
    | NextTokenFigures,
    Field(discriminator="kind"),
]
"""Any experiment's figures, told apart by `kind`."""

_ADAPTER: TypeAdapter[Figures] = TypeAdapter(Figures)

#: The experiment kinds that have figures (each model's `kind`).
FIGURE_KINDS: frozenset[str] = frozenset(
    str(model.model_fields["kind"].default)
    for model in (
        SingleFigures,
        PrefillDecodeFigures,
        TokenRatioFigures,
        DeterminismFigures,
        AttributionFigures,
        LoadFigures,
        ConversationFigures,
        TraceFigures,
        SweepFigures,
        SessionFigures,
        NextTokenFigures,
    )
)


def read_figures(raw: Any, experiment: str) -> Any:
    """`raw` as `LabAnswer.figures` accepts it, for a `lab.json` written by any labkit.

    Figures with a `kind` pass through (and are validated as that kind). A `lab.json`
    written before figures were typed has plain dicts without `kind`: the kind comes from
    the experiment's name (`load#1` -> `load`); figures of that older shape that no longer
    validate, and an empty dict (an answer whose analysis failed), become None.
    """
    if raw is None or not isinstance(raw, dict) or "kind" in raw:
        return raw
    kind = experiment.split("#", 1)[0]
    if not raw or kind not in FIGURE_KINDS:
        return None
    try:
        return _ADAPTER.validate_python({**raw, "kind": kind})
    except ValidationError:
        return None
