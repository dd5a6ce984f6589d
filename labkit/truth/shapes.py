"""The bytes the fake server sends: each API's stream events and non-streaming answers.

Four request shapes, chosen by the path: OpenAI Chat Completions (``/chat/completions``),
OpenAI Completions (``/completions``), OpenAI Responses (``/responses``) and Anthropic
Messages (``/messages``). A `Render` frames one `Reply`: the SSE payloads that open a stream,
those of each output event (text, or tool-call pieces in the API's own shape), those that
close it (stop reason, usage, the server's own timings in the shape the schedule names), a
scripted mid-stream error, and the whole answer of a non-streaming request. A plain text
event is built without a JSON encoder (the scripted words are plain ASCII).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from labkit.truth.reply import Reply, token_id
from labkit.truth.schedule import CPP_SHAPE, PROCESSING_HEADER_SHAPE
from labkit.truth.token_times import token_times_ms, token_timings, wants_token_times

__all__ = ["SHAPES", "Render", "Shape", "Timings", "error_body", "shape_for", "timing_headers"]

_CREATED = 1700000000


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def json_text(text: str) -> bytes:
    """`text` as the inside of a JSON string: as it is (the script's words need nothing), or
    escaped where it holds a quote, a backslash or a control character (a call as text)."""
    if _NEEDS_ESCAPE.search(text) is None:
        return text.encode()
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


def _sse(obj: Any, event: str | None = None) -> bytes:
    data = b"data: " + _dumps(obj) + b"\n\n"
    return data if event is None else b"event: " + event.encode() + b"\n" + data


@dataclass(frozen=True)
class Timings:
    """What the server did for one reply, in ms, as its own timings report it: the wait
    for service (`queue_ms`: the schedule's queue and a slot's), the prefill (start of
    service to token 1, less any hidden reasoning), the decode (token 1 to the last, hidden
    reasoning included: decoded, never streamed), and the time from the server's
    clock starting (past the front end) to the headers (`headers_ms`, OpenAI's
    ``openai-processing-ms``)."""

    queue_ms: float
    prefill_ms: float
    decode_ms: float
    headers_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        """Queue, prefill and decode."""
        return self.queue_ms + self.prefill_ms + self.decode_ms


def _seconds_split(t: Timings) -> dict[str, float]:
    return {
        "queue_time": t.queue_ms / 1000,
        "prompt_time": t.prefill_ms / 1000,
        "completion_time": t.decode_ms / 1000,
        "total_time": t.total_ms / 1000,
    }


def slot_timings(reply: Reply, t: Timings) -> dict[str, Any]:
    """llama.cpp's ``timings`` as llama-server b1-0c1e570 sends them: ``prompt_n`` the tokens
    prefilled (not cached), ``predicted_per_token_ms`` = ``predicted_ms`` / (``predicted_n``
    − 1), as that build divides."""
    prompt_n = reply.prompt_tokens - reply.cached_tokens
    predicted_n = reply.generated_tokens
    steps = predicted_n - 1
    return {
        "cache_n": reply.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": t.prefill_ms,
        "prompt_per_token_ms": t.prefill_ms / prompt_n if prompt_n else None,
        "prompt_per_second": 1000.0 * prompt_n / t.prefill_ms if t.prefill_ms else None,
        "predicted_n": predicted_n,
        "predicted_ms": t.decode_ms,
        "predicted_per_token_ms": t.decode_ms / steps if steps > 0 else None,
        "predicted_per_second": 1000.0 * steps / t.decode_ms if t.decode_ms and steps > 0 else None,
    }


def server_fields(reply: Reply, t: Timings) -> tuple[dict[str, Any], bool]:
    """The top-level fields a Chat stream's last chunk carries in the schedule's shape, and
    whether they ride the finish chunk (Groq, Fireworks) rather than the usage chunk."""
    kind = reply.schedule.server_timings
    if kind == "groq":
        usage = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.generated_tokens,
            **_seconds_split(t),
        }
        return {"x_groq": {"id": "req_" + reply.rid, "usage": usage}}, True
    if kind == "cerebras":
        return {"time_info": {**_seconds_split(t), "created": _CREATED}}, False
    if kind == "fireworks":
        metrics = {
            "fireworks-prompt-tokens": reply.prompt_tokens,
            "fireworks-server-time-to-first-token": t.prefill_ms / 1000,
            "fireworks-server-processing-time": t.total_ms / 1000,
        }
        return {"perf_metrics": metrics}, True
    if kind == "vllm":
        steps = reply.generated_tokens - 1
        return {
            "metrics": {
                "queue_time_ms": t.queue_ms,
                "time_to_first_token_ms": t.prefill_ms,
                "generation_time_ms": t.decode_ms,
                "mean_itl_ms": t.decode_ms / steps if steps > 0 else None,
                "tokens_per_second": 1000.0 * steps / t.decode_ms if t.decode_ms else None,
            }
        }, False
    if kind == CPP_SHAPE:
        return {"timings": slot_timings(reply, t)}, False
    return {}, False


def timing_headers(reply: Reply, t: Timings) -> dict[str, str]:
    """The response headers of the schedule's shape: TGI's timings (whole ms), Fireworks'
    time to first token (seconds), OpenAI's ``openai-processing-ms``. They leave with the
    status line, before the reply is served: TGI's and Fireworks' carry the planned values
    (their queue: the schedule's `queue_ms`, no slot's wait)."""
    kind = reply.schedule.server_timings
    if kind == "tgi":
        total = f"{t.total_ms:.0f}"
        steps = reply.generated_tokens - 1
        return {
            "x-compute-time": total,
            "x-total-time": total,
            "x-queue-time": f"{t.queue_ms:.0f}",
            "x-inference-time": f"{t.prefill_ms + t.decode_ms:.0f}",
            "x-time-per-token": f"{t.decode_ms / steps if steps > 0 else 0:.0f}",
        }
    if kind == "fireworks":
        return {"fireworks-server-time-to-first-token": f"{t.prefill_ms / 1000:.6f}"}
    if kind == PROCESSING_HEADER_SHAPE:
        return {"openai-processing-ms": f"{t.headers_ms:.0f}"}
    return {}


def error_body(reply: Reply) -> bytes:
    """The JSON body of the scripted HTTP error, in the API's error shape."""
    s = reply.schedule
    error = {"type": "scripted_error", "message": f"scripted HTTP {s.fail_status}"}
    if reply.request.api == "messages":
        return _dumps({"type": "error", "error": error})
    return _dumps({"error": error})


@dataclass(frozen=True)
class Shape:
    """One API: its name (chat, completions, responses, messages)."""

    api: str


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


class Render:
    """The payloads of one reply's stream, in order; `seq` numbers the Responses events."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.api = reply.request.api
        self.seq = 0
        self._parts: tuple[bytes, bytes] | None = None
        #: Alternatives per token asked for (None: no logprobs); llama-server's entries
        #: carry token ids.
        self.logprobs = reply.request.top_logprobs if reply.steps else None
        self._ids = reply.schedule.server_timings == CPP_SHAPE
        self._starts = [0]
        for n in reply.plan.event_tokens:
            self._starts.append(self._starts[-1] + n)
        #: Each event's server time (`labkit.truth.token_times`) where the request asked
        #: llama.cpp's shape for per-token `timings`; None: not asked.
        self.token_times = token_times_ms(reply) if wants_token_times(reply) else None
        r, m = reply.rid.encode(), reply.model.encode()
        fingerprint = reply.schedule.system_fingerprint
        self._fingerprint = fingerprint
        printed = _dumps(fingerprint) if fingerprint is not None else b"null"
        self._chunk_head = (
            b'{"id":"%s","object":"chat.completion.chunk","created":%d,"model":"%s",'
            b'"system_fingerprint":%s,"choices":' % (r, _CREATED, m, printed)
        )

    def _next(self) -> int:
        self.seq += 1
        return self.seq - 1

    # -- Chat / Completions chunks ---------------------------------------------------------

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj: dict[str, Any] = {
            "id": self.reply.rid,
            "object": "chat.completion.chunk" if self.api == "chat" else "text_completion",
            "created": _CREATED,
            "model": self.reply.model,
        }
        if self.api == "chat":
            obj["system_fingerprint"] = self._fingerprint
        obj["choices"] = choices
        obj.update(extra)
        return _sse(obj)

    # -- the stream --------------------------------------------------------------------------

    def opening(self) -> list[bytes]:
        """The SSE events sent right before the first output event: Chat's role chunk
        (it comes with the first token, as OpenAI, DeepSeek and llama.cpp send it)."""
        if self.api != "chat":
            return []
        delta = {"role": "assistant", "content": ""}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return [self._chunk([choice])]

    def head(self) -> list[bytes]:
        """The SSE events sent with the status line, before any output (Chat and
        Completions: none)."""
        reply, api = self.reply, self.api
        if api == "responses":
            response = {
                "id": reply.rid,
                "object": "response",
                "created_at": _CREATED,
                "status": "in_progress",
                "model": reply.model,
                "output": [],
            }
            out = [
                _sse(
                    {
                        "type": "response.created",
                        "sequence_number": self._next(),
                        "response": response,
                    },
                    "response.created",
                )
            ]
            if not reply.tool_calls:
                item = {
                    "id": "msg_" + reply.rid,
                    "type": "message",
                    "status": "in_progress",
                    "role": "assistant",
                    "content": [],
                }
                out.append(
                    _sse(
                        {
                            "type": "response.output_item.added",
                            "sequence_number": self._next(),
                            "output_index": 0,
                            "item": item,
                        },
                        "response.output_item.added",
                    )
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                out.append(
                    _sse(
                        {
                            "type": "response.content_part.added",
                            "sequence_number": self._next(),
                            "item_id": "msg_" + reply.rid,
                            "output_index": 0,
                            "content_index": 0,
                            "part": part,
                        },
                        "response.content_part.added",
                    )
                )
            return out
        if api == "messages":
            message: dict[str, Any] = {
                "id": reply.rid,
                "type": "message",
                "role": "assistant",
                "model": reply.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {**self._messages_input(), "output_tokens": 1},
            }
            out = [_sse({"type": "message_start", "message": message}, "message_start")]
            if not reply.tool_calls:
                out.append(
                    _sse(
                        {
                            "type": "content_block_start",
                            "index": 0,
                            "content_block": {"type": "text", "text": ""},
                        },
                        "content_block_start",
                    )
                )
            out.append(_sse({"type": "ping"}, "ping"))
            return out
        return []  # completions: the first event carries the first text

    def _text_parts(self) -> tuple[bytes, bytes]:
        """The bytes before and after a plain text event's text."""
        r = self.reply.rid.encode()
        if self.api == "chat":
            return (
                b"data: " + self._chunk_head + b'[{"index":0,"delta":{"content":"',
                b'"},"logprobs":null,"finish_reason":null}]}\n\n',
            )
        if self.api == "completions":
            return (
                b'data: {"id":"%s","object":"text_completion","created":%d,"model":"%s",'
                b'"choices":[{"index":0,"text":"' % (r, _CREATED, self.reply.model.encode()),
                b'","logprobs":null,"finish_reason":null}]}\n\n',
            )
        if self.api == "responses":
            return (
                b"event: response.output_text.delta\ndata: {"
                b'"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_%s",'
                b'"output_index":0,"content_index":0,"delta":"' % (self._next(), r),
                b'"}\n\n',
            )
        return (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"',
            b'"}}\n\n',
        )

    def text_parts(self) -> tuple[bytes, bytes]:
        """The bytes around the next plain text event's text (cached but for Responses,
        whose events are numbered)."""
        if self.api == "responses":
            return self._text_parts()
        if self._parts is None:
            self._parts = self._text_parts()
        return self._parts

    def event(self, i: int) -> bytes:
        """Output event `i`'s payload(s)."""
        reply = self.reply
        if reply.tool_calls:
            return self._tool_event(i)
        if self.token_times is not None:
            return self._timed_event(i)
        if self.logprobs is not None and self.api in ("chat", "responses"):
            return self._logprob_event(i)
        pre, post = self.text_parts()
        return pre + json_text(reply.texts[i]) + post

    # -- logprobs ----------------------------------------------------------------------

    def _entry(self, token: str, p: float) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        if self._ids:  # llama-server's entries lead with the token's id
            entry["id"] = token_id(token)
        entry["token"] = token
        if self.api == "chat":
            entry["bytes"] = list(token.encode("utf-8"))
        entry["logprob"] = math.log(p) if p > 0 else -9999.0
        return entry

    def logprob_entries(self, first: int, n: int) -> list[dict[str, Any]]:
        """The logprobs entries of output tokens `first` .. `first + n - 1`, each with the
        `top_logprobs` alternatives asked for."""
        k = self.logprobs or 0
        out = []
        for step in self.reply.steps[first : first + n]:
            entry = self._entry(step.token, step.probability)
            entry["top_logprobs"] = [self._entry(t, p) for t, p in step.candidates[:k]]
            out.append(entry)
        return out

    def _logprob_event(self, i: int) -> bytes:
        reply = self.reply
        first, n = self._starts[i], reply.plan.event_tokens[i]
        entries = self.logprob_entries(first, n)
        if self.api == "responses":
            return _sse(
                {
                    "type": "response.output_text.delta",
                    "sequence_number": self._next(),
                    "item_id": "msg_" + reply.rid,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": reply.texts[i],
                    "logprobs": entries,
                },
                "response.output_text.delta",
            )
        choice = {
            "index": 0,
            "delta": {"content": reply.texts[i]},
            "logprobs": {"content": entries},
            "finish_reason": None,
        }
        return self._chunk([choice])

    def _timed_event(self, i: int) -> bytes:
        """A Chat token chunk carrying llama.cpp's cumulative per-token `timings` (and its
        logprobs when asked)."""
        reply = self.reply
        first, n = self._starts[i], reply.plan.event_tokens[i]
        logprobs = (
            {"content": self.logprob_entries(first, n)} if self.logprobs is not None else None
        )
        choice = {
            "index": 0,
            "delta": {"content": reply.texts[i]},
            "logprobs": logprobs,
            "finish_reason": None,
        }
        assert self.token_times is not None
        timings = token_timings(reply, self.token_times, i, first + n)
        return self._chunk([choice], timings=timings)

    def _tool_event(self, i: int) -> bytes:
        reply, api = self.reply, self.api
        c = reply.call_of[i]
        call = reply.tool_calls[c]
        piece = reply.texts[i]
        opens = i == 0 or reply.call_of[i - 1] != c
        closes = i == len(reply.texts) - 1 or reply.call_of[i + 1] != c
        if api in ("chat", "completions"):
            entry: dict[str, Any] = {"index": c}
            if opens:
                entry.update(
                    id=call.id, type="function", function={"name": call.name, "arguments": piece}
                )
            else:
                entry["function"] = {"arguments": piece}
            delta = {"tool_calls": [entry]}
            return self._chunk(
                [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]
            )
        if api == "responses":
            out = b""
            item_id = f"fc_{reply.rid}_{c}"
            if opens:
                item = {
                    "id": item_id,
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": "",
                }
                out += _sse(
                    {
                        "type": "response.output_item.added",
                        "sequence_number": self._next(),
                        "output_index": c,
                        "item": item,
                    },
                    "response.output_item.added",
                )
            out += _sse(
                {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": self._next(),
                    "item_id": item_id,
                    "output_index": c,
                    "delta": piece,
                },
                "response.function_call_arguments.delta",
            )
            if closes:
                out += _sse(
                    {
                        "type": "response.function_call_arguments.done",
                        "sequence_number": self._next(),
                        "item_id": item_id,
                        "output_index": c,
                        "arguments": call.arguments,
                    },
                    "response.function_call_arguments.done",
                )
                out += _sse(
                    {
                        "type": "response.output_item.done",
                        "sequence_number": self._next(),
                        "output_index": c,
                        "item": self._function_item(c),
                    },
                    "response.output_item.done",
                )
            return out
        out = b""
        if opens:
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            out += _sse(
                {"type": "content_block_start", "index": c, "content_block": block},
                "content_block_start",
            )
        out += _sse(
            {
                "type": "content_block_delta",
                "index": c,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            },
            "content_block_delta",
        )
        if closes:
            out += _sse({"type": "content_block_stop", "index": c}, "content_block_stop")
        return out

    def _function_item(self, c: int) -> dict[str, Any]:
        call = self.reply.tool_calls[c]
        return {
            "id": f"fc_{self.reply.rid}_{c}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        }

    def end(self, t: Timings) -> list[bytes]:
        """The SSE events after the last output event (stop reason, usage, end marker)."""
        reply, api = self.reply, self.api
        s = reply.schedule
        if api in ("chat", "completions"):
            if api == "chat":
                finish = {
                    "index": 0,
                    "delta": {},
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
                fields, on_finish = server_fields(reply, t)
            else:
                finish = {
                    "index": 0,
                    "text": "",
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
                fields, on_finish = {}, False
            if not s.usage:
                on_finish = True
            out = [self._chunk([finish], **(fields if on_finish else {}))]
            if s.usage:
                out.append(
                    self._chunk([], usage=self._chat_usage(), **({} if on_finish else fields))
                )
            out.append(b"data: [DONE]\n\n")
            return out
        if api == "responses":
            out = []
            if not reply.tool_calls:
                text = reply.text
                part = {"type": "output_text", "text": text, "annotations": []}
                out += [
                    _sse(
                        {
                            "type": "response.output_text.done",
                            "sequence_number": self._next(),
                            "item_id": "msg_" + reply.rid,
                            "output_index": 0,
                            "content_index": 0,
                            "text": text,
                        },
                        "response.output_text.done",
                    ),
                    _sse(
                        {
                            "type": "response.content_part.done",
                            "sequence_number": self._next(),
                            "item_id": "msg_" + reply.rid,
                            "output_index": 0,
                            "content_index": 0,
                            "part": part,
                        },
                        "response.content_part.done",
                    ),
                    _sse(
                        {
                            "type": "response.output_item.done",
                            "sequence_number": self._next(),
                            "output_index": 0,
                            "item": self._message_item(),
                        },
                        "response.output_item.done",
                    ),
                ]
            kind = "response.incomplete" if reply.capped else "response.completed"
            out.append(
                _sse(
                    {"type": kind, "sequence_number": self._next(), "response": self._response()},
                    kind,
                )
            )
            return out
        out = []
        if not reply.tool_calls:
            out.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        usage: dict[str, Any] = {"output_tokens": reply.usage_output_tokens}
        out += [
            _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._messages_stop(), "stop_sequence": None},
                    "usage": usage,
                },
                "message_delta",
            ),
            _sse({"type": "message_stop"}, "message_stop"),
        ]
        return out

    def error(self) -> list[bytes]:
        """A scripted failure inside the stream, in the API's error event."""
        message = "scripted failure"
        if self.api in ("chat", "completions"):
            return [
                _sse({"error": {"type": "server_error", "message": message}}),
                b"data: [DONE]\n\n",
            ]
        if self.api == "responses":
            return [
                _sse(
                    {
                        "type": "error",
                        "sequence_number": self._next(),
                        "code": "server_error",
                        "message": message,
                        "param": None,
                    },
                    "error",
                )
            ]
        return [
            _sse({"type": "error", "error": {"type": "api_error", "message": message}}, "error")
        ]

    # -- counts and stop reasons ---------------------------------------------------------

    def _chat_usage(self) -> dict[str, Any]:
        reply = self.reply
        p, r = reply.prompt_tokens, reply.reasoning_tokens
        n = reply.usage_output_tokens + r
        usage: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}
        if reply.schedule.cache_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        if r:  # OpenAI Chat: hidden reasoning counted inside completion_tokens (API reference)
            usage["completion_tokens_details"] = {"reasoning_tokens": r}
        return usage

    def _messages_input(self) -> dict[str, Any]:
        """Anthropic's input counts: with a cache, `input_tokens` are the uncached ones."""
        reply = self.reply
        if not reply.schedule.cache_tokens:
            return {"input_tokens": reply.prompt_tokens}
        return {
            "input_tokens": reply.prompt_tokens - reply.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": reply.cached_tokens,
        }

    def _messages_stop(self) -> str:
        reply = self.reply
        if reply.tool_calls:
            return "tool_use"
        return "max_tokens" if reply.capped else "end_turn"

    def _message_item(self) -> dict[str, Any]:
        return {
            "id": "msg_" + self.reply.rid,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": self.reply.text, "annotations": []}],
        }

    def _response(self) -> dict[str, Any]:
        reply = self.reply
        if reply.tool_calls:
            output = [self._function_item(c) for c in range(len(reply.tool_calls))]
        else:
            output = [self._message_item()]
        p, n = reply.prompt_tokens, reply.usage_output_tokens
        return {
            "id": reply.rid,
            "object": "response",
            "created_at": _CREATED,
            "status": "incomplete" if reply.capped else "completed",
            "model": reply.model,
            "incomplete_details": {"reason": "max_output_tokens"} if reply.capped else None,
            "output": output,
            "usage": self._responses_usage(p, n),
        }

    def _responses_usage(self, p: int, n: int) -> dict[str, Any]:
        r = self.reply.reasoning_tokens
        n += r
        usage: dict[str, Any] = {"input_tokens": p, "output_tokens": n, "total_tokens": p + n}
        if self.reply.schedule.cache_tokens:
            usage["input_tokens_details"] = {"cached_tokens": self.reply.cached_tokens}
        if r:  # OpenAI Responses: hidden reasoning counted inside output_tokens (API reference)
            usage["output_tokens_details"] = {"reasoning_tokens": r}
        return usage

    def body(self, t: Timings) -> bytes:
        """The whole answer of a non-streaming request."""
        reply, api = self.reply, self.api
        if api == "responses":
            return _dumps(self._response())
        if api == "messages":
            content: list[dict[str, Any]]
            if reply.tool_calls:
                content = [
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": json.loads(c.arguments),
                    }
                    for c in reply.tool_calls
                ]
            else:
                content = [{"type": "text", "text": reply.text}]
            return _dumps(
                {
                    "id": reply.rid,
                    "type": "message",
                    "role": "assistant",
                    "model": reply.model,
                    "content": content,
                    "stop_reason": self._messages_stop(),
                    "stop_sequence": None,
                    "usage": {
                        **self._messages_input(),
                        "output_tokens": reply.usage_output_tokens,
                    },
                }
            )
        choice: dict[str, Any]
        if api == "chat":
            answer_message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.tool_calls:
                answer_message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in reply.tool_calls
                ]
            else:
                answer_message["content"] = reply.text
            logprobs = None
            if self.logprobs is not None and not reply.tool_calls:
                logprobs = {"content": self.logprob_entries(0, reply.output_tokens)}
            choice = {
                "index": 0,
                "message": answer_message,
                "logprobs": logprobs,
                "finish_reason": reply.finish_reason,
            }
            fields, _ = server_fields(reply, t)
        else:
            choice = {
                "index": 0,
                "text": reply.text,
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }
            fields = {}
        answer: dict[str, Any] = {
            "id": reply.rid,
            "object": "chat.completion" if api == "chat" else "text_completion",
            "created": _CREATED,
            "model": reply.model,
            "choices": [choice],
        }
        if reply.schedule.usage:
            answer["usage"] = self._chat_usage()
        answer.update(fields)
        return _dumps(answer)
