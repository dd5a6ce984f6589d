"""How a `session` ends, and what counts as complete: only a session whose main agent ended
with an answer. Run in process: the fake provider scripts tool calls and cut answers, and a
llama-server stand-in (respx) answers a grammar-forced turn with the call's JSON as text, as
the bundled model does, so the whole loop is checked on the shapes each path records."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import respx

from labkit.analysis.sessions import session_figures
from labkit.experiments.base import PlannedRequest
from labkit.experiments.session import SessionExperiment, SessionSettings, SessionTodo
from labkit.figures import SessionFigures
from labkit.measurement.recorder import StreamRecorder
from labkit.providers import Provider
from labkit.providers.fake import FakeSchedule
from labkit.providers.tools import FORCED_CALL_MARK
from labkit.records import LabAnswer, RequestRecord, StopReason
from labkit.runner.executor import Measurer
from tests.providers.streams import make_provider, oa_usage, openai_events, sse_response

pytestmark = pytest.mark.unit

FAST = {"first_token_ms": 0, "token_interval_ms": 0, "tokens": 6}


def _sessions(
    provider: Provider, sessions: int = 2, **settings: Any
) -> tuple[list[RequestRecord], list[PlannedRequest], LabAnswer]:
    """`sessions` sessions run by the experiment itself on `provider`: the records, the
    requests as planned, and the experiment's answer."""
    exp = SessionExperiment(
        SessionSettings(
            sessions=sessions,
            tool_latency={"ms": 0},
            task_tokens=8,
            tool_result_tokens=8,
            **{"tool_steps": 1, "max_steps": 3, "params": {"max_tokens": 8}, **settings},
        )
    )

    async def go() -> tuple[list[RequestRecord], list[PlannedRequest]]:
        await exp.prepare(provider)
        measurer = Measurer(StreamRecorder(), StreamRecorder, run_id="t", store_text=True)
        records: list[RequestRecord] = []
        sent: list[PlannedRequest] = []

        async def send(planned: PlannedRequest, queue_ms: float) -> None:
            sent.append(planned)
            records.append(await measurer.measure(provider, exp.name, planned, queue_ms))

        for i in range(sessions):
            await exp.run_session(SessionTodo(index=i, nonce=f"n{i}", run=f"r{i}"), send)
        await provider.aclose()
        return records, sent

    records, sent = asyncio.run(go())
    return records, sent, exp.analyze(provider.id, provider.model, records)


def _fake(**schedule: Any) -> Provider:
    return make_provider("fake", schedule=FakeSchedule(**{**FAST, **schedule}))


def _figures(answer: LabAnswer) -> SessionFigures:
    assert isinstance(answer.figures, SessionFigures), answer.answer
    return answer.figures


def test_a_session_that_answered_is_complete() -> None:
    records, _, answer = _sessions(_fake(tool_calls=1))
    figures = _figures(answer)
    assert [(r.complete, r.ended) for r in figures.sessions] == [(True, "answer")] * 2
    assert figures.incomplete == {} and answer.status == "ok"
    assert "completed 2 of 2 sessions, a median " in answer.answer  # no reasons given
    calls = [r for r in records if r.tool_calls]
    assert calls and all(r.stop_reason == StopReason.TOOL_CALL for r in calls)
    assert all(c.source == "provider" for r in calls for c in r.tool_calls or [])


def test_an_answer_cut_by_max_tokens_is_not_complete() -> None:
    # Each text answer is cut at max_tokens; the tool-call turns end for their calls.
    records, _, answer = _sessions(_fake(tool_calls=1, tokens=16))
    figures = _figures(answer)
    assert [(r.complete, r.ended) for r in figures.sessions] == [(False, "length")] * 2
    assert figures.incomplete == {"length": 2} and answer.status == "partial"
    assert "completed 0 of 2 sessions (2 cut by max_tokens on the last turn)" in answer.answer
    assert figures.completion_ms_p50 is None and figures.goodput_sessions_per_s == 0
    finals = [r for r in records if r.tags.get("final")]
    assert finals and all(r.stop_reason == StopReason.LENGTH for r in finals)


