"""`sweep`'s answer: the knee with its interval, the baseline and the throughput probe."""

from __future__ import annotations

from labkit.figures.sweep import SweepFigures

__all__ = ["sweep_answer"]


def _load(mode: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f} streams" if mode == "concurrency" else f"{value:.2f} req/s"


def sweep_answer(f: SweepFigures) -> str:
    """The knee with its interval and the goodput there; then the baseline and throughput,
    the first level above the knee to fail (and any left undecided), and what it cost."""
    base = f.probes[0]
    if not base.met:
        return (
            f"Even one request at a time does not pass the SLOs ({base.why}): no load is "
            f"shown to meet them. Stopped: {f.stopped}."
        )
    failed = [p for p in f.probes if p.role == "bisect" and p.verdict == "fail"]
    lowest = min(failed, key=lambda p: p.level.target) if failed else None
    if f.knee is None:
        lead = (
            f"No open-loop rate was shown to meet the SLOs: even {lowest.level.title}, at or "
            f"under the baseline's rate, missed them ({lowest.why}); the true knee lies below it."
            if f.baseline_refuted and lowest is not None
            else "No level above the baseline was shown to meet the SLOs."
        )
    else:
        unit = "streams" if f.mode == "concurrency" else "req/s"
        low = f"{f.knee_low:.0f}" if f.mode == "concurrency" else f"{f.knee_low or 0:.2f}"
        if f.knee_high is None:
            interval = f"at or above {low} {unit}: no level failed"
        else:
            high = f"{f.knee_high:.0f}" if f.mode == "concurrency" else f"{f.knee_high:.2f}"
            interval = f"[{low}, {high}) {unit}"
        goodput = ""
        if f.knee_goodput_rps is not None:
            goodput_ci = (
                f" (95% CI {f.knee_goodput_low_rps:.2f}–{f.knee_goodput_high_rps:.2f})"
                if f.knee_goodput_low_rps is not None and f.knee_goodput_high_rps is not None
                else ""
            )
            goodput = f", goodput {f.knee_goodput_rps:.2f} req/s{goodput_ci} there"
        lead = (
            f"The knee: {_load(f.mode, f.knee)} meets every SLO at 95% (the true knee lies "
            f"{'' if f.knee_high is None else 'in '}{interval}){goodput}."
        )
    parts = [lead]
    rates = f"The synchronous baseline completed {_load('rate', base.level.completed_rps)}"
    if f.throughput_rps is not None:
        rates += f", the throughput probe ({f.probes[1].level.title}) {f.throughput_rps:.2f}"
    parts.append(rates + ".")
    if f.baseline_refuted:
        parts.append(
            "One request at a time met the SLOs, but open-loop arrivals at that rate did not: "
            "a request that does not wait for the reply before it queues behind it."
        )
    undecided = [p.level.title for p in f.probes if p.role == "bisect" and p.verdict == "undecided"]
    above = ""
    if lowest is not None and f.knee is not None:
        above = f"The first level above it to fail, {lowest.level.title}: {lowest.why}. "
    if undecided:
        above += f"Undecided at the request bound: {', '.join(undecided)}. "
    sent = sum(p.requests_sent for p in f.probes)
    parts.append(f"{above}{len(f.probes)} levels, {sent} requests; stopped: {f.stopped}.")
    return " ".join(parts)
