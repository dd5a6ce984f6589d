"""Client timings derived from raw clock stamps, exactly as the record contract defines them.

Pure functions over nanosecond stamps, so they can be tested with a scripted clock.
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from labkit.records import ClientTimings, DecodeNullReason, validated

__all__ = ["STAMP_FIGURES", "derive_client_timings", "percentile", "stamp_figures"]


def _load_stamp_figures() -> ModuleType | None:
    """The built C figures (`labkit._stampfigures`), or None where labkit was installed
    without them (no C compiler): the same figures are then computed here, in Python."""
    try:
        return importlib.import_module("labkit._stampfigures")
    except ImportError:
        return None


#: The C figures of a stream's stamps (labkit/_stampfigures.c), or None: each function
#: returns None outside its common case, and the Python below runs instead.
STAMP_FIGURES: ModuleType | None = _load_stamp_figures()


def stamp_figures(
    t_start_ns: int, output_event_ns: Sequence[int]
) -> tuple[list[float], float | None, float | None, float | None]:
    """Each output event's offset from `t_start_ns` in ms, and the median, 99th percentile
    and largest of the gaps between consecutive ones (None each under two events): in C
    where it is built and the stamps are its common case, the same floats in Python
    otherwise."""
    if STAMP_FIGURES is not None:
        done = STAMP_FIGURES.offsets(t_start_ns, output_event_ns)
        if done is not None:
            return done  # type: ignore[no-any-return]
    offsets = [(t - t_start_ns) / _NS_PER_MS for t in output_event_ns]
    gaps = sorted(map(operator.sub, offsets[1:], offsets[:-1]))  # each b - a, in C
    if not gaps:
        return offsets, None, None, None
    return offsets, percentile(gaps, 50), percentile(gaps, 99), gaps[-1]


_NS_PER_MS = 1_000_000.0
_CONNECTED = "connection.connect_tcp.complete"
_CONNECTING = "connection.connect_tcp.started"
_TLS_DONE = "connection.start_tls.complete"
_BODY_SENT = ("http11.send_request_body.complete", "http2.send_request_body.complete")
_HEADERS = ("http11.receive_response_headers.complete", "http2.receive_response_headers.complete")
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


def _offset_ms(t_ns: int | None, t_start_ns: int) -> float | None:
    """A stamp's offset from the clock's start in ms (None: not stamped)."""
    return None if t_ns is None else (t_ns - t_start_ns) / _NS_PER_MS


def _phase_ms(phases_ns: Mapping[str, int], t_start_ns: int, *names: str) -> float | None:
    """The offset in ms of the first of `names` traced (None: none was)."""
    for name in names:
        t = phases_ns.get(name)
        if t is not None:
            return (t - t_start_ns) / _NS_PER_MS
    return None


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

    # Module-level helpers, not closures made per call: this runs cold once a request,
    # between other streams' reads.
    t0 = t_start_ns
    offsets, itl_p50, itl_p99, itl_max = stamp_figures(t0, output_event_ns)
    decode, why_null = _decode(offsets, output_tokens, uncounted)
    connected_tcp = _phase_ms(phases_ns, t0, _CONNECTED)
    connecting = _phase_ms(phases_ns, t0, _CONNECTING)
    tls_done = _phase_ms(phases_ns, t0, _TLS_DONE)
    request_sent = _phase_ms(phases_ns, t0, *_BODY_SENT)
    headers_ms = _phase_ms(phases_ns, t0, *_HEADERS)
    connect_ms = connected_tcp
    new_connection: bool | None = True
    if connect_ahead_ns is not None:
        connect_ms = connect_ahead_ns / _NS_PER_MS
    elif connect_ms is None:
        # No request-sent event either: the transport traces nothing (a mock), so unknown.
        new_connection = False if any(name in phases_ns for name in _SENT) else None
    connected = tls_done if tls_done is not None else connected_tcp
    # Validated from the dict at once (`validated`): the same model, 2 µs less a request.
    fields: dict[str, Any] = {
        "send_ms": _send_ms(request_sent, connecting, connected),
        "queue_ms": queue_ms,
        "connect_ms": connect_ms,
        "new_connection": new_connection,
        "tls_ms": tls_done,
        "request_sent_ms": request_sent,
        "headers_ms": headers_ms,
        "first_event_ms": _offset_ms(first_event_ns, t0),
        "ttft_ms": offsets[0] if offsets else None,
        "ttft_text_ms": _offset_ms(first_text_ns, t0),
        "last_token_ms": offsets[-1] if offsets else None,
        "e2e_ms": _offset_ms(end_ns, t0),
        "decode_ms_per_token": decode,
        "output_tokens_per_s": (1000.0 / decode) if decode else None,
        "event_offsets_ms": offsets,
        "event_tokens": event_tokens,
        "itl_ms_p50": itl_p50,
        "itl_ms_p99": itl_p99,
        "itl_ms_max": itl_max,
        "loop_lag_ms": loop_lag_ms,
        "decode_null_reason": why_null,
    }
    if self_check:
        fields.update(self_check)
    return validated(ClientTimings, fields)


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
