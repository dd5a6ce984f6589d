"""`thinking` on the real llama-server and the bundled model (no mocks, no skips): the server
takes the reasoning effort asked for, every reply is recorded, and SmolLM2, which does not
reason, is said to have no hidden reasoning to estimate, never given a made-up one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.figures.thinking import ThinkingFigures
from labkit.local import ensure_setup
from labkit.records import LabResults, RequestRecord

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
REPEATS = 3

CONFIG = f"""
name: thinking-real
providers:
  - {{id: local, kind: llamacpp, ctx_size: 512, slots: 1}}
experiments:
  - {{kind: thinking, repeats: {REPEATS}, effort: low, params: {{max_tokens: 8}}}}
"""


def test_a_model_that_does_not_reason_is_named_not_estimated(tmp_path: Path) -> None:
    ensure_setup()
    cfg = tmp_path / "thinking.yaml"
    cfg.write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(cfg), "--out", str(tmp_path), "--no-report"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "lab.json").exists()]
    (answer,) = LabResults.model_validate_json((run_dir / "lab.json").read_text()).answers
    f = answer.figures
    assert isinstance(f, ThinkingFigures)
    records = [
        RequestRecord.from_json_line(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    assert len(records) == REPEATS + 1 and all(r.error is None for r in records)  # a warm-up
    assert all(r.params.get("reasoning_effort") == "low" for r in records)
    assert all(not r.usage.reasoning_tokens for r in records)
    assert (f.n, f.hidden, f.no_reasoning) == (REPEATS, 0, REPEATS)
    assert f.thinking_ms is None and f.requests == [] and answer.status == "failed"
    assert answer.answer.startswith("Thinking time not estimated on local"), answer.answer
