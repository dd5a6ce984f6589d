"""The bytes the truth server sends: each API's stream events and non-streaming answers.

Four request shapes, chosen by the path: OpenAI Chat Completions (``/chat/completions``),
OpenAI Completions (``/completions``), OpenAI Responses (``/responses``) and Anthropic
Messages (``/messages``). For each, `Shape` gives the SSE payloads that open a stream, the
one of each output event, those that close it (usage included), and the whole answer of a
non-streaming request. Payloads are bytes built without a JSON encoder on the hot path: the
token texts are plain ASCII words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["SHAPES", "Shape", "shape_for"]

_CREATED = 1700000000


@dataclass(frozen=True)
class Shape:
    """One API's wire shapes for a response `rid` from `model`."""

    api: str

    def head(self, rid: str, model: str, prompt_tokens: int) -> list[bytes]:
        """The SSE events sent with the status line, before any output."""
        r, m = rid.encode(), model.encode()
        if self.api == "chat":
            return [
                b'data: {"id":"%s","object":"chat.completion.chunk","created":%d,"model":"%s",'
                b'"system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant",'
                b'"content":""},"logprobs":null,"finish_reason":null}]}\n\n' % (r, _CREATED, m)
            ]
        if self.api == "responses":
            resp = (
                b'{"id":"%s","object":"response","created_at":%d,"status":"in_progress",'
                b'"model":"%s","output":[]}' % (r, _CREATED, m)
            )
            item = b'{"id":"msg_%s","type":"message","status":"in_progress","role":"assistant",'
            item = item % r + b'"content":[]}'
            return [
                b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
                b'"response":%s}\n\n' % resp,
                b"event: response.output_item.added\ndata: {"
                b'"type":"response.output_item.added","sequence_number":1,"output_index":0,'
                b'"item":%s}\n\n' % item,
                b"event: response.content_part.added\ndata: {"
                b'"type":"response.content_part.added","sequence_number":2,"item_id":"msg_%s",'
                b'"output_index":0,"content_index":0,"part":{"type":"output_text","text":"",'
                b'"annotations":[]}}\n\n' % r,
            ]
        if self.api == "messages":
            return [
                b'event: message_start\ndata: {"type":"message_start","message":{"id":"%s",'
                b'"type":"message","role":"assistant","model":"%s","content":[],'
                b'"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,'
                b'"output_tokens":1}}}\n\n' % (r, m, prompt_tokens),
                b"event: content_block_start\ndata: {"
                b'"type":"content_block_start","index":0,"content_block":{"type":"text",'
                b'"text":""}}\n\n',
                b'event: ping\ndata: {"type":"ping"}\n\n',
            ]
        return []  # completions: the first event carries the first text

    def event_parts(self, rid: str, model: str, seq: int) -> tuple[bytes, bytes]:
        """The bytes before and after an output event's text."""
        r, m = rid.encode(), model.encode()
        if self.api == "chat":
            return (
                b'data: {"id":"%s","object":"chat.completion.chunk","created":%d,"model":"%s",'
                b'"system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"'
                % (r, _CREATED, m),
                b'"},"logprobs":null,"finish_reason":null}]}\n\n',
            )
        if self.api == "completions":
            return (
                b'data: {"id":"%s","object":"text_completion","created":%d,"model":"%s",'
                b'"choices":[{"index":0,"text":"' % (r, _CREATED, m),
                b'","logprobs":null,"finish_reason":null}]}\n\n',
            )
        if self.api == "responses":
            return (
                b"event: response.output_text.delta\ndata: {"
                b'"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_%s",'
                b'"output_index":0,"content_index":0,"delta":"' % (seq, r),
                b'"}\n\n',
            )
        return (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"',
            b'"}}\n\n',
        )

    def end(
        self,
        rid: str,
        model: str,
        text: str,
        prompt_tokens: int,
        output_tokens: int,
        capped: bool,
        seq: int,
    ) -> list[bytes]:
        """The SSE events after the last output event (stop reason, usage, end marker)."""
        r, m, t = rid.encode(), model.encode(), text.encode()
        p, n = prompt_tokens, output_tokens
        usage = b'"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d' % (p, n, p + n)
        if self.api in ("chat", "completions"):
            reason = b"length" if capped else b"stop"
            if self.api == "chat":
                prefix = (
                    b'data: {"id":"%s","object":"chat.completion.chunk","created":%d,'
                    b'"model":"%s","system_fingerprint":null,"choices":' % (r, _CREATED, m)
                )
                finish = b'[{"index":0,"delta":{},"logprobs":null,"finish_reason":"%s"}]}\n\n'
            else:
                prefix = (
                    b'data: {"id":"%s","object":"text_completion","created":%d,"model":"%s",'
                    b'"choices":' % (r, _CREATED, m)
                )
                finish = b'[{"index":0,"text":"","logprobs":null,"finish_reason":"%s"}]}\n\n'
            return [
                prefix + finish % reason,
                prefix + b'[],"usage":{%s}}\n\n' % usage,
                b"data: [DONE]\n\n",
            ]
        if self.api == "responses":
            status = b"incomplete" if capped else b"completed"
            details = b'{"reason":"max_output_tokens"}' if capped else b"null"
            kind = b"response.incomplete" if capped else b"response.completed"
            part = b'{"type":"output_text","text":"%s","annotations":[]}' % t
            return [
                b'event: response.output_text.done\ndata: {"type":"response.output_text.done",'
                b'"sequence_number":%d,"item_id":"msg_%s","output_index":0,"content_index":0,'
                b'"text":"%s"}\n\n' % (seq, r, t),
                b'event: response.content_part.done\ndata: {"type":"response.content_part.done",'
                b'"sequence_number":%d,"item_id":"msg_%s","output_index":0,"content_index":0,'
                b'"part":%s}\n\n' % (seq + 1, r, part),
                b'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
                b'"sequence_number":%d,"output_index":0,"item":%s}\n\n'
                % (seq + 2, self._responses_item(r, t)),
                b'event: %s\ndata: {"type":"%s","sequence_number":%d,"response":%s}\n\n'
                % (kind, kind, seq + 3, self._responses_body(r, m, t, p, n, status, details)),
            ]
        reason = b"max_tokens" if capped else b"end_turn"
        return [
            b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
            b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"%s",'
            b'"stop_sequence":null},"usage":{"output_tokens":%d}}\n\n' % (reason, n),
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        ]

    @staticmethod
    def _responses_item(r: bytes, t: bytes) -> bytes:
        return (
            b'{"id":"msg_%s","type":"message","status":"completed","role":"assistant",'
            b'"content":[{"type":"output_text","text":"%s","annotations":[]}]}' % (r, t)
        )

    def _responses_body(
        self, r: bytes, m: bytes, t: bytes, p: int, n: int, status: bytes, details: bytes
    ) -> bytes:
        return (
            b'{"id":"%s","object":"response","created_at":%d,"status":"%s","model":"%s",'
            b'"incomplete_details":%s,"output":[%s],"usage":{"input_tokens":%d,'
            b'"output_tokens":%d,"total_tokens":%d}}'
            % (r, _CREATED, status, m, details, self._responses_item(r, t), p, n, p + n)
        )

    def body(
        self, rid: str, model: str, text: str, prompt_tokens: int, output_tokens: int, capped: bool
    ) -> bytes:
        """The whole answer of a non-streaming request."""
        p, n = prompt_tokens, output_tokens
        usage = {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}
        answer: dict[str, object]
        if self.api == "chat":
            answer = {
                "id": rid,
                "object": "chat.completion",
                "created": _CREATED,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": "length" if capped else "stop",
                    }
                ],
                "usage": usage,
            }
        elif self.api == "completions":
            answer = {
                "id": rid,
                "object": "text_completion",
                "created": _CREATED,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": "length" if capped else "stop",
                    }
                ],
                "usage": usage,
            }
        elif self.api == "responses":
            status = b"incomplete" if capped else b"completed"
            details = b'{"reason":"max_output_tokens"}' if capped else b"null"
            return self._responses_body(
                rid.encode(), model.encode(), text.encode(), p, n, status, details
            )
        else:
            answer = {
                "id": rid,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "max_tokens" if capped else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": p, "output_tokens": n},
            }
        return json.dumps(answer, separators=(",", ":")).encode()


#: The shapes by the last segment of the request's path.
SHAPES: dict[str, Shape] = {
    "/chat/completions": Shape("chat"),
    "/completions": Shape("completions"),
    "/responses": Shape("responses"),
    "/messages": Shape("messages"),
}


def shape_for(path: str) -> Shape | None:
    """The shape a POST to `path` asks for (None: no API lives there)."""
    path = path.split("?", 1)[0]
    for suffix, shape in SHAPES.items():
        if path.endswith(suffix):
            return shape
    return None