def test_a_session_still_calling_at_max_steps_is_not_complete() -> None:
    _, _, answer = _sessions(_fake(tool_calls=5), tool_steps=2, max_steps=3)
    figures = _figures(answer)
    assert [r.ended for r in figures.sessions] == ["answer"] * 2  # the third turn answers
    _, _, answer = _sessions(_fake(tool_calls=5), tool_steps=None, max_steps=2)
    figures = _figures(answer)
    assert [(r.complete, r.ended) for r in figures.sessions] == [(False, "step_limit")] * 2
    assert "(2 still calling tools at max_steps)" in answer.answer


def test_a_session_whose_last_turn_failed_is_not_complete() -> None:
    _, _, answer = _sessions(_fake(fail="http_status", fail_status=500), sessions=1)
    figures = _figures(answer)
    assert [(r.complete, r.ended) for r in figures.sessions] == [(False, "failed")]
    assert "(1 ended on a failed turn)" in answer.answer


def test_mixed_endings_are_counted_by_why() -> None:
    records, _, _ = _sessions(_fake(tool_calls=1), sessions=3)
    # Session 1's answer cut, session 2's last turn failed: the rest as recorded.
    for r in records:
        if r.tags.get("session") == 1 and r.tags.get("final"):
            r.stop_reason = StopReason.LENGTH
        if r.tags.get("session") == 2 and r.tags.get("final"):
            r.error = r.error or _error()
    figures = session_figures(records)
    assert [r.ended for r in figures.sessions] == ["answer", "length", "failed"]
    assert figures.incomplete == {"length": 1, "failed": 1}


def _error() -> Any:
    from labkit.records import ErrorKind, RecordError

    return RecordError(kind=ErrorKind.HTTP_STATUS, message="500")


# --- the grammar path: a model without native tools, as llama-server serves it ---------

LLAMA = "http://127.0.0.1:8080"
CALL_TEXT = '{"name": "lookup", "arguments": {"query": "rivers"}}'
ANSWER = "The rivers run north."


def _llama_server(request: httpx.Request) -> httpx.Response:
    """llama-server with SmolLM2's template: no tool calls ever, the call's JSON as text on a
    turn whose grammar forces it, plain text otherwise."""
    if request.url.path == "/tokenize":
        return httpx.Response(404)
    body = json.loads(request.content)
    assert "tools" not in body and "json_schema" not in body
    forced = str(body.get("grammar", "")).startswith(FORCED_CALL_MARK)
    text = CALL_TEXT if forced else ANSWER
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
    return sse_response(list(openai_events(pieces, usage=oa_usage(30, len(pieces)))))


def test_the_grammar_path_records_calls_and_answers_in_words() -> None:
    with respx.mock() as router:
        router.route(host="127.0.0.1").mock(side_effect=_llama_server)
        records, sent, answer = _sessions(
            make_provider("llamacpp", base_url=LLAMA, transport="httpx"), tool_steps=2, max_steps=4
        )
    figures = _figures(answer)
    assert [(r.complete, r.ended, r.tool_calls) for r in figures.sessions] == [
        (True, "answer", 2)
    ] * 2
    tool_steps = [r for r in records if r.tags.get("calls")]
    assert len(tool_steps) == 4
    for r in tool_steps:
        assert r.stop_reason == StopReason.TOOL_CALL and r.stop_reason_raw == "stop"
        assert [(c.name, c.source) for c in r.tool_calls or []] == [("lookup", "text")]
        assert json.loads((r.tool_calls or [])[0].arguments) == {"query": "rivers"}
    finals = [r for r in records if r.tags.get("final")]
    assert [r.output_text for r in finals] == [ANSWER] * 2
    assert all(r.stop_reason == StopReason.END and r.tool_calls is None for r in finals)
    # The final request shows the model no call JSON, and ends asking for the answer.
    last = [p for p in sent if p.tags.get("step") == 2]
    assert len(last) == 2
    for planned in last:
        messages = planned.request.messages
        assert all('"arguments"' not in str(m["content"]) for m in messages)
        assert messages[-1]["role"] == "user" and "answer" in messages[-1]["content"]
        assert "grammar" not in planned.request.params
