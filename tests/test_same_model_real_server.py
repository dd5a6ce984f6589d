"""Same model? on the real llama-server and the real bundled model (no mocks, no skips): the
`same_model` example serves the one model from two managed servers, and the verdict on the
second against the first must be "consistent" (shapes and agreement, never timing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.cli.examples import example_text
from labkit.figures.same_model import SameModelFigures
from tests.support.lab_runs import run_lab

pytestmark = pytest.mark.e2e


def test_the_bundled_model_against_itself_is_consistent(tmp_path: Path) -> None:
    _, lab = run_lab(tmp_path, example_text("same_model"), "same_model.yaml")
    got = {a.provider: a for a in lab.answers if a.experiment == "same_model"}
    assert set(got) == {"local", "again"}
    ref = got["local"].figures
    assert isinstance(ref, SameModelFigures) and ref.is_reference and ref.verdict is None
    f = got["again"].figures
    assert isinstance(f, SameModelFigures) and f.verdict is not None, got["again"].answer
    assert f.verdict.verdict == "consistent", got["again"].answer
    assert f.verdict.confidence >= 0.95
    # every fixed text counted alike beyond the framing, every prompt's distribution compared
    assert f.verdict.token_counts_equal is not None
    assert f.verdict.token_counts_equal.k == f.verdict.token_counts_equal.n == 5
    assert len(f.prompts) == 10 and all(p.total_variation is not None for p in f.prompts)
    assert all(p.top == p.reference_top for p in f.prompts)
    # the named tokenizer's count stands beside the servers'
    assert all(t.named_tokenizer_tokens for t in f.texts)
