"""`thinking` on made-up records: the thinking time estimated from hidden reasoning tokens
and the visible decode pace, the TTFT's three parts adding up, the estimate labelled
estimated in the answer, and replies with streamed or no reasoning named, not estimated."""

from __future__ import annotations

import pytest

from labkit.analysis.thinking import hidden_reasoning, thinking_estimate, thinking_figures
from labkit.experiments import experiment_class
from labkit.experiments.thinking import ThinkingExperiment, ThinkingSettings
from labkit.figures.thinking import ESTIMATED
from labkit.records import RequestRecord
from labkit.wording.thinking import thinking_answer
from tests.providers.streams import make_provider
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _hidden(ttft: float, pace: float, reasoning: int = 100) -> RequestRecord:
    r = make_record(experiment="thinking", ttft_ms=ttft, decode_ms_per_token=pace)
    r.usage.reasoning_tokens = reasoning
    return r


def test_thinking_is_the_hidden_tokens_at_the_visible_pace_and_the_parts_add_up() -> None:
    records = [_hidden(900.0, 4.0), _hidden(960.0, 4.4), _hidden(930.0, 4.2)]
    one = thinking_estimate(records[0])
    assert one is not None
    assert one.thinking_ms == pytest.approx(400.0)
    assert one.waiting_ms == pytest.approx(500.0)
    assert one.answering_ms == pytest.approx(19 * 4.0)
    f = thinking_figures(records, {})
    assert (f.n, f.hidden, f.streamed_reasoning, f.no_reasoning) == (3, 3, 0, 0)
    assert f.label == ESTIMATED
    assert f.thinking_ms is not None and f.thinking_ms.value == pytest.approx(420.0)
    assert f.thinking_ms.lo is not None and f.thinking_ms.hi is not None
    assert f.thinking_ms.lo < 420.0 < f.thinking_ms.hi
    assert f.waiting_ms is not None and f.ttft_ms is not None
    assert f.waiting_ms.value + f.thinking_ms.value == pytest.approx(f.ttft_ms.value)
    text = thinking_answer(f, "hosted")
    assert "420 ms (95% CI" in text and f"thinking ({ESTIMATED})" in text
    assert text.count(ESTIMATED) >= 2


def test_streamed_or_absent_reasoning_is_not_estimated() -> None:
    streamed = _hidden(900.0, 4.0)
    streamed.client.ttft_text_ms = 1300.0  # reasoning deltas came first: measured in the stream
    plain = make_record(experiment="thinking")
    warm = _hidden(900.0, 4.0)
    warm.warmup = True
    assert not hidden_reasoning(streamed) and not hidden_reasoning(plain)
    f = thinking_figures([streamed, plain, warm], {})
    assert (f.n, f.hidden, f.streamed_reasoning, f.no_reasoning) == (2, 0, 1, 1)
    assert f.thinking_ms is None and f.requests == []
    assert f.not_estimated_because == "no reply counted hidden reasoning (usage reasoning_tokens)"
    text = thinking_answer(f, "local")
    assert text.startswith("Thinking time not estimated on local")
    assert "1 of 2 replies streamed their reasoning" in text


def test_a_one_token_answer_gives_no_pace_to_estimate_with() -> None:
    short = _hidden(900.0, 4.0)
    short.client.decode_ms_per_token = None
    f = thinking_figures([short], {})
    assert f.hidden == 1 and f.thinking_ms is None
    assert "decode pace" in (f.not_estimated_because or "")


@pytest.mark.parametrize(
    ("kind", "asked"),
    [
        ("openai", {"reasoning_effort": "low"}),
        ("llamacpp", {"reasoning_effort": "low"}),
        ("openai_responses", {"reasoning": {"effort": "low"}}),
    ],
)
def test_the_effort_is_asked_as_each_api_takes_it(kind: str, asked: dict[str, object]) -> None:
    assert experiment_class("thinking") is ThinkingExperiment
    exp = ThinkingExperiment(ThinkingSettings(repeats=2, warmup=1, params={"max_tokens": 8}))
    provider = make_provider(kind, api_key="k", base_url="http://127.0.0.1:9/v1")
    planned = list(exp.plan(provider))
    assert len(planned) == 3 == exp.planned_per_path(provider)
    assert planned[0].warmup and not planned[1].warmup
    for p in planned:
        assert p.request.params == {"max_tokens": 8, **asked}
