"""`load`'s answer: how TTFT and throughput moved from the first level to the last."""

from __future__ import annotations

from collections.abc import Sequence

from labkit.figures import LoadLevel
from labkit.wording.common import CLIENT_BOUND_MARK
from labkit.wording.levels import _median_ttft, _tps

__all__ = ["load_answer"]


def load_answer(levels: Sequence[LoadLevel], extras: Sequence[str] = ()) -> str:
    """How TTFT and throughput moved from the first level to the last, then at most three
    short sentences: `extras` (the server's queue, goodput, ... in order of importance) and
    the levels the self-check flagged."""
    done = [r for r in levels if r.ok]
    first, last = done[0], done[-1]
    if len(done) == 1:
        text = (
            f"{_median_ttft(first)} median TTFT at {first.title}, with "
            f"{_tps(first.output_tokens_per_s)} output tokens/s from all streams together."
        )
    else:
        text = (
            f"{_median_ttft(last)} median TTFT at {last.title}, against "
            f"{_median_ttft(first)} at {first.title}; output throughput went from "
            f"{_tps(first.output_tokens_per_s)} to {_tps(last.output_tokens_per_s)} tokens/s."
        )
    more = [e.strip() for e in extras if e.strip()]
    bound = [r for r in levels if r.client_bound]
    if bound:
        more.insert(
            0,
            f"{CLIENT_BOUND_MARK} at {', '.join(r.title for r in bound)}: labkit read the "
            f"streams late, so those timings include its own delay; {bound[-1].client_bound_fix}.",
        )
    return " ".join([text, *more[:3]])
