"""`attribution`: whose time is it — the provider's, the network's and front end's, or labkit's?

Short requests, half of them on a fresh connection (``connection: close``) so that connect
and TLS times are measured rather than hidden by connection reuse. Every measurement is
classified by owner (docs/measurement.md, "Attribution") with its median value; where the
provider reports nothing about itself, the row says so instead of guessing. TTFT is split
into queue, prefill and network + front end (`TTFTSplit`; each term's sources: that section).
By default (``paths: [wire, sdk]``) each request is also sent through the provider's SDK
right after its wire twin: the paired difference is what the SDK adds (docs/experiments.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from labkit.analysis.requests import client_bound_reason
from labkit.analysis.selection import measured
from labkit.analysis.split import (
    NEGATIVE_DECODE_GAP,
    QUEUE_SOURCES,
    decode_gap_of,
    gateway_wait_of,
    keepalive_wait_of,
    ttft_beyond_prefill_of,
    ttft_split,
)
from labkit.analysis.stats import median, median_of
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.figures import Quantile
from labkit.figures.attribution import AttributionFigures, AttributionRow
from labkit.figures.attribution import AttributionKey as K
from labkit.figures.vantage import VantageFigures
from labkit.providers.base import ChatRequest, ClientPath, Provider, sdk_available
from labkit.records import LabAnswer, RequestRecord
from labkit.timing import percentile
from labkit.wording.attribution import attribution_answer
from labkit.wording.vantage import proof_sentence

__all__ = ["AttributionExperiment", "AttributionSettings"]

PROVIDER = "provider"
NETWORK = "network and serving front end"
APPLICATION = "application (labkit)"

_BOTH_PATHS: tuple[ClientPath, ...] = ("wire", "sdk")


class AttributionSettings(ExperimentSettings):
    """A short prompt sent `repeats` times, alternating fresh and reused connections."""

    kind: Literal["attribution"] = "attribution"
    prompt: str = Field(default="Say hello in five words.", min_length=1)
    repeats: PositiveInt = 6
    warmup: NonNegativeInt = 1
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 32, "temperature": 0})
    paths: list[ClientPath] | None = Field(
        default_factory=lambda: list(_BOTH_PATHS),
        description="Client paths: by default each request goes on the wire and then through "
        "the provider's official SDK (where it has one), so the pair's difference is the "
        "SDK's overhead.",
    )
    compare_sdk: bool | None = Field(
        default=None,
        exclude=True,
        description="Deprecated alias of `paths`: false is `paths: [wire]`, true "
        "`paths: [wire, sdk]`.",
    )

    @model_validator(mode="after")
    def _compare_sdk_alias(self) -> AttributionSettings:
        if self.compare_sdk is None:
            return self
        wanted: list[ClientPath] = ["wire", "sdk"] if self.compare_sdk else ["wire"]
        if "paths" in self.model_fields_set and self.paths != wanted:
            raise ValueError("compare_sdk (deprecated) contradicts paths; give paths only")
        self.paths = wanted
        return self


def _median(values: list[float]) -> float | None:
    return percentile(sorted(values), 50) if values else None


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

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and repeats."""
        return self._s.warmup + self._s.repeats

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups, then `repeats` requests; even trials open a fresh connection.

        `requests_for` sends each one on every path of `paths` in turn (wire, then SDK), on
        the same kind of connection, so the pair's difference is the SDK's overhead.
        """
        warmups = self.warmups("attribution", self._s.prompt)
        # `fresh_connection` closes the connection *after* a request: closing after the last
        # warm-up and after every odd trial makes each even trial connect anew.
        if warmups:
            warmups[-1].request.fresh_connection = True
        yield from warmups
        for trial in range(self._s.repeats):
            fresh = trial % 2 == 0
            request = ChatRequest(
                self.messages(self._s.prompt), dict(self._s.params), "attribution"
            )
            request.fresh_connection = not fresh
            yield PlannedRequest(
                key=f"{self.name}/{trial}",
                request=request,
                trial=trial,
                tags={"connection": "fresh" if fresh else "reused"},
            )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """One row per measurement: owner, median value, source fields, and a note."""
        every = measured(records)
        wire_records = [r for r in every if r.app.client_path == "wire"]
        sdk_records = [r for r in every if r.app.client_path == "sdk"]
        # With the SDK path alone (`paths: [sdk]`), attribute what it saw.
        ok = wire_records or sdk_records
        path = "wire" if wire_records else "sdk"
        bound = client_bound_reason(
            r for r in records if not r.warmup and r.app.client_path == path
        )
        sdk = {r.trial: r for r in sdk_records}
        wire = {r.trial: r for r in wire_records}
        pairs = [(wire[t], sdk[t]) for t in sorted(wire) if t in sdk]
        fresh = [r for r in ok if r.tags.get("connection") == "fresh"]
        reported = any(r.provider_timings.prefill_ms is not None for r in ok)
        rows: list[AttributionRow] = []

        def row(
            key: K,
            name: str,
            owner: str,
            value: float | None,
            source: str,
            missing: str,
            client_bound: str | None = None,
        ) -> None:
            rows.append(
                AttributionRow(
                    key=key,
                    measurement=name,
                    owner=owner,
                    value_ms=value,
                    source=source,
                    note=None if value is not None else missing,
                    client_bound=client_bound if value is not None else None,
                )
            )

        nr = "not reported by this provider"
        no_sdk = (
            "not measured: no official SDK for this provider kind, or paths without sdk"
            if not sdk
            else "not observed"
        )
        row(
            K.PREFILL,
            "prefill (prompt processing)",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.prefill_ms),
            "provider_timings.prefill_ms",
            nr,
        )
        row(
            K.DECODE_PER_TOKEN,
            "decode per output token",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.decode_ms_per_token),
            "provider_timings.decode_ms_per_token",
            nr,
        )
        row(
            K.SERVER_PROCESSING,
            "server processing up to headers",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.processing_ms),
            "provider_timings.processing_ms",
            nr,
        )
        split = ttft_split(ok, bound)
        row(
            K.PROVIDER_QUEUE,
            "provider queue (before the request was scheduled, mean)",
            PROVIDER,
            split.provider_queue_ms.value if split.provider_queue_ms else None,
            QUEUE_SOURCES.get(split.queue_source or "", "provider_timings.queue_ms"),
            "not reported by this provider",
        )
        row(
            K.SERVER_TTFT,
            "server's own time to first token",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.server_ttft_ms),
            "provider_timings.server_ttft_ms",
            nr,
        )
        row(
            K.SERVER_TOTAL,
            "server's own total time",
            PROVIDER,
            median_of(ok, lambda r: r.provider_timings.server_total_ms),
            "provider_timings.server_total_ms",
            nr,
        )
        row(
            K.KEEPALIVE_WAIT,
            "wait behind keep-alive comments (a queue signal)",
            PROVIDER,
            median_of(ok, keepalive_wait_of),
            "client.first_event_ms - client.headers_ms, where provider_timings."
            "keepalive_comments > 0",
            "no keep-alive comments before the first event (or the SDK path, which drops them)",
        )
        behind = split.behind_gateway
        row(
            K.GATEWAY_WAIT,
            f"wait behind the gateway's processing comments ({behind}): the upstream's "
            "queue and prefill together, not separable"
            if behind
            else "wait behind a gateway's processing comments",
            PROVIDER,
            median_of(ok, gateway_wait_of),
            "client.first_event_ms - client.headers_ms, where provider_timings."
            "keepalive_gateway is set",
            "no gateway's processing comments before the first event (or the SDK path, "
            "which drops them)",
        )
        row(
            K.NETWORK_FRONT_END,
            "network and front end (TTFT − labkit's own − provider queue − prefill, mean)",
            NETWORK,
            split.network_front_end_ms.value if split.network_front_end_ms else None,
            "mean over requests of client.ttft_ms - labkit's own (client.send_ms + "
            "client.ttft_lateness_ms) - provider queue - provider prefill",
            "cannot be separated: " + "; ".join(split.not_derived),
            bound,
        )
        row(
            K.TCP_CONNECT,
            "TCP connect (fresh connections)",
            NETWORK,
            median_of(fresh, lambda r: r.client.connect_ms),
            "client.connect_ms",
            "not observed (no fresh connection, or a transport without trace events)",
        )
        row(
            K.TLS_HANDSHAKE,
            "TLS handshake (fresh connections)",
            NETWORK,
            median_of(fresh, lambda r: r.client.tls_ms),
            "client.tls_ms",
            "not observed (plain HTTP, or no fresh connection)",
        )
        row(
            K.REQUEST_SENT,
            "request sent",
            NETWORK,
            median_of(ok, lambda r: r.client.request_sent_ms),
            "client.request_sent_ms",
            "not observed (transport without trace events)",
        )
        row(
            K.RESPONSE_HEADERS,
            "response headers (time to first byte)",
            NETWORK,
            median_of(ok, lambda r: r.client.headers_ms),
            "client.headers_ms",
            "not observed",
        )
        row(
            K.TTFT_MINUS_PREFILL,
            "TTFT minus provider prefill",
            NETWORK,
            median_of(ok, ttft_beyond_prefill_of),
            "client.ttft_ms - provider prefill (provider_timings.prefill_ms, else server_ttft_ms)",
            "cannot be separated: the provider reports no prefill time, so client TTFT "
            "holds prefill, queueing and network together",
            bound,
        )
        decode_gap = median_of(ok, decode_gap_of)
        row(
            K.DECODE_CLIENT_MINUS_PROVIDER,
            "decode per token, client minus provider",
            NETWORK,
            decode_gap,
            "client.decode_ms_per_token - provider_timings.decode_ms_per_token",
            "cannot be separated: the provider reports no decode time",
            NEGATIVE_DECODE_GAP if decode_gap is not None and decode_gap < 0 else bound,
        )
        row(
            K.CLIENT_SEND,
            "request path, client side (t_start to the request handed to the kernel, "
            "less a connection opened inside)",
            APPLICATION,
            median_of(ok, lambda r: r.client.send_ms),
            "client.send_ms",
            "not observed (transport without trace events)",
        )
        row(
            K.REQUEST_PREPARATION,
            "request preparation (before t_start)",
            APPLICATION,
            median_of(ok, lambda r: r.app.prepare_ms),
            "app.prepare_ms",
            "not observed",
        )
        row(
            K.STREAM_PARSING,
            "stream parsing (whole stream)",
            APPLICATION,
            median_of(ok, lambda r: r.app.parse_cpu_ms),
            "app.parse_cpu_ms",
            "not observed",
        )
        row(
            K.LABKIT_QUEUE,
            "queueing inside labkit",
            APPLICATION,
            median_of(ok, lambda r: r.client.queue_ms),
            "client.queue_ms",
            "not observed",
        )
        row(
            K.SDK_TTFT,
            "SDK overhead on TTFT (sdk − wire)",
            APPLICATION,
            _pair_diff(pairs, lambda r: r.client.ttft_ms),
            "client.ttft_ms with app.client_path sdk, minus the same trial on the wire",
            no_sdk,
        )
        row(
            K.SDK_PER_TOKEN,
            "SDK overhead per output token (sdk − wire)",
            APPLICATION,
            _pair_diff(pairs, lambda r: r.client.decode_ms_per_token),
            "client.decode_ms_per_token, sdk minus wire, paired by trial",
            no_sdk,
        )
        delays = [d for d in (_event_delay_ms(w, s) for w, s in pairs) if d is not None]
        row(
            K.SDK_EVENT_DELAY,
            "SDK delay per output event (sdk − wire)",
            APPLICATION,
            _median(delays),
            "mean over aligned output events of client.event_offsets_ms[i], sdk minus wire; "
            "median over trials",
            no_sdk,
        )
        cpu_wire = _values(wire_records, _cpu_us_per_event)
        cpu_sdk = _values(sdk_records, _cpu_us_per_event)
        cpu_pairs = [
            (a, b)
            for a, b in ((_cpu_us_per_event(w), _cpu_us_per_event(s)) for w, s in pairs)
            if a is not None and b is not None
        ]
        cpu_added = _median([b - a for a, b in cpu_pairs])
        row(
            K.CPU_PER_EVENT_WIRE,
            "CPU per output event, wire path",
            APPLICATION,
            _ms(_median(cpu_wire)),
            "app.cpu_ms / output events (len(client.event_offsets_ms)), wire path",
            "not observed",
        )
        row(
            K.CPU_PER_EVENT_SDK,
            "CPU per output event, SDK path",
            APPLICATION,
            _ms(_median(cpu_sdk)),
            "app.cpu_ms / output events, SDK path",
            no_sdk,
        )
        row(
            K.SDK_ADDED_CPU_PER_EVENT,
            "SDK added CPU per output event (sdk − wire)",
            APPLICATION,
            _ms(cpu_added),
            "app.cpu_ms / output events, sdk minus wire, paired by trial",
            no_sdk,
        )

        ttft = median_of(ok, lambda r: r.client.ttft_ms)
        gaps = [g for g in map(decode_gap_of, ok) if g is not None]
        gap = median(gaps) if gaps else None
        f = AttributionFigures(
            rows=rows,
            ttft_ms_p50=ttft,
            provider_reports_timings=reported,
            n=len(ok),
            n_fresh_connection=len(fresh),
            sdk_measured=bool(sdk),
            n_sdk_pairs=len(pairs),
            sdk_ttft_ms=_pair_diff(pairs, lambda r: r.client.ttft_ms),
            sdk_event_delay_ms=_median(delays),
            n_event_delay_pairs=len(delays),
            cpu_us_per_event_wire=_median(cpu_wire),
            n_cpu_wire=len(cpu_wire),
            cpu_us_per_event_sdk=_median(cpu_sdk),
            n_cpu_sdk=len(cpu_sdk),
            sdk_cpu_us_per_event=cpu_added,
            n_cpu_pairs=len(cpu_pairs),
            sdk_server_decode_ms_per_token=_pair_diff(
                pairs, lambda r: r.provider_timings.decode_ms_per_token
            ),
            ttft_split=split,
            sdk_ttft=_paired(pairs, lambda r: r.client.ttft_ms) if pairs else None,
            decode_gap=gap,
            decode_gap_client_bound=(
                NEGATIVE_DECODE_GAP if gap is not None and (gap.value or 0) < 0 else bound
            )
            if gap is not None
            else None,
            prepare_ms=median(_values(ok, lambda r: r.app.prepare_ms)),
            parse_ms=median(_values(ok, lambda r: r.app.parse_cpu_ms)),
        )
        if not ok or ttft is None:
            return self.answer(
                provider_id, model, "No successful request to attribute.", f, status="failed"
            )
        return self.answer(provider_id, model, attribution_answer(f, self._sdk_why_not(records)), f)

    def cite(self, answer: LabAnswer, others: list[LabAnswer]) -> LabAnswer:
        """Where a vantage run of the same provider is in the run, the answer cites its
        proof of the split (or that it failed) and `split_proven` holds its verdict."""
        proofs = [a.figures for a in others if isinstance(a.figures, VantageFigures)]
        f = answer.figures
        if not proofs or not isinstance(f, AttributionFigures):
            return answer
        proof = proofs[0]
        return answer.model_copy(
            update={
                "answer": f"{answer.answer} {proof_sentence(proof)}",
                "figures": f.model_copy(update={"split_proven": proof.proven}),
            }
        )

    def _sdk_why_not(self, records: list[RequestRecord]) -> str | None:
        """Why the SDK path was not measured where `paths` asked for it (None: it was, or
        it was not asked for)."""
        if "sdk" not in (self._s.paths or []) or any(
            r.app.client_path == "sdk" and not r.warmup and r.error is None for r in records
        ):
            return None
        kind = records[0].provider_kind if records else None
        if kind is not None and not sdk_available(kind):
            return f"the {kind} kind has no official SDK"
        return "no SDK request succeeded"


def _differences(
    pairs: list[tuple[RequestRecord, RequestRecord]],
    get: Callable[[RequestRecord], float | None],
) -> list[float]:
    """get(sdk) − get(wire) of each (wire, sdk) pair where both are known."""
    values = ((get(w), get(s)) for w, s in pairs)
    return [b - a for a, b in values if a is not None and b is not None]


def _pair_diff(
    pairs: list[tuple[RequestRecord, RequestRecord]],
    get: Callable[[RequestRecord], float | None],
) -> float | None:
    """Median over (wire, sdk) pairs of get(sdk) − get(wire)."""
    return _median(_differences(pairs, get))


def _paired(
    pairs: list[tuple[RequestRecord, RequestRecord]],
    get: Callable[[RequestRecord], float | None],
) -> Quantile:
    """The paired median of get(sdk) − get(wire), with its distribution-free interval."""
    return median(_differences(pairs, get))


def _values(
    records: list[RequestRecord], get: Callable[[RequestRecord], float | None]
) -> list[float]:
    """The non-null values of `get` over `records`."""
    return [v for v in map(get, records) if v is not None]


def _cpu_us_per_event(r: RequestRecord) -> float | None:
    """`app.cpu_ms` per output event, in µs (None without CPU time or output events)."""
    n = len(r.client.event_offsets_ms)
    return 1000.0 * r.app.cpu_ms / n if r.app.cpu_ms is not None and n else None


def _event_delay_ms(wire: RequestRecord, sdk: RequestRecord) -> float | None:
    """Mean over aligned output events of sdk − wire arrival offset (None without events)."""
    a, b = wire.client.event_offsets_ms, sdk.client.event_offsets_ms
    n = min(len(a), len(b))
    return sum(b[i] - a[i] for i in range(n)) / n if n else None


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000.0
