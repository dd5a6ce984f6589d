"""`session`'s answer: the jobs finished, and where their critical path's time went."""

from __future__ import annotations

from labkit.figures.session import SessionFigures

__all__ = ["session_answer"]


def session_answer(provider: str, figures: SessionFigures) -> str:
    """`session`: "X finished the job in N s; M% of it was waiting on the provider's prefill,
    ..." from the sessions' summed critical path."""
    path = figures.critical
    total = path.total_ms
    done = sum(r.complete for r in figures.sessions)
    head = f"{provider} finished {done} of {len(figures.sessions)} sessions"
    if figures.completion_ms_p50 is not None:
        head += f" in {figures.completion_ms_p50 / 1000:.2f} s (median)"
    if total <= 0:
        return head + "."
    prefill = "the provider's prefill" + ("" if figures.queue_reported else " (queue included)")
    terms = [
        ("the provider's queue", path.provider_queue_ms),
        (prefill, path.prefill_ms),
        ("decode", path.decode_ms),
        ("tools", path.tool_ms),
        ("labkit itself", path.labkit_ms),
    ]
    terms.sort(key=lambda t: -t[1])
    parts = [f"{100 * v / total:.0f}% {name}" for name, v in terms if v > 0]
    text = f"{head}; along the critical path {parts[0]}"
    if len(parts) > 1:
        text += ", " + ", ".join(parts[1:])
    text += "."
    if figures.goodput_sessions_per_s is not None and figures.slo_ms is not None:
        text += (
            f" Goodput {figures.goodput_sessions_per_s:.2f} sessions/s within "
            f"{figures.slo_ms / 1000:.1f} s."
        )
    return text
