"""`same_model` graded against the truth server on a socket: one truth server serves its
model under one name to four providers, by URL-segment schedules — the model itself (the
reference), the same model on another server (logit noise), another tokenizer, another
model's distributions. The verdicts must name each, and `labkit score`'s grader must find
every stated verdict right and every total variation within the truth's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.figures.same_model import SameModelFigures
from labkit.runner import RunOptions, prepare_run, run_lab
from labkit.scoring.grading import grade_run
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration

VARIANTS = {
    "reference": {},
    "other_server": {"logit_noise": 0.05},
    "other_tokenizer": {"tokenizer": "thirds"},
    "other_model": {"model_salt": 7},
}
WANT = {
    "other_server": "consistent",
    "other_tokenizer": "differs: tokenizer",
    "other_model": "differs: distributions",
}


def test_the_verdicts_agree_with_the_truth(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    with TruthServer(
        truth_log=log, first_token_ms=0, token_interval_ms=0, tokens=6, sampling=True
    ) as server:
        config = parse_config(
            {
                "name": "same-truth",
                "providers": [
                    {
                        "id": pid,
                        "kind": "openai_compatible",
                        "model": "one-name",
                        "base_url": server.url(**script),
                    }
                    for pid, script in VARIANTS.items()
                ],
                "experiments": [{"kind": "same_model", "reference": "reference", "warmup": 0}],
            }
        )
        result = asyncio.run(run_lab(prepare_run(config, RunOptions(out_dir=tmp_path / "runs"))))
    answers = {a.provider: a for a in result.lab.answers}
    for pid, verdict in WANT.items():
        f = answers[pid].figures
        assert isinstance(f, SameModelFigures) and f.verdict is not None, answers[pid].answer
        assert f.verdict.verdict == verdict, answers[pid].answer
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if (p / "lab.json").exists()]
    grade = grade_run(run_dir, read_truth_log(log))
    wrong = [f"{c.answer} · {c.name}: {c.stated} vs {c.true}" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    verdicts = [c for c in grade.checks if c.name == "verdict"]
    assert len(verdicts) == 3 and all(c.ok for c in verdicts)
    tvs = [c for c in grade.checks if "total variation" in c.name]
    assert len(tvs) == 3 * 10 and all(c.ok for c in tvs)
