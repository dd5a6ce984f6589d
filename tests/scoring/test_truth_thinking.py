"""Hidden thinking time graded against the truth server: the `thinking` example run with
`labkit run --truth`, on llama.cpp's, OpenAI Chat's and OpenAI Responses' protocols. The
server thinks 96 hidden tokens for each request asking for reasoning and reports them in the
API's documented usage field; the estimate's interval must hold the time it truly thought,
and the report's picture must name the thinking estimated."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.analysis.thinking import thinking_figures
from labkit.cli import app
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading import Check, Grade
from labkit.scoring.grading.base import Truth
from labkit.scoring.grading.thinking import grade_thinking
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from labkit.truth.schedule import LAB_SCHEDULE
from labkit.wording.thinking import thinking_answer
from tests.providers.streams import chat, make_provider

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


def _graded_thinking(tmp_path: Path, **schedule: float) -> dict[str, Check]:
    """Eight requests asking for reasoning, recorded against a truth server on `schedule`,
    estimated and graded."""
    tmp_path.mkdir()
    log = tmp_path / "truth.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **schedule) as server:
            provider = make_provider("openai", api_key="k", base_url=server.base_url)
            ctx = RecordContext(run_id="r", experiment="thinking")
            try:
                return [
                    await StreamRecorder().record(provider, chat(reasoning_effort="low"), ctx)
                    for _ in range(8)
                ]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    figures = thinking_figures(records, {})
    answer = LabAnswer(
        experiment="thinking",
        provider="p",
        model="m",
        question="?",
        answer=thinking_answer(figures, "p"),
        figures=figures,
    )
    checks = grade_thinking(answer, records, Truth(read_truth_log(log)))
    return {c.name: c for c in checks}


def test_a_thinking_pace_unlike_the_visible_one_is_caught_by_the_grade(tmp_path: Path) -> None:
    """The estimate's one assumption, made false on purpose: the server thinks 3 times
    slower than it answers, and the stated interval misses the truth by about that much;
    at the visible pace the same requests are covered."""
    base = {"first_token_ms": 5, "token_interval_ms": 2, "tokens": 24, "reasoning_tokens": 60}
    same = _graded_thinking(tmp_path / "same", **base)
    slow = _graded_thinking(tmp_path / "slow", **base, reasoning_ms_per_token=6)
    name = "thinking time, estimated (mean)"
    assert same[name].ok is True and same["replies with hidden reasoning"].ok is True
    assert slow[name].ok is False and slow["replies with hidden reasoning"].ok is True
    assert slow[name].true_value is not None and slow[name].value is not None
    assert slow[name].true_value == pytest.approx(3 * slow[name].value, rel=0.2)
