"""Hidden thinking time graded against the truth server: the `thinking` example run with
`labkit run --truth`, on llama.cpp's, OpenAI Chat's and OpenAI Responses' protocols. The
server thinks 96 hidden tokens for each request asking for reasoning and reports them in the
API's documented usage field; the estimate's interval must hold the time it truly thought,
and the report's picture must name the thinking estimated."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.scoring.grading import Grade
from labkit.truth.schedule import LAB_SCHEDULE

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "labkit" / "examples"


def test_the_hidden_thinking_time_is_recovered_within_its_interval(tmp_path: Path) -> None:
    config = yaml.safe_load((EXAMPLES / "thinking.yaml").read_text())
    config["providers"] += [
        {"id": "chat", "kind": "openai", "model": "gpt-5-mini"},
        {"id": "responses", "kind": "openai_responses", "model": "gpt-5-mini"},
    ]
    # The lab's truth server counts an end token it never streams, as llama.cpp does; a hosted
    # entry cannot know that (OpenAI's usage counts none), so its replies are capped at the
    # schedule's 12 tokens, where no end token is sampled, and every count is what streamed.
    config["experiments"][0]["params"]["max_tokens"] = LAB_SCHEDULE["tokens"]
    path = tmp_path / "thinking.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", str(path), "--truth", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    grade = Grade.model_validate_json((run_dir / "grade.json").read_text())
    wrong = [f"{c.answer} · {c.name}: {c.stated} vs {c.true} ({c.why})" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    assert grade.unmatched == 0 and grade.not_graded == []
    checks = {f"{c.answer} · {c.name}": c for c in grade.checks}
    for provider in ("local", "chat", "responses"):
        thinking = checks[f"thinking · {provider} · thinking time, estimated (mean)"]
        assert thinking.ok is True and thinking.lo is not None and thinking.hi is not None
        assert thinking.lo < thinking.hi
        tokens = checks[f"thinking · {provider} · hidden reasoning tokens (mean)"]
        assert tokens.ok is True and tokens.value == LAB_SCHEDULE["reasoning_tokens"]
        assert checks[f"thinking · {provider} · replies with hidden reasoning"].ok is True
    html = (run_dir / "report.html").read_text()
    assert "thinking (estimated)" in html and 'data-chart="thinking"' in html
