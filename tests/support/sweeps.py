"""What holds of a finished sweep on any host, however fast.

Which levels a sweep probes depends on which ones met the SLOs, and that depends on the
host: a fast host meets them at higher loads and bisects further, a slow one may miss them
from the baseline on and stop there. What does not depend on the host is checked here: the
probes ran in order, each verdict is what the probe's own records say against the SLOs, every
bisection level lies inside the interval the levels before it left, and the search stopped
for one of its reasons, within `max_probes`, with the knee the largest level that passed.
"""

from __future__ import annotations

import itertools

from scipy import stats as sps

from labkit.experiments.sweep import SweepSettings
from labkit.figures import SweepFigures, SweepProbe
from labkit.records import RequestRecord

__all__ = ["check_sweep", "judged_pass"]

# How a sweep may stop (labkit.experiments.sweep.SweepExperiment.next_level and analyze).
_STOPS = (
    "the interval is within",
    "the interval is one stream wide",
    "even the throughput probe met the SLOs",
    "max_probes (",
    "the synchronous baseline already misses the SLOs",
    "the synchronous baseline stayed undecided",
    "the throughput probe completed no request",
)
_MIDDLE_UNDECIDED = "the interval's middle, stayed undecided: the knee is near it"
_OUT_OF_TIME = "was not measured (max_duration_s reached"


def judged_pass(records: list[RequestRecord], level: str) -> list[RequestRecord]:
    """The measured records of `level`'s latest pass (a level still undecided runs again)."""
    passes: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.tags.get("level") == level and not r.warmup:
            passes.setdefault(str(r.tags.get("level_run", "")), []).append(r)
    return max(passes.values(), key=lambda recs: min(r.started_at for r in recs))


def _verdict_from_records(
    probe: SweepProbe, records: list[RequestRecord], slo: dict[str, float]
) -> str:
    """The probe's verdict recomputed from its own records: each SLO's share of requests
    within the bound, its exact 95% interval against the percentile; a saturated level, or
    one without a successful request, fails."""
    if probe.saturated or not any(r.error is None for r in records):
        return "fail"
    verdicts = set()
    for name, bound in slo.items():
        metric, _, q = name.rpartition("_p")
        met = 0
        for r in records:
            value = getattr(r.client, metric)
            short = value is None and metric in ("decode_ms_per_token", "itl_ms_p50")
            met += r.error is None and (short or (value is not None and value <= bound))
        ci = sps.binomtest(met, len(records)).proportion_ci(confidence_level=0.95, method="exact")
        need = float(q) / 100
        verdicts.add("pass" if ci.low >= need else "fail" if ci.high < need else "undecided")
    return next((v for v in ("fail", "undecided") if v in verdicts), "pass")


def _load(probe: SweepProbe, mode: str) -> float | None:
    """Where a probe sits on the sweep's axis (a rate sweep's baseline: its completed rate)."""
    if mode == "rate" and probe.level.mode == "concurrency":
        return probe.level.completed_rps
    return probe.level.target


