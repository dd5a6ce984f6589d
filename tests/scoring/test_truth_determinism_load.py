"""`determinism_load` graded against the truth server's batch-dependent selection
(`labkit.truth.batch`): with near-ties flipped only when more than `ABOVE` requests share the
server, the replies sent alone and in pairs stay identical, the ones sent eight at once
diverge at the step the server flipped between the candidates it logged, and the answer says
the batch controlled the selection; every stated fact right, every stated probability
covered. Without the flips the same run says the batch changed nothing, graded right too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.records import LabResults
from labkit.scoring.grading import Grade, grade_run
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration

ABOVE = 2
SCHEDULE: dict[str, Any] = {
    "first_token_ms": 60,
    "token_interval_ms": 2,
    "tokens": 32,
    "sampling": True,
    "candidates": 5,
    "slots": 8,
    "batch_flip_above": ABOVE,
    "batch_flip_margin": 0.12,
    "batch_flip_p": 0.5,
}


def _graded_run(tmp_path: Path, **schedule: Any) -> tuple[Grade, DeterminismLoadFigures, str]:
    log = tmp_path / "truth.jsonl"
    out = tmp_path / "runs"
    with TruthServer(truth_log=log, seed=7, **{**SCHEDULE, **schedule}) as server:
        config = {
            "name": "detload-truth",
            "providers": [
                {
                    "id": "truth",
                    "kind": "llamacpp",
                    "managed": False,
                    "base_url": f"http://127.0.0.1:{server.port}",
                }
            ],
            "experiments": [
                {
                    "kind": "determinism_load",
                    "repeats": 8,
                    "concurrency": [1, 2, 8],
                    "top_logprobs": 2,
                    "params": {"temperature": 0, "max_tokens": 32},
                }
            ],
        }
        path = tmp_path / "detload.yaml"
        path.write_text(yaml.safe_dump(config))
        result = CliRunner().invoke(app, ["run", str(path), "--no-report", "--out", str(out)])
        assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    grade = grade_run(run_dir, read_truth_log(log))
    (answer,) = LabResults.model_validate_json((run_dir / "lab.json").read_text()).answers
    assert isinstance(answer.figures, DeterminismLoadFigures)
    wrong = [f"{c.name}: stated {c.stated}, true {c.true} ({c.why})" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    assert grade.unmatched == 0 and grade.not_graded == []
    return grade, answer.figures, answer.answer


def _names(grade: Grade) -> set[str]:
    return {c.name for c in grade.checks if c.ok is True}


def test_a_batch_that_flips_near_ties_is_found_and_graded_right(tmp_path: Path) -> None:
    grade, f, text = _graded_run(tmp_path)
    alone, pairs, eight = f.levels
    assert alone.identical and pairs.identical and alone.distinct_outputs == 1
    assert eight.identical is False and eight.distinct_outputs >= 2
    k = eight.first_different_token
    assert k is not None and eight.divergence is not None
    right = _names(grade)
    for name in (
        "concurrency 1: identical replies",
        "concurrency 2: identical replies",
        "concurrency 8: identical replies",
        "concurrency 8: distinct replies",
        "concurrency 8: first different token",
        f"concurrency 8: branches at token {k}",
        "the batch changed the selection",
    ):
        assert name in right, name
    figures = [c for c in grade.checks if c.kind == "figure" and c.name.startswith("concurrency 8")]
    assert len(figures) == 2 and all(c.ok for c in figures)
    assert f.batch_changed_selection is True
    assert "What controlled the selection: the batch." in text
    assert f"first different at token {k}, where the top two were" in text
    # The prompt's first near-tie (token 15: 0.004 apart) is where the server's first flip
    # of its seeded draws falls, in whichever request first shared a batch of 3 or more.
    assert k == 15 and "a near-tie that batched arithmetic can flip" in text


def test_a_batch_that_changes_nothing_is_said_and_graded_right(tmp_path: Path) -> None:
    grade, f, text = _graded_run(tmp_path, batch_flip_above=0)
    assert all(row.identical for row in f.levels)
    assert f.batch_changed_selection is False and f.server_slots == 8
    assert "the batch changed the selection" in _names(grade)
    assert "What controlled the selection: not the batch." in text
    assert "batch did not change the selection at concurrency 1, 2 and 8" in text
