"""Builders of synthetic records with known values, for the experiments' computations."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from labkit.records import (
    ClientTimings,
    ErrorKind,
    ProviderTimings,
    RecordError,
    RequestRecord,
    Usage,
)

_ids = itertools.count()


def make_record(
    *,
    experiment: str,
    provider: str = "p",
    ttft: float | None = 100.0,
    decode: float | None = 10.0,
    input_tokens: int | None = 10,
    output_tokens: int | None = 20,
    prefill: float | None = None,
    provider_decode: float | None = None,
    cached: int | None = None,
    warmup: bool = False,
    failed: bool = False,
    text: str | None = "hello",
    tags: dict[str, Any] | None = None,
    prompt_id: str = "p0",
    **client: Any,
) -> RequestRecord:
    """One record; every unspecified timing is a plausible constant."""
    n = next(_ids)
    return RequestRecord(
        run_id="run",
        record_id=f"r{n}",
        experiment=experiment,
        provider=provider,
        provider_kind="fake",
        model="m",
        prompt_id=prompt_id,
        prompt_chars=5,
        prompt_bytes=5,
        started_at=datetime.now(UTC),
        warmup=warmup,
        client=ClientTimings(ttft_ms=ttft, decode_ms_per_token=decode, **client),
        provider_timings=ProviderTimings(
            prefill_ms=prefill, decode_ms_per_token=provider_decode, cached_tokens=cached
        ),
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
        output_text=text,
        tags=tags or {},
        error=RecordError(kind=ErrorKind.HTTP_STATUS, message="HTTP 500", status=500)
        if failed
        else None,
    )
