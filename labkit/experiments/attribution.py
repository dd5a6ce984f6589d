"""`attribution`: whose time is it — the provider's, the network's and front end's, or labkit's?

Short requests, half of them on a fresh connection (``connection: close``) so that connect
and TLS times are measured rather than hidden by connection reuse. Every measurement is
classified by owner (docs/measurement.md, "Attribution") with its median value; where the
provider reports nothing about itself, the row says so instead of guessing.

TTFT is split into the provider's queue, the provider's prefill, and network + serving front
end (`TTFTSplit`): the queue as the provider reports it (Groq, Cerebras, vLLM, TGI), or 0
by construction where labkit alone uses a managed server and never has more requests in
flight than its slots (`Provider.exclusive_slots`: llama.cpp's `timings` have no queue
field), or the wait between the headers and the first event while the server sent
keep-alive comments (DeepSeek); the prefill from `prefill_ms`, else the server's own TTFT
(vLLM, Fireworks: from scheduling). The answer names each term it could not derive.

By default (``paths: [wire, sdk]``) every request is also sent through the provider's
official SDK right after its wire twin, on the same kind of connection: the paired
difference is what the SDK adds — to TTFT, to each output event's arrival, and in CPU per
output event (`app.cpu_ms`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, model_validator

from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import fmt_ms, measured, median_of
from labkit.figures import AttributionFigures, AttributionRow, TTFTSplit
from labkit.figures import AttributionKey as K
from labkit.providers.base import ChatRequest, ClientPath, Provider, sdk_available
from labkit.records import LabAnswer, RequestRecord
from labkit.timing import percentile

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
        slots = provider.exclusive_slots()
        server_tags: dict[str, str | int | float | bool] = {}
        if slots is not None:
            server_tags = {"server_slots": slots, "in_flight_max": provider.settings.concurrency}
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
                tags={"connection": "fresh" if fresh else "reused", **server_tags},
            )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """One row per measurement: owner, median value, source fields, and a note."""
        every = measured(records)
        wire_records = [r for r in every if r.app.client_path == "wire"]
        sdk_records = [r for r in every if r.app.client_path == "sdk"]
        # With the SDK path alone (`paths: [sdk]`), attribute what it saw.
        ok = wire_records or sdk_records
        sdk = {r.trial: r for r in sdk_records}
        wire = {r.trial: r for r in wire_records}
        pairs = [(wire[t], sdk[t]) for t in sorted(wire) if t in sdk]
        fresh = [r for r in ok if r.tags.get("connection") == "fresh"]
        reported = any(r.provider_timings.prefill_ms is not None for r in ok)
        rows: list[AttributionRow] = []

        def row(
            key: K, name: str, owner: str, value: float | None, source: str, missing: str
        ) -> None:
            rows.append(
                AttributionRow(
                    key=key,
                    measurement=name,
                    owner=owner,
                    value_ms=value,
                    source=source,
                    note=None if value is not None else missing,
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
        split = ttft_split(ok)
        row(
            K.PROVIDER_QUEUE,
            "provider queue (before the request was scheduled)",
            PROVIDER,
            split.provider_queue_ms,
            _QUEUE_SOURCES.get(split.queue_source or "", "provider_timings.queue_ms"),
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
            median_of(ok, _keepalive_wait),
            "client.first_event_ms - client.headers_ms, where provider_timings."
            "keepalive_comments > 0",
            "no keep-alive comments before the first event (or the SDK path, which drops them)",
        )
        row(
            K.NETWORK_FRONT_END,
            "network and front end (TTFT − provider queue − prefill)",
            NETWORK,
            split.network_front_end_ms,
            "client.ttft_ms - provider queue - provider prefill",
            "cannot be separated: " + "; ".join(split.not_derived),
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
            _diff(ok, lambda r: r.client.ttft_ms, lambda r: r.provider_timings.prefill_ms),
            "client.ttft_ms - provider_timings.prefill_ms",
            "cannot be separated: the provider reports no prefill time, so client TTFT "
            "holds prefill, queueing and network together",
        )
        row(
            K.DECODE_CLIENT_MINUS_PROVIDER,
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
            K.LOOP_LAG,
            "event-loop lag while reading",
            APPLICATION,
            median_of(ok, lambda r: r.client.loop_lag_ms),
            "client.loop_lag_ms",
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
        )
        if not ok or ttft is None:
            return self.answer(
                provider_id, model, "No successful request to attribute.", f, status="failed"
            )
        prepare = f.value(K.REQUEST_PREPARATION)
        parse = f.value(K.STREAM_PARSING)
        answer = _split_sentence(split)
        if answer:
            answer = _provider_share_lead(split) + answer
            dgap = f.value(K.DECODE_CLIENT_MINUS_PROVIDER)
            if dgap is not None:
                answer += (
                    f" Per output token the client's time was {fmt_ms(dgap, 2, signed=True)} "
                    f"off the server's own {fmt_ms(f.value(K.DECODE_PER_TOKEN), 2)} "
                    "(client minus server, median per request)."
                )
        elif reported:
            prefill = f.value(K.PREFILL)
            gap = f.value(K.TTFT_MINUS_PREFILL)
            answer = (
                f"{100 * (prefill or 0) / ttft:.0f}% of the wait for the first token was the "
                f"server's own work: of a median TTFT of {fmt_ms(ttft)}, the server spent "
                f"{fmt_ms(prefill)} reading the prompt (prefill), and the network and serving "
                f"front end (HTTP, chat template, tokenizing, queueing) took "
                f"{fmt_ms(gap)} ({100 * (gap or 0) / ttft:.0f}%)."
            )
            dgap = f.value(K.DECODE_CLIENT_MINUS_PROVIDER)
            if dgap is not None:
                answer += (
                    f" Per output token the client's time was {fmt_ms(dgap, 2, signed=True)} "
                    f"off the server's own {fmt_ms(f.value(K.DECODE_PER_TOKEN), 2)} "
                    "(client minus server, median per request)."
                )
        else:
            answer = (
                f"The median TTFT was {fmt_ms(ttft)}; this provider reports no timings of its "
                f"own, so prefill, queueing and network cannot be separated inside it."
            )
            processing = f.value(K.SERVER_PROCESSING)
            if processing is not None:
                answer += (
                    f" Its processing header says {fmt_ms(processing)}"
                    " of server time before the response headers."
                )
        connect = f.value(K.TCP_CONNECT)
        if connect is not None:
            answer += f" A fresh connection cost {fmt_ms(connect, 2)} to connect"
            tls = f.value(K.TLS_HANDSHAKE)
            answer += f" and {fmt_ms(tls, 2)} for TLS." if tls is not None else "."
        answer += (
            f" labkit itself spent {fmt_ms(prepare, 2)} preparing each request (before the clock "
            f"starts, so outside TTFT) and {fmt_ms(parse, 2)} parsing each stream."
        )
        answer += self._sdk_sentences(records, f)
        return self.answer(provider_id, model, answer, f)

    def _sdk_sentences(self, records: list[RequestRecord], f: AttributionFigures) -> str:
        """What the official SDK added, or why it was not measured."""
        if not f.sdk_measured:
            if "sdk" not in (self._s.paths or []):
                return ""
            kind = records[0].provider_kind if records else None
            why = (
                f"the {kind} kind has no official SDK"
                if kind is not None and not sdk_available(kind)
                else "no SDK request succeeded"
            )
            return f" The SDK path was not measured: {why}."
        text = ""
        sdk_ttft = f.sdk_ttft_ms
        if sdk_ttft is not None:
            sdk_tok = f.value(K.SDK_PER_TOKEN)
            text += (
                f" Through the official SDK the first token came {_later(sdk_ttft, 2)} than on "
                f"labkit's wire path (median of {f.n_sdk_pairs} paired requests)"
                + (f" and each token {_later(sdk_tok, 3)}." if sdk_tok is not None else ".")
            )
            server = f.sdk_server_decode_ms_per_token
            if sdk_tok is not None and server is not None:
                text += (
                    f" The server's own decode was {_later(server, 3, 'slower', 'faster')} per "
                    "token during the SDK's requests than during the wire's: that part of "
                    "the difference is the server's (on a shared host the SDK's extra CPU can "
                    "slow the server)."
                )
        delay = f.sdk_event_delay_ms
        if delay is not None:
            text += (
                f" Each output event reached the application {_later(delay, 3)} through the "
                f"SDK (mean over a request's events, median of "
                f"{f.n_event_delay_pairs} pairs)."
            )
        wire_us, sdk_us = f.cpu_us_per_event_wire, f.cpu_us_per_event_sdk
        if wire_us is not None and sdk_us is not None:
            added = f.sdk_cpu_us_per_event
            text += (
                f" CPU per output event, request overhead included: {_fmt_us(wire_us)} on the "
                f"wire (median of {f.n_cpu_wire} requests) and {_fmt_us(sdk_us)} "
                f"through the SDK (median of {f.n_cpu_sdk})"
                + (
                    f", the SDK {'adding' if added >= 0 else 'saving'} {_fmt_us(abs(added))} "
                    f"per event (median of {f.n_cpu_pairs} pairs)."
                    if added is not None
                    else "."
                )
            )
        return text


_QUEUE_SOURCES = {
    "reported": "provider_timings.queue_ms",
    "idle": "0 by construction: labkit alone used this managed server, with no more "
    "requests in flight than its slots (tags server_slots, in_flight_max)",
    "keepalive": "client.first_event_ms - client.headers_ms while keep-alive comments came",
}


def _keepalive_wait(r: RequestRecord) -> float | None:
    """Headers to first event, for a request the server kept alive with comments."""
    c = r.client
    if not r.provider_timings.keepalive_comments or c.first_event_ms is None:
        return None
    return None if c.headers_ms is None else c.first_event_ms - c.headers_ms


def _queue_of(r: RequestRecord) -> tuple[float, str] | None:
    """The provider queue of one request and how it was known (None: not derivable)."""
    reported = r.provider_timings.queue_ms
    if reported is not None:
        return reported, "reported"
    slots, in_flight = r.tags.get("server_slots"), r.tags.get("in_flight_max")
    if isinstance(slots, int) and isinstance(in_flight, int) and in_flight <= slots:
        return 0.0, "idle"
    wait = _keepalive_wait(r)
    return (wait, "keepalive") if wait is not None else None


def _prefill_of(r: RequestRecord) -> tuple[float, str] | None:
    """The provider's prefill of one request, and the field it came from."""
    pt = r.provider_timings
    if pt.prefill_ms is not None:
        return pt.prefill_ms, "provider_timings.prefill_ms"
    if pt.server_ttft_ms is not None:
        return pt.server_ttft_ms, "provider_timings.server_ttft_ms"
    return None


