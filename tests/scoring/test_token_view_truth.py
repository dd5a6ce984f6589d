"""`token_view` graded against the truth server (`labkit run --truth`): on the llama.cpp
entry every token's server time and probability equal what the server sent and the repeat's
prompt came from cache; beside it, an OpenAI entry (probabilities, no server times) and an
Anthropic one (neither) have the columns their API does not report named as such."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.figures.token_view import NOT_REPORTED, TokenViewFigures
from labkit.records import LabResults
from labkit.scoring.grading import Grade

pytestmark = pytest.mark.integration

CONFIG = {
    "name": "token-view-truth",
    "providers": [
        {"id": "local", "kind": "llamacpp", "managed": True},
        {"id": "hosted-openai", "kind": "openai", "model": "gpt-4o-mini"},
        {"id": "hosted-anthropic", "kind": "anthropic", "model": "claude-3-5-haiku-latest"},
    ],
    "experiments": [{"kind": "token_view", "sends": 2, "params": {"max_tokens": 12}}],
}


def test_token_view_is_graded_right_and_marks_what_an_api_does_not_report(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tv.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["run", str(path), "--truth", "--no-report", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    grade = Grade.model_validate_json((run_dir / "grade.json").read_text())
    wrong = [f"{c.answer} · {c.name}: {c.stated} vs {c.true}" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    assert grade.unmatched == 0 and grade.not_graded == []
    checks = {f"{c.answer} · {c.name}": c for c in grade.checks}
    for send in (1, 2):
        for what in ("tokens", "text", "every token's probability", "every token's server time"):
            assert checks[f"token_view · local · send {send}: {what}"].ok is True
        assert checks[f"token_view · local · send {send}: token 1 arrived after the server sent it"]
    assert checks["token_view · local · send 1: prompt from cache"].true == "False"
    assert checks["token_view · local · send 2: prompt from cache"].true == "True"
    assert checks["token_view · local · server time marked not reported"].stated == "False"
    for hosted in ("hosted-openai", "hosted-anthropic"):
        assert checks[f"token_view · {hosted} · server time marked not reported"].stated == "True"
    assert checks["token_view · hosted-openai · send 1: every token's probability"].ok is True
    assert checks["token_view · hosted-anthropic · send 1: streamed events"].ok is True

    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    views = {a.provider: a for a in lab.answers if isinstance(a.figures, TokenViewFigures)}
    local = views["local"].figures
    assert isinstance(local, TokenViewFigures) and local.not_reported == []
    openai = views["hosted-openai"].figures
    assert isinstance(openai, TokenViewFigures) and openai.not_reported == ["server time"]
    anthropic = views["hosted-anthropic"].figures
    assert isinstance(anthropic, TokenViewFigures)
    assert anthropic.not_reported == ["probability", "server time"]
    assert all(row.p is None for r in anthropic.replies for row in r.rows)
    assert f"Probability, server time: {NOT_REPORTED}." in views["hosted-anthropic"].answer
