"""The fixture corpus: real providers' stream shapes, one ``<name>.sse`` (the bytes as the
server sends them; ``<name>.ndjson`` for a newline-delimited JSON stream such as Ollama's) and
one ``<name>.json`` sidecar per shape.

The sidecar says which provider ``kind`` reads the stream, the ``shape``, the ``source``
where that shape is documented (API reference page or SDK type/test file), optional
response ``headers``, the ``expect``\\ ed record facts, and, where the SDK path sees the
stream differently (the SDK itself cannot represent the shape), ``sdk``: the facts that
differ there and a ``note`` saying why.

Facts in ``expect`` (only the keys present are checked): ``output_text``; ``ttft``
(``text``, ``output`` or null: the class of the first output event); ``output_events``;
``input_tokens``, ``output_tokens``, ``cached_input_tokens``, ``reasoning_tokens``,
``streamed_output_tokens``, ``output_tokens_source``; ``stop_reason``, ``stop_reason_raw``;
``response_id``, ``system_fingerprint``; ``prefill_ms``, ``prefill_tokens``, ``decode_ms``,
``decode_ms_per_token``, ``load_ms``, ``provider_cached_tokens``, ``queue_ms``,
``server_ttft_ms``, ``server_total_ms``, ``inference_ms``, ``server_output_tokens_per_s``,
``processing_ms``, ``keepalive_comments``, ``keepalive_gateway``, ``timings_source``
(provider timings; numbers
compared to a relative 1e-9, as seconds become milliseconds); ``tool_calls`` (the record's
calls, each ``{id, name, arguments}`` with the arguments' complete text, or null: none);
``decode_derived`` (whether ``client.decode_ms_per_token`` is a number),
``decode_null_reason``; ``error_kind`` (null: no error) and ``error_contains`` (a piece of
the error message; null: not checked).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).parent


@dataclass(frozen=True)
class Fixture:
    """One corpus shape: its bytes and what a record of it must say."""

    name: str
    kind: str
    shape: str
    source: str
    body: bytes
    expect: dict[str, Any]
    sdk: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: ``sse`` or ``ndjson``: how the body is framed (from the file's suffix).
    framing: str = "sse"

    @property
    def content_type(self) -> str:
        """The content type a server sends this body with."""
        return "application/x-ndjson" if self.framing == "ndjson" else "text/event-stream"

    def sdk_expect(self) -> dict[str, Any]:
        """The facts the SDK path must show: `expect` with the `sdk` differences applied."""
        return {**self.expect, **{k: v for k, v in self.sdk.items() if k != "note"}}

    def events(self) -> list[bytes]:
        """The body cut at each event boundary (the blank line; for NDJSON the line end),
        separators kept."""
        separator = b"\n" if self.framing == "ndjson" else b"\n\n"
        parts = self.body.split(separator)
        out = [p + separator for p in parts[:-1]]
        return out + ([parts[-1]] if parts[-1] else [])


def load_corpus() -> list[Fixture]:
    """Every fixture, sorted by name."""
    fixtures = []
    bodies = sorted([*CORPUS.glob("*.sse"), *CORPUS.glob("*.ndjson")], key=lambda p: p.stem)
    for sse_path in bodies:
        side = json.loads(sse_path.with_suffix(".json").read_text())
        fixtures.append(
            Fixture(
                name=sse_path.stem,
                kind=side["kind"],
                shape=side["shape"],
                source=side["source"],
                body=sse_path.read_bytes(),
                expect=side["expect"],
                sdk=side.get("sdk", {}),
                headers=side.get("headers", {}),
                framing=sse_path.suffix.lstrip("."),
            )
        )
    return fixtures


def tool_calls_of(record: Any) -> list[dict[str, str]] | None:
    """A record's tool calls as the sidecar writes them (None: it made none): `source` only
    where it is not `provider` (every corpus stream sends its calls as call objects)."""
    if record.tool_calls is None:
        return None
    return [
        call.model_dump(exclude={"source"} if call.source == "provider" else set())
        for call in record.tool_calls
    ]


def check_record(record: Any, expect: dict[str, Any]) -> None:
    """Assert every fact in `expect` on a `RequestRecord`."""
    usage, pt, client = record.usage, record.provider_timings, record.client
    facts = {
        "output_text": lambda: record.output_text,
        "output_events": lambda: len(client.event_offsets_ms),
        "input_tokens": lambda: usage.input_tokens,
        "output_tokens": lambda: usage.output_tokens,
        "cached_input_tokens": lambda: usage.cached_input_tokens,
        "reasoning_tokens": lambda: usage.reasoning_tokens,
        "streamed_output_tokens": lambda: usage.streamed_output_tokens,
        "output_tokens_source": lambda: usage.output_tokens_source,
        "stop_reason": lambda: record.stop_reason and record.stop_reason.value,
        "stop_reason_raw": lambda: record.stop_reason_raw,
        "response_id": lambda: record.response_id,
        "system_fingerprint": lambda: record.system_fingerprint,
        "prefill_ms": lambda: pt.prefill_ms,
        "prefill_tokens": lambda: pt.prefill_tokens,
        "decode_ms": lambda: pt.decode_ms,
        "decode_ms_per_token": lambda: pt.decode_ms_per_token,
        "load_ms": lambda: pt.load_ms,
        "provider_cached_tokens": lambda: pt.cached_tokens,
        "queue_ms": lambda: pt.queue_ms,
        "server_ttft_ms": lambda: pt.server_ttft_ms,
        "server_total_ms": lambda: pt.server_total_ms,
        "inference_ms": lambda: pt.inference_ms,
        "server_output_tokens_per_s": lambda: pt.server_output_tokens_per_s,
        "processing_ms": lambda: pt.processing_ms,
        "keepalive_comments": lambda: pt.keepalive_comments,
        "keepalive_gateway": lambda: pt.keepalive_gateway,
        "timings_source": lambda: pt.source,
        "error_kind": lambda: record.error and record.error.kind.value,
        "tool_calls": lambda: tool_calls_of(record),
        "decode_derived": lambda: client.decode_ms_per_token is not None,
        "decode_null_reason": lambda: client.decode_null_reason,
    }
    for key, want in expect.items():
        if key in facts:
            got = facts[key]()
            if type(want) is float and type(got) is float:
                assert math.isclose(got, want, rel_tol=1e-9), f"{key}: {got!r} != {want!r}"
            else:
                assert got == want, f"{key}: {got!r} != {want!r}"
    if expect.get("error_contains") is not None:
        assert record.error is not None and expect["error_contains"] in record.error.message, (
            record.error
        )
    # Every record, whatever its shape or failure: a null decode always says why (issue 44).
    assert (client.decode_ms_per_token is None) == (client.decode_null_reason is not None), (
        client.decode_ms_per_token,
        client.decode_null_reason,
    )
    ttft = expect.get("ttft", "unchecked")
    if ttft is None:
        assert client.ttft_ms is None
    elif ttft == "text":
        assert client.ttft_ms is not None and client.ttft_text_ms == client.ttft_ms
    elif ttft == "output":
        assert client.ttft_ms is not None
        assert client.ttft_text_ms is None or client.ttft_text_ms >= client.ttft_ms