def ttft_split(records: list[RequestRecord]) -> TTFTSplit:
    """TTFT split into provider queue, provider prefill, and network + front end: medians
    over the requests that had each term, and the terms that could not be derived."""
    queues: list[float] = []
    prefills: list[float] = []
    rest: list[float] = []
    queue_how: set[str] = set()
    prefill_how: set[str] = set()
    for r in records:
        ttft = r.client.ttft_ms
        queue, prefill = _queue_of(r), _prefill_of(r)
        if queue is not None:
            queues.append(queue[0])
            queue_how.add(queue[1])
        if prefill is not None:
            prefills.append(prefill[0])
            prefill_how.add(prefill[1])
        if ttft is not None and queue is not None and prefill is not None:
            rest.append(ttft - queue[0] - prefill[0])
    missing = []
    if not queues:
        missing.append(
            "the provider reports no queue time and labkit cannot rule queueing out "
            "(not a managed server used by labkit alone within its slots)"
        )
    if not prefills:
        missing.append("the provider reports no prefill time")
    return TTFTSplit(
        ttft_ms=median_of(records, lambda r: r.client.ttft_ms),
        provider_queue_ms=_median(queues),
        queue_source=_one(queue_how),
        provider_prefill_ms=_median(prefills),
        prefill_source=_one(prefill_how),
        network_front_end_ms=_median(rest),
        not_derived=missing,
    )


