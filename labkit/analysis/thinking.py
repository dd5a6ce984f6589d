"""Hidden thinking time, estimated: where a provider counts reasoning tokens it never
streams (`Usage.reasoning_tokens`), the time they took is inside the TTFT and nowhere else.

Each such request's thinking is estimated as its reasoning tokens × its own visible decode pace
(`client.decode_ms_per_token`), which splits its TTFT into waiting, thinking (estimated) and
answering (measured). Each part's interval is across the run's requests, never from one
request's inter-token gaps; what no interval carries is the pace itself (a provider that thinks
faster or slower than it answers), which is why it is labelled estimated. The fields and why:
docs/measurement.md, "Hidden thinking time, estimated".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labkit.analysis.stats import mean
from labkit.figures.thinking import ThinkingFigures, ThinkingRequest
from labkit.records import RequestRecord

__all__ = ["hidden_reasoning", "thinking_estimate", "thinking_figures"]


def hidden_reasoning(record: RequestRecord) -> bool:
    """Whether `record`'s reasoning was counted but none of it streamed: reasoning tokens
    reported, and no reasoning (or summary) event came before the first visible text."""
    r = record.usage.reasoning_tokens
    c = record.client
    streamed = c.ttft_text_ms is not None and c.ttft_ms is not None and c.ttft_text_ms > c.ttft_ms
    return bool(r) and not streamed


def thinking_estimate(record: RequestRecord) -> ThinkingRequest | None:
    """One request's TTFT split into waiting, thinking (estimated) and answering; None where
    the reasoning was not hidden or the visible stream gave no decode pace."""
    if record.error is not None or not hidden_reasoning(record):
        return None
    c, r = record.client, record.usage.reasoning_tokens
    if c.decode_ms_per_token is None or c.ttft_ms is None or c.last_token_ms is None or not r:
        return None
    thinking = r * c.decode_ms_per_token
    return ThinkingRequest(
        record_id=record.record_id,
        reasoning_tokens=r,
        decode_ms_per_token=c.decode_ms_per_token,
        ttft_ms=c.ttft_ms,
        thinking_ms=thinking,
        waiting_ms=c.ttft_ms - thinking,
        answering_ms=c.last_token_ms - c.ttft_ms,
        server_prefill_ms=record.provider_timings.prefill_ms,
    )


def thinking_figures(records: Iterable[RequestRecord], params: dict[str, Any]) -> ThinkingFigures:
    """The estimate over a run's measured records (warm-ups and failures left out)."""
    ok = [r for r in records if not r.warmup and r.error is None]
    estimates = [e for e in map(thinking_estimate, ok) if e is not None]
    hidden = sum(1 for r in ok if hidden_reasoning(r))
    streamed = sum(1 for r in ok if r.usage.reasoning_tokens and not hidden_reasoning(r))
    figures = ThinkingFigures(
        params=params,
        n=len(ok),
        hidden=hidden,
        streamed_reasoning=streamed,
        no_reasoning=len(ok) - hidden - streamed,
        requests=estimates,
    )
    if not estimates:
        why = (
            "no successful reply"
            if not ok
            else "no reply counted hidden reasoning (usage reasoning_tokens)"
            if not hidden
            else "no reply with hidden reasoning streamed 2 or more visible tokens to give a "
            "decode pace"
        )
        return figures.model_copy(update={"not_estimated_because": why})
    parts = {
        name: mean([getattr(e, name) for e in estimates])
        for name in (
            "reasoning_tokens",
            "decode_ms_per_token",
            "ttft_ms",
            "thinking_ms",
            "waiting_ms",
            "answering_ms",
        )
    }
    prefills = [e.server_prefill_ms for e in estimates]
    reported = [p for p in prefills if p is not None]
    prefill = mean(reported) if len(reported) == len(prefills) else None
    ttft, thinking = parts["ttft_ms"].value, parts["thinking_ms"].value
    share = thinking / ttft if ttft and thinking is not None else None
    return figures.model_copy(
        update={**parts, "thinking_share": share, "server_prefill_ms": prefill}
    )
