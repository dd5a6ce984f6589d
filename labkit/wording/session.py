"""`session`'s answer: the jobs finished, and where their critical path's time went."""

from __future__ import annotations

from labkit.figures.session import SessionFigures

__all__ = ["session_answer"]


#: Why a session did not complete, as the sentence counts it (`SessionEnd`).
_WHY = {
    "length": "cut by max_tokens on the last turn",
    "step_limit": "still calling tools at max_steps",
    "failed": "ended on a failed turn",
    "refused": "refused or filtered on the last turn",
}


def session_answer(provider: str, figures: SessionFigures) -> str:
    """`session`: "X completed 2 of 3 sessions (1 cut by max_tokens on the last turn) in
    N s (median); along the critical path M% decode, ..." from the sessions' summed
    critical path. A session completes only when it ended with an answer."""
    path = figures.critical
    total = path.total_ms
    done = sum(r.complete for r in figures.sessions)
    head = f"{provider} completed {done} of {len(figures.sessions)} sessions"
    why = [f"{n} {_WHY.get(end, end)}" for end, n in sorted(figures.incomplete.items()) if n]
    if why:
        head += f" ({', '.join(why)})"
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
