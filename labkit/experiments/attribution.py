"""`attribution`: whose time is it — the provider's, the network's and front end's, or labkit's?

Short requests, half of them on a fresh connection (``connection: close``) so that connect
and TLS times are measured rather than hidden by connection reuse. Every measurement is
classified by owner (docs/measurement.md, "Attribution") with its median value; where the
provider reports nothing about itself, the row says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import fmt_ms, measured, median_of
from labkit.providers.base import ChatRequest, Provider
from labkit.records import LabAnswer, RequestRecord
from labkit.sdkpath import sdk_supported
from labkit.timing import percentile

__all__ = ["AttributionExperiment", "AttributionSettings"]

PROVIDER = "provider"
NETWORK = "network and serving front end"
APPLICATION = "application (labkit)"


class AttributionSettings(ExperimentSettings):
    """A short prompt sent `repeats` times, alternating fresh and reused connections."""

    kind: Literal["attribution"] = "attribution"
    prompt: str = Field(default="Say hello in five words.", min_length=1)
    repeats: PositiveInt = 6
    warmup: NonNegativeInt = 1
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 32, "temperature": 0})
    compare_sdk: bool = Field(
        default=True,
        description="Also send each request through the provider's official SDK, to measure "
        "the SDK's overhead (sdk − wire), where an SDK exists for the provider.",
    )


def _median(values: list[float]) -> float | None:
    return percentile(sorted(values), 50) if values else None


def _diff(
    records: list[RequestRecord],
    a: Callable[[RequestRecord], float | None],
    b: Callable[[RequestRecord], float | None],
) -> float | None:
    """Median of the per-record difference a − b, over records that have both."""
    pairs = ((a(r), b(r)) for r in records)
    return _median([x - y for x, y in pairs if x is not None and y is not None])


@register_experiment
class AttributionExperiment(Experiment):
    """Splits each latency between provider, network/front end and application."""

    kind: ClassVar[str] = "attribution"
    settings_model: ClassVar[type[ExperimentSettings]] = AttributionSettings
    question: ClassVar[str] = (
        "Of the time a request takes, how much is the provider's, how much the network's and "
        "serving front end's, and how much labkit's own?"
    )

    @property
    def _s(self) -> AttributionSettings:
        assert isinstance(self.settings, AttributionSettings)
        return self.settings

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Warm-ups, then `repeats` requests; even trials open a fresh connection.

        With `compare_sdk`, each trial is sent twice, wire then SDK, on the same kind of
        connection, so the pair's difference is the SDK's overhead.
        """
        paths = ["wire"]
        plan = self.warmups("attribution", self._s.prompt)
        if self._s.compare_sdk and sdk_supported(provider):
            paths.append("sdk")
            # The SDK's first request also pays its imports and client set-up: keep it out.
            for warm in self.warmups("attribution", self._s.prompt):
                warm.key += "/sdk"
                warm.request.client_path = "sdk"
                warm.tags = {"path": "sdk"}
                plan.append(warm)
        for trial in range(self._s.repeats):
            fresh = trial % 2 == 0
            for path in paths:
                request = ChatRequest(
                    self.messages(self._s.prompt), dict(self._s.params), "attribution"
                )
                request.fresh_connection = fresh
                request.client_path = path
                plan.append(
                    PlannedRequest(
                        key=f"{self.name}/{trial}" + ("/sdk" if path == "sdk" else ""),
                        request=request,
                        trial=trial,
                        tags={"connection": "fresh" if fresh else "reused", "path": path},
                    )
                )
        return plan

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """One row per measurement: owner, median value, source fields, and a note."""
        every = measured(records)
        ok = [r for r in every if r.app.client_path == "wire"]
        sdk = {r.trial: r for r in every if r.app.client_path == "sdk"}
        wire = {r.trial: r for r in ok}
        pairs = [(wire[t], sdk[t]) for t in sorted(wire) if t in sdk]
        fresh = [r for r in ok if r.tags.get("connection") == "fresh"]
        reported = any(r.provider_timings.prefill_ms is not None for r in ok)
        rows: list[dict[str, Any]] = []

        def row(name: str, owner: str, value: float | None, source: str, missing: str) -> None:
            rows.append(
                {
                    "measurement": name,
                    "owner": owner,
                    "value_ms": value,
                    "source": source,
                    "note": None if value is not None else missing,
                }
            )

        nr = "not reported by this provider"
        no_sdk = (
            "not measured: no official SDK for this provider kind, or compare_sdk is off"
            if not sdk
            else "not observed"
        )
        row(
            "prefill (prompt processing)",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.prefill_ms),
            "provider_timings.prefill_ms",
            nr,
        )
        row(
            "decode per output token",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.decode_ms_per_token),
            "provider_timings.decode_ms_per_token",
            nr,
        )
        row(
            "server processing up to headers",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.processing_ms),
            "provider_timings.processing_ms",
            nr,
        )
        row(
            "TCP connect (fresh connections)",
            NETWORK,
            median_of(fresh, lambda r: r.client.connect_ms),
            "client.connect_ms",
            "not observed (no fresh connection, or a transport without trace events)",
        )
        row(
            "TLS handshake (fresh connections)",
            NETWORK,
            median_of(fresh, lambda r: r.client.tls_ms),
            "client.tls_ms",
            "not observed (plain HTTP, or no fresh connection)",
        )
        row(
            "request sent",
            NETWORK,
            median_of(ok, lambda r: r.client.request_sent_ms),
            "client.request_sent_ms",
            "not observed (transport without trace events)",
        )
        row(
            "response headers (time to first byte)",
            NETWORK,
            median_of(ok, lambda r: r.client.headers_ms),
            "client.headers_ms",
            "not observed",
        )
        row(
            "TTFT minus provider prefill",
            NETWORK,
            _diff(ok, lambda r: r.client.ttft_ms, lambda r: r.provider_timings.prefill_ms),
            "client.ttft_ms - provider_timings.prefill_ms",
            "cannot be separated: the provider reports no prefill time, so client TTFT "
            "holds prefill, queueing and network together",
        )
        row(
            "decode per token, client minus provider",
            NETWORK,
            _diff(
                ok,
                lambda r: r.client.decode_ms_per_token,
                lambda r: r.provider_timings.decode_ms_per_token,
            ),
            "client.decode_ms_per_token - provider_timings.decode_ms_per_token",
            "cannot be separated: the provider reports no decode time",
        )
        row(
            "request preparation (before t_start)",
            APPLICATION,
            median_of(ok, lambda r: r.app.prepare_ms),
            "app.prepare_ms",
            "not observed",
        )
        row(
            "stream parsing (whole stream)",
            APPLICATION,
            median_of(ok, lambda r: r.app.parse_cpu_ms),
            "app.parse_cpu_ms",
            "not observed",
        )
        row(
            "queueing inside labkit",
            APPLICATION,
            median_of(ok, lambda r: r.client.queue_ms),
            "client.queue_ms",
            "not observed",
        )
        row(
            "event-loop lag while reading",
            APPLICATION,
            median_of(ok, lambda r: r.client.loop_lag_ms),
            "client.loop_lag_ms",
            "not observed",
        )
        row(
            "SDK overhead on TTFT (sdk − wire)",
            APPLICATION,
            _pair_diff(pairs, lambda r: r.client.ttft_ms),
            "client.ttft_ms with app.client_path sdk, minus the same trial on the wire",
            no_sdk,
        )
        row(
            "SDK overhead per output token (sdk − wire)",
            APPLICATION,
            _pair_diff(pairs, lambda r: r.client.decode_ms_per_token),
            "client.decode_ms_per_token, sdk minus wire, paired by trial",
            no_sdk,
        )

        ttft = median_of(ok, lambda r: r.client.ttft_ms)
        figures: dict[str, Any] = {
            "rows": rows,
            "ttft_ms_p50": ttft,
            "provider_reports_timings": reported,
            "n": len(ok),
            "n_fresh_connection": len(fresh),
            "n_sdk_pairs": len(pairs),
        }
        if not ok or ttft is None:
            return self.answer(
                provider_id, model, "No successful request to attribute.", figures, status="failed"
            )
        vals = {r["measurement"]: r["value_ms"] for r in rows}
        prepare = vals["request preparation (before t_start)"]
        parse = vals["stream parsing (whole stream)"]
        if reported:
            prefill = vals["prefill (prompt processing)"]
            gap = vals["TTFT minus provider prefill"]
            answer = (
                f"Of a median TTFT of {fmt_ms(ttft)}, the provider's own prefill was "
                f"{fmt_ms(prefill)} ({100 * (prefill or 0) / ttft:.0f}%) and the network and "
                f"serving front end (HTTP, templating, tokenization, queueing) took "
                f"{fmt_ms(gap)} ({100 * (gap or 0) / ttft:.0f}%)."
            )
            dgap = vals["decode per token, client minus provider"]
            if dgap is not None:
                answer += (
                    f" Per output token the client's time was within {fmt_ms(abs(dgap), 3)} of "
                    f"the server's own {fmt_ms(vals['decode per output token'], 2)} "
                    f"({'slower' if dgap > 0 else 'faster'} on the client side)."
                )
        else:
            answer = (
                f"The median TTFT was {fmt_ms(ttft)}; this provider reports no timings of its "
                f"own, so prefill, queueing and network cannot be separated inside it."
            )
            if vals["server processing up to headers"] is not None:
                answer += (
                    f" Its processing header says {fmt_ms(vals['server processing up to headers'])}"
                    " of server time before the response headers."
                )
        connect = vals["TCP connect (fresh connections)"]
        if connect is not None:
            answer += f" A fresh connection cost {fmt_ms(connect, 2)} to connect"
            tls = vals["TLS handshake (fresh connections)"]
            answer += f" and {fmt_ms(tls, 2)} for TLS." if tls is not None else "."
        answer += (
            f" labkit itself spent {fmt_ms(prepare, 2)} preparing each request (before the clock "
            f"starts, so outside TTFT) and {fmt_ms(parse, 2)} parsing each stream."
        )
        sdk_ttft = vals["SDK overhead on TTFT (sdk − wire)"]
        if sdk_ttft is not None:
            sdk_tok = vals["SDK overhead per output token (sdk − wire)"]
            answer += (
                f" Through the official SDK the first token came {_later(sdk_ttft, 2)} than on "
                f"labkit's wire path (median of {len(pairs)} paired requests)"
                + (f" and each token {_later(sdk_tok, 3)}." if sdk_tok is not None else ".")
            )
        return self.answer(provider_id, model, answer, figures)


def _pair_diff(
    pairs: list[tuple[RequestRecord, RequestRecord]],
    get: Callable[[RequestRecord], float | None],
) -> float | None:
    """Median over (wire, sdk) pairs of get(sdk) − get(wire)."""
    values = ((get(w), get(s)) for w, s in pairs)
    return _median([b - a for a, b in values if a is not None and b is not None])


def _later(ms: float, digits: int) -> str:
    """`1.23 ms later` or `0.40 ms earlier`."""
    return f"{fmt_ms(abs(ms), digits)} {'later' if ms >= 0 else 'earlier'}"
