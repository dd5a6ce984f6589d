"""`labkit run` as a process on a config a real-server test writes: its run folder and its
answers (lab.json), the bundled llama-server set up first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from labkit.local import ensure_setup
from labkit.records import LabResults

REPO = Path(__file__).resolve().parents[2]


def run_lab(tmp_path: Path, config: str, name: str = "config.yaml") -> tuple[Path, LabResults]:
    """Write `config` to `tmp_path/name`, run `labkit run --no-report` on it (cwd: the
    repository) and return its run folder and answers; the test fails with labkit's output
    when it exits non-zero."""
    ensure_setup()
    path = tmp_path / name
    path.write_text(config)
    result = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(path), "--out", str(tmp_path), "--no-report"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: a run on a busy host takes a minute or two
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "lab.json").exists()]
    return run_dir, LabResults.model_validate_json((run_dir / "lab.json").read_text())
