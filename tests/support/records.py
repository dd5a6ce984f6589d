"""The one builder of synthetic `RequestRecord`s with known values, for every test.

Client timings are consistent by default (headers at half the TTFT, an event every
`decode_ms_per_token` from the first token, end-to-end 2 ms after the last); `client`
keyword arguments override any computed `ClientTimings` field (given event offsets, the
last token and end-to-end follow them).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from labkit.records import (
    AppTimings,
    ClientTimings,
    ProviderTimings,
    RecordError,
    RequestRecord,
    Usage,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
_counter = [0]


def make_record(
    *,
    run_id: str = "run-1",
    provider: str = "local",
    provider_kind: str = "llamacpp",
    experiment: str = "single",
    model: str = "m",
    ttft_ms: float | None = 100.0,
    decode_ms_per_token: float | None = 10.0,
    output_tokens: int | None = 20,
    input_tokens: int | None = 50,
    prefill_ms: float | None = None,
    provider_decode_ms_per_token: float | None = None,
    cached_tokens: int | None = None,
    error_kind: str | None = None,
    error_message: str | None = None,
    warmup: bool = False,
    prepare_ms: float | None = 1.0,
    parse_cpu_ms: float | None = 0.5,
    client_path: str = "wire",
    tags: dict[str, Any] | None = None,
    prompt_id: str = "p1",
    prompt_chars: int = 200,
    started_at: datetime = T0,
    output_text: str | None = None,
    n_events: int | None = None,
    output_tokens_source: str | None = "provider",
    **client: Any,
) -> RequestRecord:
    """One record with consistent client timings (events every `decode_ms_per_token`).

    Without a TTFT (a stream that never produced a token) there are no events, no headers
    and no end-to-end time. `error_kind` makes it a failed request (`error_message`, or
    "synthetic <kind>"; status 500 for an HTTP status error).
    """
    _counter[0] += 1
    n = n_events if n_events is not None else (output_tokens or 0)
    step = decode_ms_per_token or 0.0
    offsets = [ttft_ms + step * k for k in range(n)] if ttft_ms is not None else []
    offsets = client.pop("event_offsets_ms", offsets)  # the last token and e2e follow them
    last = offsets[-1] if offsets else None
    decode = decode_ms_per_token if (output_tokens or 0) >= 2 else None
    timings: dict[str, Any] = {
        "headers_ms": ttft_ms / 2 if ttft_ms is not None else None,
        "first_event_ms": ttft_ms,
        "ttft_ms": ttft_ms,
        "last_token_ms": last,
        "e2e_ms": (last or ttft_ms) + 2.0 if ttft_ms is not None else None,
        "decode_ms_per_token": decode,
        "output_tokens_per_s": 1000.0 / decode if decode else None,
        "event_offsets_ms": offsets,
    }
    timings.update(client)
    error = None
    if error_kind is not None:
        error = RecordError(
            kind=error_kind,  # type: ignore[arg-type]
            message=error_message or f"synthetic {error_kind}",
            status=500 if error_kind == "http_status" else None,
        )
    return RequestRecord(
        run_id=run_id,
        record_id=f"r{_counter[0]}",
        experiment=experiment,
        warmup=warmup,
        provider=provider,
        provider_kind=provider_kind,
        model=model,
        prompt_id=prompt_id,
        prompt_chars=prompt_chars,
        prompt_bytes=prompt_chars,
        started_at=started_at,
        client=ClientTimings(**timings),
        provider_timings=ProviderTimings(
            prefill_ms=prefill_ms,
            decode_ms_per_token=provider_decode_ms_per_token,
            cached_tokens=cached_tokens,
        ),
        app=AppTimings(prepare_ms=prepare_ms, parse_cpu_ms=parse_cpu_ms, client_path=client_path),  # type: ignore[arg-type]
        usage=Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            output_tokens_source=output_tokens_source if output_tokens else None,  # type: ignore[arg-type]
        ),
        output_text=output_text,
        tags=tags or {},
        error=error,
    )


def most_in_flight(records: Iterable[RequestRecord]) -> int:
    """The most requests in flight at once, from their own start and end stamps (one clock):
    an identity of how they were sent, whatever the host's speed."""
    edges = sorted(
        edge
        for r in records
        if r.t_start_mono_ns is not None and r.client.e2e_ms is not None
        for edge in ((r.t_start_mono_ns, 1), (r.t_start_mono_ns + round(r.client.e2e_ms * 1e6), -1))
    )
    return max(itertools.accumulate(step for _, step in edges), default=0)
