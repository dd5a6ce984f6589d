"""The answers' words: the one place where sentences are composed from figures.

Each answer leads with ONE sentence — the number, its interval, what it means (about 35
words at most) — then at most three short sentences; every other number lives in the
report's tables. A median or percentile is always said through
`labkit.analysis.stats.describe` (its interval and n, or why there is none).
"""

from __future__ import annotations

from labkit.analysis.stats import describe_share
from labkit.figures import SLOCheck, SLOReport, SweepFigures

__all__ = ["goodput_words", "slo_sentence", "sweep_answer"]


# --- prefill_decode --------------------------------------------------------------------------


# --- slo -------------------------------------------------------------------------------------

_VERDICT_WORDS = {"pass": "held", "fail": "missed", "undecided": "undecided"}


def _check_words(c: SLOCheck) -> str:
    share = "no requests" if c.share is None else describe_share(c.share)
    return f"{c.name} ≤ {c.bound_ms:g} ms {_VERDICT_WORDS[c.verdict]} ({share} within it)"


def goodput_words(report: SLOReport) -> str:
    """`12.3 req/s (95% CI 11.8–12.6)`, or `n/a`."""
    if report.goodput_rps is None:
        return "n/a"
    if report.goodput_low_rps is None or report.goodput_high_rps is None:
        return f"{report.goodput_rps:.2f} req/s"
    return (
        f"{report.goodput_rps:.2f} req/s (95% CI {report.goodput_low_rps:.2f}–"
        f"{report.goodput_high_rps:.2f})"
    )


def slo_sentence(report: SLOReport) -> str:
    """The report in one sentence: each SLO's verdict at 95% with the share meeting it, and
    the goodput with its interval."""
    checks = "; ".join(_check_words(c) for c in report.checks)
    return (
        f"SLOs: {checks}; {report.good} of {report.requests} requests met every SLO "
        f"(goodput {goodput_words(report)})."
    )


# --- sweep -----------------------------------------------------------------------------------


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
    if f.knee is None:
        lead = "No level above the baseline was shown to meet the SLOs."
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
            interval = (
                f" (95% CI {f.knee_goodput_low_rps:.2f}–{f.knee_goodput_high_rps:.2f})"
                if f.knee_goodput_low_rps is not None and f.knee_goodput_high_rps is not None
                else ""
            )
            goodput = f", goodput {f.knee_goodput_rps:.2f} req/s{interval} there"
        lead = (
            f"The knee: {_load(f.mode, f.knee)} meets every SLO at 95% (the true knee lies "
            f"{'' if f.knee_high is None else 'in '}{interval}){goodput}."
        )
    parts = [lead]
    rates = f"The synchronous baseline completed {_load('rate', base.level.completed_rps)}"
    if f.throughput_rps is not None:
        rates += f", the throughput probe ({f.probes[1].level.title}) {f.throughput_rps:.2f}"
    parts.append(rates + ".")
    failed = [p for p in f.probes if p.role == "bisect" and p.verdict == "fail"]
    undecided = [p.level.title for p in f.probes if p.role == "bisect" and p.verdict == "undecided"]
    above = ""
    if failed:
        lowest = min(failed, key=lambda p: p.level.target)
        above = f"The first level above it to fail, {lowest.level.title}: {lowest.why}. "
    if undecided:
        above += f"Undecided at the request bound: {', '.join(undecided)}. "
    sent = sum(p.requests_sent for p in f.probes)
    parts.append(f"{above}{len(f.probes)} levels, {sent} requests; stopped: {f.stopped}.")
    return " ".join(parts)
