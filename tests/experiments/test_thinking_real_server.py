"""`thinking` on the real llama-server and the bundled model (no mocks, no skips): the server
takes the reasoning effort asked for, every reply is recorded, and SmolLM2, which does not
reason, is said to have no hidden reasoning to estimate, never given a made-up one."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.figures.thinking import ThinkingFigures
from labkit.records import RequestRecord
from tests.support.lab_runs import run_lab

pytestmark = pytest.mark.e2e

REPEATS = 3

CONFIG = f"""
name: thinking-real
providers:
  - {{id: local, kind: llamacpp, ctx_size: 512, slots: 1}}
experiments:
  - {{kind: thinking, repeats: {REPEATS}, effort: low, params: {{max_tokens: 8}}}}
"""


def test_a_model_that_does_not_reason_is_named_not_estimated(tmp_path: Path) -> None:
    run_dir, lab = run_lab(tmp_path, CONFIG, "thinking.yaml")
    (answer,) = lab.answers
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
