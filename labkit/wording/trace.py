"""`trace`'s answer: the replay's median TTFT, its rate and the cache hits."""

from __future__ import annotations

from labkit.figures import LoadLevel
from labkit.wording.common import marked
from labkit.wording.levels import _median_ttft, cache_sentence

__all__ = ["trace_answer"]


def trace_answer(trace: str, speedup: float, row: LoadLevel) -> str:
    """The replay's median TTFT with its interval, then its rate and the cache hits."""
    text = marked(
        f"{_median_ttft(row)} median TTFT replaying {trace} at ×{speedup:g}: the wait for "
        f"the first token under the trace's own arrivals ({row.ok} ok, {row.failed} failed).",
        row.client_bound_fix if row.client_bound else None,
    )
    rate = row.achieved_rate_rps
    achieved = f"{rate:.2f}" if rate is not None else "n/a"
    text += f" Requests started at {achieved} req/s against the trace's {row.target:g}."
    return text + cache_sentence(row.cache)
