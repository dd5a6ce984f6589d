"""`thinking`'s answer: the estimated thinking time and the TTFT's three parts."""

from __future__ import annotations

from labkit.analysis.stats import describe_mean
from labkit.figures.thinking import ESTIMATED, ThinkingFigures
from labkit.wording.common import ms, say

__all__ = ["thinking_answer"]


def thinking_answer(f: ThinkingFigures, provider: str) -> str:
    """One sentence with the estimated thinking time and its interval, then the split of
    the TTFT and what the estimate assumes; or why there is none."""
    if f.thinking_ms is None or f.ttft_ms is None:
        why = f.not_estimated_because or "no estimate"
        tail = (
            f" {f.streamed_reasoning} of {f.n} replies streamed their reasoning, so its time "
            "is measured in the stream (ttft_text_ms − ttft_ms), not estimated."
            if f.streamed_reasoning
            else ""
        )
        return f"Thinking time not estimated on {provider}: {why}.{tail}"
    share = f", {f.thinking_share:.0%} of its TTFT" if f.thinking_share is not None else ""
    text = (
        f"{provider} thought for {describe_mean(f.thinking_ms)} before its first visible "
        f"token{share} ({ESTIMATED}: {say(f.reasoning_tokens, 'hidden tokens')} × the visible "
        f"{say(f.decode_ms_per_token, 'ms/token')})."
    )
    waiting = describe_mean(f.waiting_ms) if f.waiting_ms is not None else "unknown"
    if f.server_prefill_ms is not None and f.server_prefill_ms.value is not None:
        waiting += f", the server's own prefill {ms(f.server_prefill_ms.value)} of it"
    answering = describe_mean(f.answering_ms) if f.answering_ms is not None else "unknown"
    text += (
        f" Its TTFT of {describe_mean(f.ttft_ms)} splits into waiting {waiting}, and thinking "
        f"({ESTIMATED}); answering then took {answering}."
    )
    text += (
        f" {ESTIMATED.capitalize()}, not measured: the hidden tokens are taken to decode at "
        f"the visible pace; the interval is across the {len(f.requests)} requests."
    )
    if f.hidden < f.n:
        text += f" {f.n - f.hidden} of {f.n} replies had no hidden reasoning to estimate."
    return text
