"""`token_view` without a server: the parser keeps each token chunk's text and llama.cpp's
per-token time only when asked, the analysis joins them with logprobs and arrivals into one
row per token, a reply without logprobs or server times has those columns named as not
reported (never zero), and the answer says so."""

from __future__ import annotations

import json
import math

import pytest

from labkit.analysis.token_view import reply_rows, token_view_figures
from labkit.experiments import experiment_class
from labkit.experiments.token_view import TokenViewSettings
from labkit.figures.token_view import NOT_REPORTED
from labkit.providers.llamacpp import LlamaCppParser
from labkit.providers.openai import OpenAIChatParser
from labkit.records import LogprobStep, OutputEvents, OutputLogprobs, RequestRecord, TokenCandidate
from labkit.wire.sse import SSEEvent
from labkit.wording.token_view import token_view_answer
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _chunk(text: str, timings: dict[str, float] | None) -> SSEEvent:
    obj: dict[str, object] = {
        "id": "c1",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    if timings is not None:
        obj["timings"] = timings
    return SSEEvent(None, json.dumps(obj), 0)


def test_the_parser_keeps_each_token_chunks_text_and_server_time_only_when_asked() -> None:
    events = [
        _chunk("Hello", {"prompt_ms": 10.0, "predicted_ms": 0.5, "predicted_n": 1}),
        _chunk(" world", {"prompt_ms": 10.0, "predicted_ms": 4.5, "predicted_n": 2}),
        _chunk("!", None),  # a chunk without timings: its time is unknown, not the last one
    ]
    plain = LlamaCppParser()
    for ev in events:
        plain.on_event(ev)
    assert plain.event_detail() is None

    asked = LlamaCppParser()
    asked.want_event_detail()
    classes = [asked.on_event(ev) for ev in events]
    assert all(c >= 2 for c in classes)
    detail = asked.event_detail()
    assert detail == OutputEvents(texts=["Hello", " world", "!"], server_ms=[10.5, 14.5, None])
    assert "".join(detail.texts) == asked.output_text


def test_a_parser_without_server_times_keeps_texts_and_says_none() -> None:
    parser = OpenAIChatParser("openai")
    parser.want_event_detail()
    parser.on_event(_chunk("Hi", {"prompt_ms": 1.0, "predicted_ms": 1.0}))  # not read: openai
    detail = parser.event_detail()
    assert detail is not None and detail.texts == ["Hi"] and detail.server_ms is None


def _record(
    texts: list[str], *, logprobs: bool, server: list[float] | None, cached: int | None
) -> RequestRecord:
    r = make_record(
        experiment="token_view",
        output_tokens=len(texts),
        output_text="".join(texts),
        input_tokens=20,
        cached_tokens=cached,
    )
    r.usage.cached_input_tokens = cached
    r.event_detail = OutputEvents(texts=texts, server_ms=server)
    if logprobs:
        r.logprobs = OutputLogprobs(
            top_k=2,
            steps=[
                LogprobStep(
                    token=t,
                    logprob=math.log(0.5 + 0.1 * k),
                    top=[
                        TokenCandidate(token=t, logprob=math.log(0.5 + 0.1 * k)),
                        TokenCandidate(token="x", logprob=math.log(0.2)),
                    ],
                )
                for k, t in enumerate(texts)
            ],
        )
    return r


def test_rows_join_text_probability_candidates_arrival_and_server_time() -> None:
    r = _record(["The", " sky", " is"], logprobs=True, server=[12.0, 20.0, 28.5], cached=19)
    rows, tokens = reply_rows(r)
    assert tokens and [row.i for row in rows] == [1, 2, 3]
    assert "".join(row.text for row in rows) == r.output_text
    assert [row.arrival_ms for row in rows] == r.client.event_offsets_ms
    assert [row.server_ms for row in rows] == [12.0, 20.0, 28.5]
    assert [round(row.p or 0, 6) for row in rows] == [0.5, 0.6, 0.7]
    assert [c.token for c in rows[0].candidates] == ["The", "x"]

    cold = _record(["The", " sky", " is"], logprobs=True, server=[900.0, 910.0, 920.0], cached=0)
    f = token_view_figures(2, [cold, r])
    assert f.not_reported == []
    assert [reply.from_cache for reply in f.replies] == [False, True]
    text = token_view_answer(f, "local")
    assert "send 2 read 19 of 20 prompt tokens from cache (the prompt came from cache)" in text
    assert NOT_REPORTED not in text


def test_a_hosted_reply_without_logprobs_or_server_times_marks_them_not_reported() -> None:
    r = _record(["Hi", " there"], logprobs=False, server=None, cached=None)
    f = token_view_figures(5, [r])
    (reply,) = f.replies
    assert reply.rows_are == "events" and reply.from_cache is None
    assert all(row.p is None and row.server_ms is None for row in reply.rows)
    assert f.not_reported == ["probability", "server time", "cache"]
    text = token_view_answer(f, "hosted")
    assert f"Probability, server time, cache: {NOT_REPORTED}." in text
    assert "streamed events (no token boundaries)" in text


def test_events_of_several_tokens_give_each_token_its_events_times() -> None:
    r = _record(["ab", "c"], logprobs=False, server=[5.0, 9.0], cached=0)
    r.logprobs = OutputLogprobs(
        top_k=1,
        steps=[LogprobStep(token=t, logprob=math.log(0.9)) for t in ("a", "b", "c")],
    )
    r.client.event_tokens = [2, 1]
    rows, tokens = reply_rows(r)
    assert tokens and [row.text for row in rows] == ["a", "b", "c"]
    assert [row.server_ms for row in rows] == [5.0, 5.0, 9.0]
    assert rows[0].arrival_ms == rows[1].arrival_ms != rows[2].arrival_ms


def test_settings_refuse_no_sends_in_one_line() -> None:
    cls = experiment_class("token_view")
    assert cls.settings_model is TokenViewSettings
    with pytest.raises(ValueError, match="sends"):
        TokenViewSettings(sends=0)