def check_sweep(f: SweepFigures, records: list[RequestRecord], sweep: SweepSettings) -> None:
    """Assert what holds of sweep `f`, run with `sweep`'s settings, whatever the host."""
    assert sweep.slo is not None
    # Ordered: steps 0, 1, 2 ..., the baseline, the throughput probe, then the bisection,
    # each level's requests after the one before it; never more than max_probes.
    assert 1 <= len(f.probes) <= sweep.max_probes
    assert [p.step for p in f.probes] == list(range(len(f.probes)))
    roles = ["baseline", "throughput", *["bisect"] * sweep.max_probes][: len(f.probes)]
    assert [p.role for p in f.probes] == roles
    judged = [judged_pass(records, p.level.level) for p in f.probes]
    starts = [[r.t_start_mono_ns for r in recs if r.t_start_mono_ns] for recs in judged]
    assert all(len(s) == len(recs) for s, recs in zip(starts, judged, strict=True))
    assert all(max(a) < min(b) for a, b in itertools.pairwise(starts))

    # Each probe's verdict is what its own records say against the SLOs.
    for p, recs in zip(f.probes, judged, strict=True):
        assert p.level.requests == len(recs) <= sweep.max_requests_per_level, p
        assert p.verdict == _verdict_from_records(p, recs, sweep.slo), p
        assert p.met == (p.verdict == "pass")

    # The search brackets: every bisection level lies inside the interval the levels before
    # it left, [largest pass, smallest fail): from the baseline's completed rate (a rate
    # level has three significant digits: the first may be that bottom, rounded), or
    # between 1 and the throughput probe's streams. A rate at or under the baseline's that
    # fails takes the bottom away (one request at a time is no open-loop pass): the next
    # levels lie below the smallest failure until one passes.
    low: float | None
    high: float | None
    base = f.probes[0].level.completed_rps
    refuted = False
    if sweep.mode == "rate":
        low, high = base, None
    else:
        low, high = 1.0, float(sweep.throughput_concurrency)
    for p in f.probes[2:]:
        t = p.level.target
        assert low is not None or refuted, f.probes[0]
        assert low is None or t >= low or t == float(f"{low:.3g}"), (p.level.title, low)
        assert high is None or ((low is None or low < t) and t < high), (p.level.title, low, high)
        if sweep.mode == "concurrency":
            assert low is not None and high is not None, p.level.title
            assert t == (int(low) + int(high)) // 2, (p.level.title, low)
        if p.verdict == "pass":
            # The largest that passed: a first bisection at the baseline's rate rounded to
            # three digits can sit just below the baseline's own completed rate.
            low = t if low is None else max(low, t)
        elif p.verdict == "fail":
            high = t if high is None else min(high, t)
            if sweep.mode == "rate" and base is not None and t <= base and not refuted:
                refuted = True
                passed_rates = [q.level.target for q in f.probes[2:] if q.met and q.step < p.step]
                low = max(passed_rates, default=None)
    assert f.baseline_refuted == refuted

    # ... and ends: the knee is the largest level that passed, inside that interval (the
    # baseline's rate only while no open-loop rate at or under it failed).
    if f.probes[0].verdict != "pass":
        assert len(f.probes) == 1 and f.knee is None
    else:
        passed = [
            p
            for p in f.probes
            if p.met and p.role != "throughput" and not (refuted and p.role == "baseline")
        ]
        if sweep.mode == "concurrency" and len(f.probes) > 1 and f.probes[1].met:
            passed.append(f.probes[1])
        if not passed:
            assert refuted and f.knee is None and f.knee_low is None
            assert f.knee_high == high
        else:
            assert f.knee is not None
            assert f.knee == max(x for p in passed if (x := _load(p, sweep.mode)) is not None)
            assert f.knee_goodput_rps is not None and f.knee_goodput_rps > 0
    if f.knee is not None and len(f.probes) > 1 and f.probes[1].level.completed_rps is not None:
        assert (f.knee_low, f.knee_high) == (low, high)
        assert f.knee_low is not None and f.knee_low <= f.knee
        assert f.knee_high is None or f.knee < f.knee_high or sweep.mode == "concurrency"
    stopped = f.stopped
    assert stopped.startswith(_STOPS) or _MIDDLE_UNDECIDED in stopped or _OUT_OF_TIME in stopped
    if _MIDDLE_UNDECIDED in stopped:
        assert any(p.verdict == "undecided" for p in f.probes[2:]), stopped
    if stopped.startswith("the interval is within"):
        assert f.knee_low is not None and f.knee_high is not None
        assert f.knee_high - f.knee_low <= sweep.resolution * f.knee_high
    if stopped.startswith("the interval is one stream wide"):
        assert f.knee_low is not None and f.knee_high is not None
        assert f.knee_high - f.knee_low <= 1
    if stopped.startswith("max_probes ("):
        assert len(f.probes) == sweep.max_probes
