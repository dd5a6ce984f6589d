"""An answer's SLOs in words (any experiment): each verdict with its share, and goodput."""

from __future__ import annotations

from labkit.figures import SLOCheck, SLOReport

__all__ = ["goodput_words", "slo_sentence"]


_VERDICT_WORDS = {"pass": "held", "fail": "missed", "undecided": "undecided"}


def _check_words(c: SLOCheck) -> str:
    """`ttft_ms_p90 ≤ 500 ms held: 180 of 192 within it (94%, 95% CI 89–97%)`."""
    verdict = f"{c.name} ≤ {c.bound_ms:g} ms {_VERDICT_WORDS[c.verdict]}"
    s = c.share
    if s is None or s.value is None or s.lo is None or s.hi is None:
        return f"{verdict}: {c.met} of {c.requests} within it"
    return (
        f"{verdict}: {s.k} of {s.n} within it ({s.value:.0%}, 95% CI "
        f"{s.lo * 100:.0f}–{s.hi * 100:.0f}%)"
    )


def goodput_words(report: SLOReport) -> str:
    """`12.30 req/s, 95% CI 11.80–12.60`, or `n/a`."""
    if report.goodput_rps is None:
        return "n/a"
    if report.goodput_low_rps is None or report.goodput_high_rps is None:
        return f"{report.goodput_rps:.2f} req/s"
    return (
        f"{report.goodput_rps:.2f} req/s, 95% CI {report.goodput_low_rps:.2f}–"
        f"{report.goodput_high_rps:.2f}"
    )


def slo_sentence(report: SLOReport) -> str:
    """The report in one sentence: each SLO's verdict at 95% with the share meeting it, and
    the goodput with its interval."""
    checks = "; ".join(_check_words(c) for c in report.checks)
    return (
        f"SLOs: {checks}; {report.good} of {report.requests} requests met every SLO "
        f"(goodput {goodput_words(report)})."
    )
