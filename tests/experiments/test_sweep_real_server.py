"""`configs/sweep.yaml` end to end against the managed llama-server (4 slots) and the real
model: the sweep finds a knee and stops on its own, within its bounds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.figures import SweepFigures
from labkit.local import ensure_setup
from labkit.records import LabResults

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_bundled_sweep_finds_a_knee_and_stops_on_its_own(tmp_path: Path) -> None:
    ensure_setup()  # build/fetch once, outside the timed run
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "labkit", "run", "configs/sweep.yaml", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "200"},
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    print(f"\n{answer.answer}\n(took {took:.0f} s)")
    assert [p.role for p in f.probes[:2]] == ["baseline", "throughput"]
    assert f.probes[0].met, f.probes[0].why
    assert f.knee is not None and f.knee_low is not None and f.knee_high is not None
    assert f.knee_low <= f.knee < f.knee_high or f.knee == f.knee_low
    assert f.knee_goodput_rps is not None and f.knee_goodput_rps > 0
    # On its own: the interval closed, or the probe budget ran out; never the time bound.
    assert f.stopped.startswith(("the interval is", "max_probes")), f.stopped
    assert len(f.probes) <= 7 and took < 150
    assert (run_dir / "report_files" / "goodput.png").exists()
    assert "Sweeps" in (run_dir / "report.md").read_text()
