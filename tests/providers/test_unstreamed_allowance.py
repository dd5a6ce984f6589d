"""The tokens a reply may count without streaming them (issue 44): 8 special tokens, and
48 per tool call, client or hosted. A short answer whose count holds hidden reasoning
reported as 0 is unaccounted (decode not derived); a reply that made calls keeps their
framing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from labkit.providers.base import (
    UNSTREAMED_SPECIAL_TOKENS,
    UNSTREAMED_TOOL_CALL_TOKENS,
    StreamParser,
)
from labkit.wire.sse import SSEEvent
from tests.providers.streams import make_provider

pytestmark = pytest.mark.unit


def _parser(kind: str) -> StreamParser:
    return make_provider(kind, api_key="sk-test", base_url="http://127.0.0.1:9/v1").new_parser()


def _feed(parser: StreamParser, events: list[tuple[str | None, dict[str, Any]]]) -> None:
    for name, obj in events:
        parser.on_event(SSEEvent(name, json.dumps(obj), 0))


def _chat(text: str, completion: int) -> StreamParser:
    parser = _parser("openai_compatible")
    usage = {"prompt_tokens": 9, "completion_tokens": completion}
    usage["completion_tokens_details"] = {"reasoning_tokens": 0}
    _feed(
        parser,
        [
            (None, {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}),
            (None, {"id": "c", "choices": [], "usage": usage}),
        ],
    )
    return parser


def test_a_short_answer_holding_unreported_reasoning_is_unaccounted() -> None:
    # 6 bytes hold at most 6 tokens; 42 counted is hidden output reported as nothing.
    parser = _chat("Paris.", 42)
    assert parser.streamed_output_tokens(1) is None
    assert parser.usage.output_count_unaccounted is True
    assert "at most 14" in (parser.usage.streamed_output_null_reason or "")


def test_a_few_special_tokens_beyond_the_text_are_accounted() -> None:
    parser = _chat("Paris.", 6 + UNSTREAMED_SPECIAL_TOKENS)
    assert parser.streamed_output_tokens(1) == 6 + UNSTREAMED_SPECIAL_TOKENS
    assert parser.usage.output_count_unaccounted is False


def test_a_hosted_tools_call_keeps_its_unstreamed_input() -> None:
    # A Responses reply that searched the web (openai-python types/responses/
    # response_function_web_search.py): the query is generated and counted, never streamed.
    parser = _parser("openai_responses")
    text = "It is sunny in Paris."  # 21 bytes
    count = 21 + UNSTREAMED_SPECIAL_TOKENS + UNSTREAMED_TOOL_CALL_TOKENS // 2
    _feed(
        parser,
        [
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"},
                },
            ),
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "output_index": 1, "delta": text},
            ),
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {
                        "id": "r",
                        "status": "completed",
                        "usage": {"input_tokens": 9, "output_tokens": count},
                    },
                },
            ),
        ],
    )
    assert parser.hosted_calls == 1
    assert parser.streamed_output_tokens(1) == count
