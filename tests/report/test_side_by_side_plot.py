"""The report's chars-per-token figure shows every tokenizer of token_ratio's side by side."""

from __future__ import annotations

import pytest

from labkit.figures import TokenizerCount, TokenRatioFigures
from labkit.records import LabAnswer, LabResults
from labkit.report.kinds.token_ratio import chars_per_token_chart

pytestmark = pytest.mark.unit


def _answer(provider: str) -> LabAnswer:
    table = [
        TokenizerCount(text_id="japanese", tokenizer=name, tokens=n, chars_per_token=34 / n)
        for name, n in (("tiktoken:cl100k_base", 30), ("tiktoken:o200k_base", 24))
    ]
    table.append(
        TokenizerCount(
            text_id="japanese", tokenizer=f"m [{provider}]", tokens=58, chars_per_token=34 / 58
        )
    )
    return LabAnswer(
        experiment="token_ratio",
        provider=provider,
        question="q",
        answer="a",
        figures=TokenRatioFigures(side_by_side=table),
    )


def test_each_tokenizer_is_one_series_kept_once() -> None:
    lab = LabResults(run_id="r", answers=[_answer("a"), _answer("b")])
    chart = chars_per_token_chart(lab)
    assert chart is not None
    values = chart.spec["data"]["values"]
    series = {v["tokenizer"]: v["chars_per_token"] for v in values}
    assert len(values) == len(series) == 4
    assert series == pytest.approx(
        {"cl100k_base": 34 / 30, "o200k_base": 34 / 24, "m [a]": 34 / 58, "m [b]": 34 / 58}
    )