def _one(values: set[str]) -> str | None:
    """The only value, or a joined list when requests differed."""
    return " / ".join(sorted(values)) if values else None


def _provider_share_lead(split: TTFTSplit) -> str:
    """`68% of the wait for the first token was the provider's own work. ` (the number
    first), or empty when neither the queue nor the prefill is known."""
    ttft = split.ttft_ms
    own = [v for v in (split.provider_queue_ms, split.provider_prefill_ms) if v is not None]
    if not ttft or not own:
        return ""
    what = "queue and prefill" if len(own) == 2 else "prefill"
    if split.provider_prefill_ms is None:
        what = "queue"
    return (
        f"{100 * sum(own) / ttft:.0f}% of the wait for the first token was the provider's own "
        f"work ({what}). "
    )


def _split_sentence(split: TTFTSplit) -> str:
    """`Of a median TTFT of …, the provider's queue was …` (empty: nothing to split)."""
    ttft = split.ttft_ms
    if ttft is None or (split.provider_queue_ms is None and split.provider_prefill_ms is None):
        return ""

    def share(v: float | None, how: str = "") -> str:
        pct = f"{100 * v / ttft:.0f}%" if v is not None and ttft else ""
        inside = "; ".join(x for x in (pct, how) if x)
        return f"{fmt_ms(v)} ({inside})" if inside else fmt_ms(v)

    parts = []
    queue = split.provider_queue_ms
    if queue is not None:
        how = {
            "reported": "as the provider reports it",
            "idle": "by construction: labkit alone used the managed server and never had "
            "more requests in flight than its slots",
            "keepalive": "the wait behind its keep-alive comments",
        }.get(split.queue_source or "", "from mixed sources")
        parts.append(f"the provider's queue was {share(queue, how)}")
    if split.provider_prefill_ms is not None:
        parts.append(f"its prefill {share(split.provider_prefill_ms)}")
    if split.network_front_end_ms is not None:
        parts.append(
            f"the network and serving front end (HTTP, templating, tokenization) "
            f"{share(split.network_front_end_ms)}"
        )
    text = f"Of a median TTFT of {fmt_ms(ttft)}, " + ", ".join(parts) + "."
    if split.not_derived:
        text += " Not derived: " + "; ".join(split.not_derived) + "."
        if split.provider_prefill_ms is not None and split.provider_queue_ms is None:
            text += " TTFT minus prefill holds queueing, network and front end together."
    return text


def _pair_diff(
    pairs: list[tuple[RequestRecord, RequestRecord]],
    get: Callable[[RequestRecord], float | None],
) -> float | None:
    """Median over (wire, sdk) pairs of get(sdk) − get(wire)."""
    values = ((get(w), get(s)) for w, s in pairs)
    return _median([b - a for a, b in values if a is not None and b is not None])


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


def _fmt_us(us: float) -> str:
    return f"{us:.1f} µs" if us < 100 else f"{us:.0f} µs"


def _later(ms: float, digits: int, later: str = "later", earlier: str = "earlier") -> str:
    """`1.23 ms later` or `0.40 ms earlier`."""
    return f"{fmt_ms(abs(ms), digits)} {later if ms >= 0 else earlier}"
