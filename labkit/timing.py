"""Client timings derived from raw clock stamps, exactly as the record contract defines them.

Pure functions over nanosecond stamps, so they can be tested with a scripted clock.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from labkit.records import ClientTimings, DecodeNullReason

__all__ = ["derive_client_timings", "percentile"]

_NS_PER_MS = 1_000_000.0
_CONNECTED = "connection.connect_tcp.complete"
_CONNECTING = "connection.connect_tcp.started"
_TLS_DONE = "connection.start_tls.complete"
_BODY_SENT = ("http11.send_request_body.complete", "http2.send_request_body.complete")
#: Trace events of every traced request, on a new connection or a reused one.
_SENT = ("http11.send_request_headers.complete", "http2.send_request_headers.complete")


def percentile(sorted_values: Sequence[float], q: float, scale: float = 1.0) -> float:
    """Linear-interpolated percentile (numpy's default) of an already sorted sequence; with
    `scale`, of each value divided by it (only the two values it interpolates between are
    converted: division keeps the order)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    low, high = sorted_values[lo], sorted_values[hi]
    if scale != 1.0:
        low, high = low / scale, high / scale
    return low + (high - low) * frac


def derive_client_timings(
    *,
    t_start_ns: int,
    phases_ns: Mapping[str, int],
    first_event_ns: int | None,
    output_event_ns: Sequence[int],
    first_text_ns: int | None,
    end_ns: int | None,
    output_tokens: int | None,
    event_tokens: list[int] | None = None,
    queue_ms: float | None = None,
    loop_lag_ms: float | None = None,
    connect_ahead_ns: int | None = None,
    uncounted: DecodeNullReason = "hidden_output",
    self_check: Mapping[str, Any] | None = None,
) -> ClientTimings:
    """Build `ClientTimings` from stamps taken with one clock.

    `phases_ns` maps httpcore trace events (``connection.connect_tcp.complete``, ...) to the
    stamp at which they fired. Offsets are relative to `t_start_ns`; a missing stamp gives
    ``None``. ``decode_ms_per_token`` uses `output_tokens`, the tokens the stream delivered
    (`usage.streamed_output_tokens`), so an event that carries several tokens is accounted
    for and hidden reasoning tokens are not; it is null (``decode_null_reason`` says why)
    where it cannot be measured. `connect_ahead_ns`: how long the connection
    opened for this request just before `t_start_ns` took (warm load levels): its
    ``connect_ms``, outside every offset. `uncounted`: the reason decode is null for when
    `output_tokens` is None (`hidden_output`, or `not_read` where no parser counted).
    `self_check`: the stamp self-check's fields
    (`labkit.measurement.lateness.self_check_fields`), built in with the rest.
    """

    def off(t: int | None) -> float | None:
        return None if t is None else (t - t_start_ns) / _NS_PER_MS

    def phase(*names: str) -> float | None:
        for name in names:
            t = phases_ns.get(name)
            if t is not None:
                return off(t)
        return None

    offsets = [(t - t_start_ns) / _NS_PER_MS for t in output_event_ns]
    ttft = offsets[0] if offsets else None
    last = offsets[-1] if offsets else None
    decode, why_null = _decode(offsets, output_tokens, uncounted)
    gaps = sorted(map(operator.sub, offsets[1:], offsets[:-1]))  # each b - a, in C
    connect_ms = phase(_CONNECTED)
    new_connection: bool | None = True
    if connect_ahead_ns is not None:
        connect_ms = connect_ahead_ns / _NS_PER_MS
    elif connect_ms is None:
        # No request-sent event either: the transport traces nothing (a mock), so unknown.
        new_connection = False if any(name in phases_ns for name in _SENT) else None
    request_sent = phase(*_BODY_SENT)
    tls_done = phase(_TLS_DONE)
    connected = tls_done if tls_done is not None else phase(_CONNECTED)
    return ClientTimings(
        send_ms=_send_ms(request_sent, phase(_CONNECTING), connected),
        queue_ms=queue_ms,
        connect_ms=connect_ms,
        new_connection=new_connection,
        tls_ms=phase("connection.start_tls.complete"),
        request_sent_ms=request_sent,
        headers_ms=phase(
            "http11.receive_response_headers.complete", "http2.receive_response_headers.complete"
        ),
        first_event_ms=off(first_event_ns),
        ttft_ms=ttft,
        ttft_text_ms=off(first_text_ns),
        last_token_ms=last,
        e2e_ms=off(end_ns),
        decode_ms_per_token=decode,
        output_tokens_per_s=(1000.0 / decode) if decode else None,
        event_offsets_ms=offsets,
        event_tokens=event_tokens,
        itl_ms_p50=percentile(gaps, 50) if gaps else None,
        itl_ms_p99=percentile(gaps, 99) if gaps else None,
        itl_ms_max=gaps[-1] if gaps else None,
        loop_lag_ms=loop_lag_ms,
        decode_null_reason=why_null,
        **(self_check or {}),
    )


def _send_ms(
    request_sent: float | None, connecting: float | None, connected: float | None
) -> float | None:
    """`ClientTimings.send_ms`: `request_sent` less the connection opened inside the window,
    from its start (`connecting`; t_start where the transport did not say) to `connected`
    (TCP, or TLS when there was a handshake): offsets from t_start, in ms."""
    if request_sent is None:
        return None
    if connected is None:
        return request_sent
    return max(0.0, request_sent - (connected - (connecting or 0.0)))


def _decode(
    offsets: Sequence[float], output_tokens: int | None, uncounted: DecodeNullReason
) -> tuple[float | None, DecodeNullReason | None]:
    """Decode ms per token over the output events' offsets, or null and why (a reason
    whenever it is null).

    It needs two output events: one event that carries the whole answer (however many
    tokens) leaves no interval to divide, which is not a decode of 0 ms per token.
    """
    if not offsets:
        return None, "no_output"
    if output_tokens is None:
        return None, uncounted
    if len(offsets) < 2:
        return None, "one_output_event"
    if output_tokens < 2:
        return None, "one_token"
    return (offsets[-1] - offsets[0]) / (output_tokens - 1), None
