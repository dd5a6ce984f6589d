"""The server's own time at each output token, as llama-server sends it per chunk.

With ``timings_per_token: true`` in a Chat request body, llama-server puts its cumulative
``timings`` on every token chunk (tools/server/README.md, "timings_per_token"; the fields are
those of the last chunk's ``timings``): ``prompt_ms`` the prompt's processing, ``predicted_n``
the tokens generated so far and ``predicted_ms`` the time since the first of them. The truth
server answers the same when its schedule speaks llama.cpp's shape: event i's time is the
planned one, ``first_ms`` (the prefill, as the last chunk reports it) plus the gaps before
it, so ``prompt_ms + predicted_ms`` of event i is its true time from the start of service,
which the truth log keeps (``token_ms``).
"""

from __future__ import annotations

from typing import Any

from labkit.truth.reply import Reply
from labkit.truth.schedule import CPP_SHAPE

__all__ = ["token_times_ms", "token_timings", "wants_token_times"]


def wants_token_times(reply: Reply) -> bool:
    """Whether the reply's chunks carry per-token `timings`: a streamed Chat text reply, in
    llama.cpp's shape, whose request asked for them."""
    request = reply.request
    return (
        request.timings_per_token
        and request.stream
        and request.api == "chat"
        and reply.schedule.server_timings == CPP_SHAPE
        and not reply.tool_calls
    )


def token_times_ms(reply: Reply) -> list[float]:
    """The server's time at each planned output event, in ms from the start of service:
    the prefill (`first_ms`), then the planned gaps added up."""
    planned = reply.plan
    if not planned.event_tokens:
        return []
    out = [planned.first_ms]
    for gap in planned.gaps_ms:
        out.append(out[-1] + gap)
    return out


def token_timings(reply: Reply, times: list[float], i: int, tokens_so_far: int) -> dict[str, Any]:
    """llama.cpp's cumulative `timings` on output event `i` (`tokens_so_far` generated)."""
    prompt_n = reply.prompt_tokens - reply.cached_tokens
    prefill = reply.plan.first_ms
    predicted = times[i] - prefill
    return {
        "cache_n": reply.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prefill,
        "prompt_per_token_ms": prefill / prompt_n if prompt_n else None,
        "prompt_per_second": 1000.0 * prompt_n / prefill if prefill else None,
        "predicted_n": tokens_so_far,
        "predicted_ms": predicted,
        "predicted_per_token_ms": predicted / (tokens_so_far - 1) if tokens_so_far > 1 else None,
        "predicted_per_second": 1000.0 * (tokens_so_far - 1) / predicted
        if predicted > 0 and tokens_so_far > 1
        else None,
    }
