"""`configs/sweep.yaml` end to end against the managed llama-server (4 slots) and the real
model: the sweep runs its probes in order, judges each on its own records, brackets its knee
and stops on its own, within its bounds.

Nothing here depends on how fast the host is (`tests.support.sweeps`): a fast host meets
the SLOs at higher rates and bisects, a slow one may miss them from the baseline on and stop
there, or run out of `max_duration_s`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.config import load_config
from labkit.experiments.sweep import SweepSettings
from labkit.figures import SweepFigures
from labkit.local import ensure_setup
from labkit.records import LabResults, RequestRecord
from tests.support.sweeps import check_sweep

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "sweep.yaml"


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
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, SweepFigures), answer.answer
    print(f"\n{answer.answer}")
    for p in f.probes:
        print(p.step, p.role, p.level.title, p.verdict, p.level.requests, p.why)
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    check_sweep(f, [RequestRecord.from_json_line(line) for line in lines if line], sweep)
    assert (run_dir / "report_files" / "goodput.png").exists()
    assert "Sweeps" in (run_dir / "report.md").read_text()
