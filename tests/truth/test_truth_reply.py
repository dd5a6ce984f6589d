"""What the fake server answers, before framing: the request it reads from each API's body,
its tokenizer, and the tool calls it makes."""

from __future__ import annotations

import json

import pytest

from labkit.truth.reply import Responder, count_pieces, pieces, read_request, token_id
from labkit.truth.schedule import TruthSchedule

pytestmark = pytest.mark.unit


def test_the_tokenizer_cuts_white_space_pieces_and_keeps_special_tokens_whole() -> None:
    assert pieces("Say hi.") == ["Say", " hi."]
    assert pieces("a  b\n") == ["a", "  b", "\n"]
    assert pieces("héllo 日本") == ["h", "é", "llo", " 日", "本"]
    assert pieces("<|im_start|>user\nhi<|im_end|>") == [
        "<|im_start|>",
        "user",
        "\nhi",
        "<|im_end|>",
    ]
    assert token_id("<|im_start|>") == 1 and token_id(" hi") == token_id(" hi") >= 1000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  ",
        "Say hi.",
        " a  b\n",
        "a\x1cb\x1f",
        "a\x01b\x7f",
        "日本 語",
        "x<|im_end|>\ny",
        "a\t",
    ],
)
def test_the_fast_count_is_the_number_of_pieces(text: str) -> None:
    assert count_pieces(text) == len(pieces(text))


def test_each_api_s_body_is_read_as_its_messages_cap_and_tools() -> None:
    chat = read_request(
        "chat",
        b'{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":'
        b'[{"type":"text","text":"a b"}]},{"role":"tool","content":"r"}],"max_tokens":3,'
        b'"stream":true,"tools":[{"type":"function","function":{"name":"f"}}]}',
    )
    assert chat.messages == (("system", "be brief"), ("user", "a b"), ("tool", "r"))
    assert (chat.max_tokens, chat.stream, chat.tool_results) == (3, True, 1)
    assert chat.tools == (("f", {}),)
    messages = read_request(
        "messages",
        b'{"system":"s","messages":[{"role":"user","content":[{"type":"tool_result",'
        b'"tool_use_id":"t","content":"x"}]}],"max_tokens":5,"tools":[{"name":"g",'
        b'"input_schema":{"type":"object"}}]}',
    )
    assert messages.tool_results == 1 and messages.tools == (("g", {"type": "object"}),)
    responses = read_request(
        "responses",
        b'{"instructions":"i","input":[{"role":"user","content":"q"},'
        b'{"type":"function_call_output","call_id":"c","output":"o"}],"max_output_tokens":2}',
    )
    assert responses.messages == (("system", "i"), ("user", "q"), ("tool", "o"))
    assert responses.max_tokens == 2 and responses.tool_results == 1
    assert read_request("completions", b'{"prompt":"a b c"}').prompt_text == "a b c"
    for bad, message in [
        (b"{x", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"messages":[1]}', "messages must be"),
        (b'{"max_tokens":-1}', "max_tokens must be"),
    ]:
        with pytest.raises(ValueError, match=message):
            read_request("chat", bad)


def test_a_reply_s_tool_calls_carry_valid_json_arguments_across_its_events() -> None:
    body = {
        "messages": [{"role": "user", "content": "find it"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "parameters": {
                        "type": "object",
                        "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
                        "required": ["n", "q"],
                    },
                },
            }
        ],
    }
    request = read_request("chat", json.dumps(body).encode())
    schedule = TruthSchedule(tokens=7, tool_calls=1, parallel_tool_calls=2)
    reply = Responder("t").reply(schedule, request)
    assert reply.finish_reason == "tool_calls" and len(reply.tool_calls) == 2
    assert reply.call_of == [0, 0, 0, 0, 1, 1, 1]
    for c, call in enumerate(reply.tool_calls):
        pieces_of_call = [
            t for t, owner in zip(reply.texts, reply.call_of, strict=True) if owner == c
        ]
        assert "".join(pieces_of_call) == call.arguments
        args = json.loads(call.arguments)
        assert args["n"] == 1 and args["q"].split()[0] in ("tokens", "a", "model")
    # One tool result in the history is the session's last step: text from then on.
    body["messages"].append({"role": "tool", "content": "found"})
    again = Responder("t").reply(schedule, read_request("chat", json.dumps(body).encode()))
    assert again.tool_calls == [] and again.finish_reason == "stop"


def test_max_tokens_caps_the_reply_and_says_length() -> None:
    request = read_request("chat", b'{"max_tokens":2}')
    reply = Responder("t").reply(TruthSchedule(tokens=5), request)
    assert reply.texts == [" tokens", " are"] and reply.capped and reply.finish_reason == "length"
