"""The answers' words: the one place where sentences are composed from figures.

Each answer leads with ONE sentence — the number, its interval, what it means (about 35
words at most) — then at most three short sentences; every other number lives in the
report's tables. A median or percentile is always said through
`labkit.analysis.stats.describe` (its interval and n, or why there is none).
"""

from __future__ import annotations

from labkit.analysis.stats import describe_share
from labkit.figures import SLOCheck, SLOReport

__all__ = ["goodput_words", "slo_sentence"]


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
