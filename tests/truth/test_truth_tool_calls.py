"""Tool calls in each API's own shape, read by labkit's own clients: OpenAI Chat's
``tool_calls`` deltas (finish_reason ``tool_calls``), Anthropic's ``tool_use`` blocks with
``input_json_delta`` (stop_reason ``tool_use``) and the Responses API's ``function_call``
items; each parsed call is the one the truth log says the server made, and a history
holding the results gets text."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers.base import ChatRequest
from labkit.providers.tools import ToolResult, ToolSpec
from labkit.records import RequestRecord, StopReason
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import make_provider

pytestmark = pytest.mark.integration

SCHEDULE = {
    "first_token_ms": 1,
    "token_interval_ms": 0.5,
    "tokens": 8,
    "tool_calls": 1,
    "parallel_tool_calls": 2,
}
RAW_STOP = {"openai_compatible": "tool_calls", "anthropic": "tool_use"}


def session(tmp_path: Path, kind: str, **schedule: Any) -> list[tuple[RequestRecord, TruthRequest]]:
    """A tool step: the call, then the history with the results; each record and its line."""
    log = tmp_path / f"{kind}.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **{**SCHEDULE, **schedule}) as server:
            settings: dict[str, Any] = {"base_url": server.base_url}
            if kind == "anthropic":
                settings = {"base_url": f"http://127.0.0.1:{server.port}", "api_key": "x"}
            provider = make_provider(kind, **settings)
            tools = provider.tool_format()
            assert tools is not None and tools.native
            params = {**tools.params([ToolSpec(name="search")], "auto"), "max_tokens": 64}
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Find labkit."}]
            ctx = RecordContext(run_id="r", experiment="t")
            recorder = StreamRecorder()
            try:
                first = await recorder.record(provider, ChatRequest(messages, params), ctx)
                calls = tools.calls_in(first)
                messages += tools.assistant(first.output_text or "", calls)
                messages += tools.results([ToolResult(call=c, content="found") for c in calls])
                second = await recorder.record(provider, ChatRequest(messages, params), ctx)
                return [first, second]
            finally:
                await provider.aclose()

    records = asyncio.run(go())
    return list(zip(records, read_truth_log(log).requests, strict=True))


@pytest.mark.parametrize("kind", ["openai_compatible", "anthropic", "openai_responses"])
def test_tool_calls_are_parsed_as_the_server_made_them(tmp_path: Path, kind: str) -> None:
    (call, truth), (answer, after) = session(tmp_path, kind)
    assert call.error is None and call.stop_reason == StopReason.TOOL_CALL
    if kind in RAW_STOP:
        assert call.stop_reason_raw == RAW_STOP[kind]
    assert truth.finish_reason == "tool_calls" and len(truth.tool_calls) == 2
    made = [(c.id, c.name, c.arguments) for c in truth.tool_calls]
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls or []] == made
    for _, name, arguments in made:
        assert name == "search" and set(json.loads(arguments)) == {"query"}
    # The results are in the history: the session's one tool step is done, text follows.
    assert answer.error is None and answer.stop_reason == StopReason.END
    assert after.tool_calls == [] and answer.output_text and not answer.tool_calls
    assert after.prompt_tokens > truth.prompt_tokens


def test_a_forced_call_is_made_whatever_the_session(tmp_path: Path) -> None:
    log = tmp_path / "forced.jsonl"

    async def go() -> RequestRecord:
        with TruthServer(truth_log=log, **{**SCHEDULE, "tool_calls": 0}) as server:
            provider = make_provider("openai_compatible", base_url=server.base_url)
            tools = provider.tool_format()
            assert tools is not None
            params = tools.params([ToolSpec(name="lookup")], "required")
            messages = [{"role": "user", "content": "x"}]
            try:
                ctx = RecordContext(run_id="r", experiment="t")
                return await StreamRecorder().record(provider, ChatRequest(messages, params), ctx)
            finally:
                await provider.aclose()

    rec = asyncio.run(go())
    (truth,) = read_truth_log(log).requests
    assert [c.name for c in rec.tool_calls or []] == [c.name for c in truth.tool_calls]
    assert [c.name for c in truth.tool_calls] == ["lookup", "lookup"]
