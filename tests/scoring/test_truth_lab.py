"""The lab grades itself: the quickstart's five experiments, the agent example and a load
level, run with `labkit run --truth` against the truth server, every stated figure's interval
holding the truth and every stated fact right (`labkit.scoring.grading`).

Each run is checked for what its answers must state, not only for what they happen to: a
figure the grader expects but the answer did not state (the cold TTFT, a decode per token,
the split's parts) fails as surely as a wrong one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.scoring.grading import Grade

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "labkit" / "examples"


def _run(tmp_path: Path, *args: str) -> tuple[Grade, Path]:
    out = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", *args, "--truth", "--no-report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    grade = Grade.model_validate_json((run_dir / "grade.json").read_text())
    assert (run_dir / "truth.jsonl").is_file() and (run_dir / "grade.md").is_file()
    assert re.search(
        r"(stated intervals covered the truth|no answer stated an interval)"
        r"(, \d+ of \d+ reached the lower bound the truth sets [^;]*)?; ",
        result.output,
    )
    return grade, run_dir


def _graded(grade: Grade) -> dict[str, bool | None]:
    return {f"{c.answer} · {c.name}": c.ok for c in grade.checks}


def _assert_all_right(grade: Grade) -> None:
    wrong = [
        f"{c.answer} · {c.name}: stated {c.stated}, true {c.true} ({c.why})" for c in grade.wrong
    ]
    assert wrong == [], "\n".join(wrong)
    assert grade.unmatched == 0 and grade.matched > 0


def test_the_quickstart_answers_are_graded_right(tmp_path: Path) -> None:
    grade, _ = _run(tmp_path, "--example", "quickstart")
    _assert_all_right(grade)
    checks = _graded(grade)
    must = [
        # Q1: a cold and a cached TTFT apart, and decode over the tokens that arrived
        "single · local · cold TTFT (median)",
        "single · local · cached TTFT (median)",
        "single · local · cold requests",
        "single · local · decode per token (median)",
        # Q2: the provider's tokenizer against the server's
        "token_ratio · local · english: tokens",
        # Q3: identical or not, where the replies split, and how likely each branch was
        "determinism · local · t0: identical replies",
        "determinism · local · t1: first different token (0-based)",
        # Q4: a prompt token's cost against a generated one's
        "prefill_decode · local · a prompt token's cost",
        "prefill_decode · local · a generated token's cost",
        "prefill_decode · local · generated / prompt token cost",
        # Q5: the split's parts, the queue rule, the SDK's difference
        "attribution · local · TTFT (mean)",
        "attribution · local · provider queue (mean)",
        "attribution · local · provider prefill (mean)",
        "attribution · local · network and front end (mean)",
        "attribution · local · queue 0 by construction",
        "attribution · local · SDK minus wire TTFT (paired median)",
    ]
    missing = [name for name in must if checks.get(name) is not True]
    assert missing == [], missing
    assert grade.not_graded == []


def test_the_agent_examples_calls_and_endings_are_graded_right(tmp_path: Path) -> None:
    grade, run_dir = _run(tmp_path, "--example", "agent")
    _assert_all_right(grade)
    checks = _graded(grade)
    assert checks["session · local · turns that made a call, carrying it"] is True
    assert checks["session · local · sessions that ended with an answer"] is True
    calls = [
        json.loads(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if '"tool_calls":[' in line
    ]
    assert calls and all(r["stop_reason"] == "tool_call" for r in calls)


def test_a_load_level_is_graded_right(tmp_path: Path) -> None:
    config = yaml.safe_load((EXAMPLES / "load.yaml").read_text())
    config["experiments"] = [
        {**config["experiments"][0], "concurrency": [4], "requests": 12, "warmup": 1}
    ]
    path = tmp_path / "load.yaml"
    path.write_text(yaml.safe_dump(config))
    grade, _ = _run(tmp_path, str(path))
    _assert_all_right(grade)
    checks = _graded(grade)
    assert checks["load · local · concurrency 4: TTFT (median)"] is True
    assert checks["load · local · concurrency 4: requests served"] is True
