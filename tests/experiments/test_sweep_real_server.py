"""`configs/sweep.yaml` end to end against the managed llama-server (4 slots) and the real
model: the sweep runs its probes in order, judges each on its own records, brackets its knee
and stops on its own, within its bounds.

Nothing here depends on how fast the host is: a fast host meets the SLOs at higher rates
and bisects, a slow one may miss them from the baseline on and stop there, or run out of
`max_duration_s`. Which probes run is the host's; that each verdict is what its records say,
and that the search brackets, ends and stays within `max_probes`, holds on any host.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats as sps

from labkit.config import load_config
from labkit.experiments.sweep import SweepSettings
from labkit.figures import SweepFigures, SweepProbe
from labkit.local import ensure_setup
from labkit.records import LabResults, RequestRecord

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "sweep.yaml"
# How a rate sweep may stop (labkit.experiments.sweep.SweepExperiment.next_level, analyze).
STOPS = (
    "the interval is within",
    "max_probes (",
    "the synchronous baseline already misses the SLOs",
    "the synchronous baseline stayed undecided",
    "the throughput probe completed no request",
)
MIDDLE_UNDECIDED = "the interval's middle, stayed undecided: the knee is near it"
OUT_OF_TIME = "was not measured (max_duration_s reached"


def _judged_pass(records: list[RequestRecord], level: str) -> list[RequestRecord]:
    """The measured records of `level`'s latest pass (a level still undecided runs again)."""
    passes: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.tags.get("level") == level and not r.warmup:
            passes.setdefault(str(r.tags.get("level_run", "")), []).append(r)
    return max(passes.values(), key=lambda recs: min(r.started_at for r in recs))


def _verdict_from_records(
    probe: SweepProbe, records: list[RequestRecord], sweep: SweepSettings
) -> str:
    """The probe's verdict recomputed from its own records: each SLO's share of requests
    within the bound, its exact 95% interval against the percentile; a saturated level, or
    one without a successful request, fails."""
    if probe.saturated or not any(r.error is None for r in records):
        return "fail"
    verdicts = set()
    for name, bound in sweep.slo.items():
        metric, _, q = name.rpartition("_p")
        met = 0
        for r in records:
            value = getattr(r.client, metric)
            short = value is None and metric == "decode_ms_per_token"  # under two tokens
            met += r.error is None and (short or (value is not None and value <= bound))
        ci = sps.binomtest(met, len(records)).proportion_ci(confidence_level=0.95, method="exact")
        need = float(q) / 100
        verdicts.add("pass" if ci.low >= need else "fail" if ci.high < need else "undecided")
    return next((v for v in ("fail", "undecided") if v in verdicts), "pass")


def test_the_bundled_sweep_judges_its_probes_brackets_a_knee_and_stops_on_its_own(
    tmp_path: Path,
) -> None:
    ensure_setup()  # build/fetch once, before the run
    (sweep,) = load_config(CONFIG).experiments
    assert isinstance(sweep, SweepSettings)
    proc = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(CONFIG), "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard only: the sweep bounds itself (max_duration_s, max_probes)
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    check_sweep_run(run_dir, sweep)


def check_sweep_run(run_dir: Path, sweep: SweepSettings) -> None:
    """What holds of a finished run of `sweep` on any host."""
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    print(f"\n{answer.answer}")
    for p in f.probes:
        print(p.step, p.role, p.level.title, p.verdict, p.level.requests, p.why)
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines if line]

    # Ordered: steps 0, 1, 2 ..., the baseline, the throughput probe, then the bisection,
    # each level's requests after the one before it; never more than max_probes.
    assert 1 <= len(f.probes) <= sweep.max_probes
    assert [p.step for p in f.probes] == list(range(len(f.probes)))
    assert [p.role for p in f.probes] == ["baseline", "throughput", *["bisect"] * 8][
        : len(f.probes)
    ]
    judged = [_judged_pass(records, p.level.level) for p in f.probes]
    starts = [[r.t_start_mono_ns for r in recs if r.t_start_mono_ns] for recs in judged]
    assert all(len(s) == len(recs) for s, recs in zip(starts, judged, strict=True))
    assert all(max(a) < min(b) for a, b in itertools.pairwise(starts))

    # Each probe's verdict is what its own records say against the SLOs.
    for p, recs in zip(f.probes, judged, strict=True):
        assert p.level.requests == len(recs) <= sweep.max_requests_per_level, p
        assert p.verdict == _verdict_from_records(p, recs, sweep), p
        assert p.met == (p.verdict == "pass")

    # The search brackets: every bisection level lies inside the interval the levels before
    # it left, [largest pass, smallest fail), starting from the baseline's completed rate
    # (a level's rate has three significant digits: the first may be the bottom, rounded).
    low = f.probes[0].level.completed_rps
    high: float | None = None
    for p in f.probes[2:]:
        assert low is not None, f.probes[0]
        assert p.level.target >= low or p.level.target == float(f"{low:.3g}"), (p.level.title, low)
        assert high is None or low < p.level.target < high, (p.level.title, low, high)
        if p.verdict == "pass":
            low = p.level.target
        elif p.verdict == "fail":
            high = p.level.target if high is None else min(high, p.level.target)

    # ... and ends: the knee is the largest level that passed, inside that interval.
    passed = [p for p in f.probes if p.verdict == "pass" and p.role != "throughput"]
    if f.probes[0].verdict != "pass":
        assert len(f.probes) == 1 and f.knee is None
    else:
        loads = [p.level.completed_rps if p.role == "baseline" else p.level.target for p in passed]
        assert f.knee is not None and f.knee == max(x for x in loads if x is not None)
        assert f.knee_goodput_rps is not None and f.knee_goodput_rps > 0
    if f.knee is not None and len(f.probes) > 1 and f.probes[1].level.completed_rps is not None:
        assert (f.knee_low, f.knee_high) == (low, high)
        assert f.knee_low is not None and f.knee_low <= f.knee
        assert f.knee_high is None or f.knee < f.knee_high
    assert f.stopped.startswith(STOPS) or MIDDLE_UNDECIDED in f.stopped or OUT_OF_TIME in f.stopped
    if MIDDLE_UNDECIDED in f.stopped:
        assert any(p.verdict == "undecided" for p in f.probes[2:]), f.stopped
    if f.stopped.startswith("the interval is within"):
        assert f.knee_low is not None and f.knee_high is not None
        assert f.knee_high - f.knee_low <= sweep.resolution * f.knee_high
    if f.stopped.startswith("max_probes ("):
        assert len(f.probes) == sweep.max_probes
    assert (run_dir / "report_files" / "goodput.png").exists()
    assert "Sweeps" in (run_dir / "report.md").read_text()
