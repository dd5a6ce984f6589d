"""`attribution`: a row per measurement with its owner, and the SDK path's paired
differences."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.requests import TTFTSplit
from labkit.figures.slo import _ExperimentFigures
from labkit.figures.stats import Quantile

__all__ = ["AttributionFigures", "AttributionKey", "AttributionRow"]


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
    GATEWAY_WAIT = "gateway_wait"
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


@register_figures
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
        description="The mean TTFT split into labkit's own time, provider queue, provider "
        "prefill and network + front end, parts that add up to it, as far as the provider "
        "reports (None before this split).",
    )
    sdk_ttft: Quantile | None = Field(
        default=None,
        description="Median over trials of TTFT through the SDK minus on the wire, paired by "
        "trial, with its interval (None: the SDK path was not measured).",
    )
    decode_gap: Quantile | None = Field(
        default=None,
        description="Median per request of client minus provider decode ms per token, with its "
        "interval (None: the provider reports no decode).",
    )
    decode_gap_client_bound: str | None = Field(
        default=None, description="Why the decode gap holds labkit's own delay (None: not)."
    )
    prepare_ms: Quantile | None = Field(
        default=None, description="Median app.prepare_ms: labkit's work before the clock."
    )
    parse_ms: Quantile | None = Field(
        default=None, description="Median app.parse_cpu_ms: labkit's parsing of the stream."
    )
    split_proven: bool | None = Field(
        default=None,
        description="A vantage run of the same provider in the run: whether it proved the "
        "split (provider share unchanged, network share moved by the added delay); None: "
        "no vantage run, or not derivable.",
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
