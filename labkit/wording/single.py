"""`single`'s answer: the cold and the cached time to first token apart, each with its
interval, then decode and stop reasons."""

from __future__ import annotations

from labkit.figures.single import PromptCacheRun, SingleFigures
from labkit.wording.common import marked, ms, say

__all__ = ["single_answer"]


_STOP_WORDS = {"length": "max_tokens reached", "end": "the model's own end"}


def _tokens(value: float | None) -> str:
    """A median token count in words: whole tokens (38.5 of two prompts is "38")."""
    return "n/a" if value is None else f"{value:.0f}"


def _lead(f: SingleFigures) -> str:
    """The TTFT lead: cold and cached apart where the pairs measured both."""
    cold, cached = f.cold, f.cached
    if cold is None and cached is None:
        hits = (
            f" {f.cache_hits} of {f.n} requests had part of their prompt read from the "
            "provider's cache: their TTFT is a cache hit's, not the time to read a prompt."
            if f.cache_hits
            else ""
        )
        return (
            f"{say(f.ttft)} to the first token: the median wait from sending a request until "
            f"its reply starts (time to first token, TTFT).{hits}"
        )
    asked = (
        ""
        if all(r.confirmed for r in (cold, cached) if r)
        else (" (as labkit asked: the provider reports no cached-token count)")
    )
    if cold is not None and cached is not None:
        return (
            f"{say(cold.ttft)} to the first token sent cold, none of its "
            f"{_tokens(cold.input_tokens_p50)} input tokens cached; {say(cached.ttft)} sent "
            f"again with {_tokens(cached.cached_tokens_p50)} of them cached: the repeat read "
            f"its prompt from the KV cache instead of computing it{asked}."
        )
    run = cold or cached
    assert run is not None
    if run.state == "cold":
        again = (
            f" Sent again, the provider served none of them from a cache "
            f"({f.repeats_uncached} repeats)."
            if f.repeats_uncached
            else ""
        )
        return (
            f"{say(run.ttft)} to the first token, cold ({_tokens(run.input_tokens_p50)} input "
            f"tokens, none cached){asked}.{again}"
        )
    return (
        f"{say(run.ttft)} to the first token with {_tokens(run.cached_tokens_p50)} of "
        f"{_tokens(run.input_tokens_p50)} input tokens cached{asked}; no cold request to set "
        "beside it."
    )


def _server_clock(f: SingleFigures) -> str:
    """The server's own prefill (cold and cached apart where both) and decode per token."""
    per_token = f.provider_decode_ms_per_token_p50
    decode = f", {ms(per_token, 2)} per token." if per_token is not None else "."
    runs: list[PromptCacheRun] = [r for r in (f.cold, f.cached) if r is not None]
    read = [
        f"{ms(r.provider_prefill_ms_p50)} reading the {r.state} prompt"
        for r in runs
        if r.provider_prefill_ms_p50 is not None
    ]
    if read:
        return f" The server's own clock: {', '.join(read)}{decode}"
    if f.provider_prefill_ms_p50 is not None:
        return (
            f" The server's own clock: {ms(f.provider_prefill_ms_p50)} reading the prompt{decode}"
        )
    return ""


def single_answer(f: SingleFigures) -> str:
    """The TTFT lead (cold and cached apart), then the token rate, the reply and the
    server's clock."""
    text = marked(_lead(f), f.client_bound)
    stops = ", ".join(_STOP_WORDS.get(k, k) for k in sorted(f.stop_reasons))
    tokens = f"{f.output_tokens_p50:g}-token " if f.output_tokens_p50 is not None else ""
    reply = f"the {tokens}reply" + (f" ({stops})" if stops else "")
    after = f.reply_ms_p50
    if f.decode_per_token is not None and f.decode_per_token.n:
        text += f" Then a token came every {say(f.decode_per_token)}"
        text += (
            f", so {reply} took {ms(after)} after its first token." if after is not None else "."
        )
    elif after is not None:
        text += f" {reply[0].upper()}{reply[1:]} took {ms(after)} after its first token."
    text += _server_clock(f)
    if f.failed:
        text += f" {f.failed} of {f.n + f.failed} requests failed."
    return text
