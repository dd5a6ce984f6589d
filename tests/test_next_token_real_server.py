"""The next token on the real llama-server and the real model (no mocks, no skips): the
candidates it returns are probabilities, and determinism with `top_logprobs` names the
divergence point of its repeats, or says there was none."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from labkit.figures import DeterminismFigures, NextTokenFigures
from labkit.records import RequestRecord
from tests.support.lab_runs import run_lab

pytestmark = pytest.mark.e2e


CONFIG = """
name: next-token-real
providers:
  - {id: local, kind: llamacpp, ctx_size: 1024}
experiments:
  - {kind: next_token, repeats: 2, top_logprobs: 4, params: {max_tokens: 12}}
  - {kind: determinism, repeats: 2, top_logprobs: 3, params: {max_tokens: 12}}
"""


def test_candidates_are_probabilities_and_the_divergence_is_named(tmp_path: Path) -> None:
    run_dir, lab = run_lab(tmp_path, CONFIG, "nt.yaml")
    got = {a.experiment: a for a in lab.answers}

    seen = got["next_token"].figures
    assert isinstance(seen, NextTokenFigures) and seen.inspected, got["next_token"].answer
    assert got["next_token"].status == "ok"
    steps = [s for v in seen.variants for reply in v.replies for s in reply]
    assert steps and all(len(v.replies) == 2 for v in seen.variants)
    for step in steps:
        assert 0 < len(step.candidates) <= 4
        assert all(0 <= c.p <= 1 for c in step.candidates)
        assert math.fsum(c.p for c in step.candidates) <= 1 + 1e-6
        assert 0 <= step.p <= 1 and step.entropy_bits >= 0
    # At temperature 0 llama.cpp decodes greedily: the top candidate every time.
    greedy = {v.variant: v for v in seen.variants}["t0"]
    assert greedy.greedy is True and greedy.divergence is None

    records = [
        RequestRecord.from_json_line(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    asked = [r for r in records if r.experiment == "next_token" and not r.warmup]
    assert len(asked) == 6
    for r in asked:  # one step per output token the server counted
        assert r.logprobs is not None and r.logprobs.top_k == 4
        assert len(r.logprobs.steps) == r.usage.output_tokens
    assert all(r.params.get("top_logprobs") == 4 for r in asked)

    det = got["determinism"]
    assert isinstance(det.figures, DeterminismFigures)
    assert det.figures.next_token is not None and det.figures.next_token.inspected
    split = [v.divergence for v in det.figures.next_token.variants if v.divergence]
    if split:
        first = min(split, key=lambda d: d.step)
        assert f"diverged at token {first.step + 1} " in det.answer
        assert all(f"(p {c.p:.2f})" in det.answer for c in first.taken[:2] if c.p >= 0.005)
    else:
        assert "no repeats diverged" in det.answer
    assert "at temperature 0 the top candidate is always taken" in det.answer
