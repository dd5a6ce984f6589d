"""One bad reply costs one record: servers that misbehave on purpose, on 127.0.0.1.

Every case sends a real request over a real socket to `tests.support.misbehaving.MisbehavingServer`
and checks that it ends as exactly one record whose error says what arrived, with the
timings it reached; the runner cases check that the run goes on around it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.measurement.recorder import ERROR_BODY_CAP, RecordContext, StreamRecorder
from labkit.providers import Provider, provider_class
from labkit.providers.openai import OpenAIChatParser
from labkit.records import ErrorKind, RequestRecord
from labkit.runner import RunOptions, prepare_run, run_lab
from tests.providers.streams import chat, oa_chunk, oa_usage, sse
from tests.support.misbehaving import MisbehavingServer, body_reply, http_head, repeat, sse_reply

pytestmark = pytest.mark.integration


def _provider(base_url: str, kind: str = "openai_compatible", transport: str = "httpx") -> Provider:
    cls = provider_class(kind)
    settings = cls.settings_model.model_validate(
        {"id": "p", "kind": kind, "model": "m", "base_url": base_url, "transport": transport}
    )
    return cls(settings)


@pytest.fixture(params=["httpx", "lean"])
def transport(request: pytest.FixtureRequest) -> str:
    """Each reply read through httpx and through labkit's own HTTP/1.1 reader (`labkit.lean`,
    which load levels use), whose framing code is labkit's to get right."""
    return str(request.param)


def _record(
    server: MisbehavingServer, kind: str = "openai_compatible", transport: str = "httpx"
) -> RequestRecord:
    async def main() -> RequestRecord:
        base_url = server.base_url + ("/v1" if kind != "anthropic" else "")
        provider = _provider(base_url, kind, transport)
        try:
            return await StreamRecorder().record(provider, chat(), RecordContext("r", "t"))
        finally:
            await provider.aclose()

    return asyncio.run(main())


def _valid_events() -> list[bytes]:
    return [
        sse(oa_chunk(role="assistant")),
        sse(oa_chunk("Hello")),
        sse(oa_chunk(" world", finish="stop")),
        sse(oa_chunk(choices=False, usage=oa_usage(5, 2))),
        b"data: [DONE]\n\n",
    ]


def test_an_html_page_is_named(transport: str) -> None:
    page = b"<!doctype html><html><head><title>Sign in</title></head><body>x</body></html>"
    with MisbehavingServer(lambda _: body_reply(200, page, "text/html")) as server:
        rec = _record(server, transport=transport)
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert "HTML page ('Sign in')" in rec.error.message and "text/html" in rec.error.message
    assert (
        rec.error.status == 200 and rec.error.body_excerpt and "<title>" in rec.error.body_excerpt
    )
    assert rec.client.headers_ms is not None and rec.client.e2e_ms is not None


def test_a_json_completion_is_named(transport: str) -> None:
    body = json.dumps(
        {"id": "c1", "object": "chat.completion", "choices": [{"message": {"content": "hi"}}]}
    ).encode()
    with MisbehavingServer(lambda _: body_reply(200, body, "application/json")) as server:
        rec = _record(server, transport=transport)
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert "JSON completion (not streamed)" in rec.error.message
    assert "ignored `stream: true`" in rec.error.message


def test_a_redirect_is_named_not_followed(transport: str) -> None:
    reply = [http_head(307, {"location": "http://127.0.0.1:1/v2/chat", "content-length": "0"})]
    with MisbehavingServer(lambda _: reply) as server:
        rec = _record(server, transport=transport)
        assert len(server.requests) == 1  # not followed
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert rec.error.status == 307
    assert "redirect to http://127.0.0.1:1/v2/chat, not followed" in rec.error.message


def test_a_huge_error_body_is_read_only_up_to_the_cap(transport: str) -> None:
    megabytes = 64
    head = http_head(
        500, {"content-type": "text/plain", "content-length": str(megabytes * 1024 * 1024)}
    )
    with MisbehavingServer(lambda _: [head, *repeat(b"e" * 1024 * 1024, megabytes)]) as server:
        rec = _record(server, transport=transport)
        time.sleep(0.2)
        sent = server.bytes_sent
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert rec.error.status == 500 and len(rec.error.body_excerpt or "") == 500
    # The server could push only what the socket buffers took beyond labkit's cap.
    assert ERROR_BODY_CAP <= sent < 24 * 1024 * 1024, sent


def test_an_event_over_the_size_limit_is_a_protocol_error(transport: str) -> None:
    huge = b'data: {"choices":[{"delta":{"content":"' + b"a" * (9 * 1024 * 1024) + b'"}}]}\n\n'
    events = [sse(oa_chunk(role="assistant")), sse(oa_chunk("Hi")), huge]
    with MisbehavingServer(lambda _: sse_reply(events)) as server:
        rec = _record(server, transport=transport)
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert "over the limit" in rec.error.message and "8,388,608" in rec.error.message
    assert rec.client.ttft_ms is not None and rec.output_text == "Hi"  # what came first is kept


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n", "nested too deeply"),
        (b'data: {"choices": [{"delta": {"content": "\xff\xfe"}}]}\n\n', "not valid UTF-8"),
        (b"data: {not json at all\n\n", "not JSON"),
    ],
    ids=["deep-nesting", "invalid-utf8", "bad-json"],
)
def test_undecodable_events_are_protocol_errors(line: bytes, expected: str, transport: str) -> None:
    events = [sse(oa_chunk(role="assistant")), sse(oa_chunk("Hi")), line, *_valid_events()[2:]]
    with MisbehavingServer(lambda _: sse_reply(events)) as server:
        rec = _record(server, transport=transport)
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert expected in rec.error.message
    assert rec.client.ttft_ms is not None


def test_a_slow_drip_one_byte_at_a_time_is_read_right(transport: str) -> None:
    stream = b"".join(_valid_events())
    steps: list[bytes | float] = []
    for i in range(len(stream)):
        steps.append(stream[i : i + 1])
        if i % 25 == 0:
            steps.append(0.002)
    with MisbehavingServer(lambda _: [sse_reply([])[0], *steps]) as server:
        rec = _record(server, transport=transport)
    assert rec.error is None and rec.output_text == "Hello world"
    assert rec.usage.output_tokens == 2 and len(rec.client.event_offsets_ms) == 2


def test_truncation_anywhere_costs_one_record_never_an_exception(transport: str) -> None:
    stream = b"".join(_valid_events())
    cuts = sorted({*range(0, len(stream), max(1, len(stream) // 40)), len(stream) - 1})
    for cut in cuts:
        with MisbehavingServer(lambda _, c=cut: sse_reply([stream[:c]])) as server:
            rec = _record(server, transport=transport)
        if rec.error is None:  # cut inside or after the terminator: the answer was complete
            assert rec.output_text == "Hello world", cut
        else:
            assert rec.error.kind == ErrorKind.PROTOCOL, (cut, rec.error)
            assert "truncated" in rec.error.message or "empty" in rec.error.message


def test_an_impossible_port_is_a_config_error() -> None:
    data = {
        "name": "x",
        "providers": [
            {"id": "a", "kind": "openai_compatible", "model": "m", "base_url": "http://h:99999/v1"}
        ],
        "experiments": [{"kind": "single", "prompt_cache": "as_sent", "prompts": ["hi"]}],
    }
    with pytest.raises(ConfigError, match=r"providers\[0\]\.base_url: .*Port out of range"):
        parse_config(data)


def test_a_non_ascii_key_is_a_config_record_not_a_crash() -> None:
    async def main() -> RequestRecord:
        cls = provider_class("openai_compatible")
        settings = cls.settings_model.model_validate(
            {"id": "p", "kind": "openai_compatible", "model": "m", "base_url": "http://127.0.0.1:1"}
        )
        provider = cls(settings, api_key="sk-ключ")
        try:
            return await StreamRecorder().record(provider, chat(), RecordContext("r", "t"))
        finally:
            await provider.aclose()

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.kind == ErrorKind.CONFIG
    assert "ключ" not in rec.to_json_line()


def _two_provider_config(good: str, bad: str, tmp_path: Path) -> dict[str, object]:
    return {
        "name": "isolation",
        "output_dir": str(tmp_path),
        "providers": [
            {"id": "good", "kind": "openai_compatible", "model": "m", "base_url": good},
            {"id": "bad", "kind": "openai_compatible", "model": "m", "base_url": bad},
        ],
        "experiments": [
            {
                "kind": "single",
                "prompt_cache": "as_sent",
                "prompts": ["hi"],
                "repeats": 3,
                "warmup": 0,
            }
        ],
    }


def test_a_bad_reply_costs_its_record_and_the_run_goes_on(tmp_path: Path) -> None:
    page = b"<html><title>Gateway</title></html>"
    with (
        MisbehavingServer(lambda _: sse_reply(_valid_events())) as good,
        MisbehavingServer(lambda _: body_reply(200, page, "text/html")) as bad,
    ):
        cfg = parse_config(_two_provider_config(good.base_url, bad.base_url, tmp_path))
        result = asyncio.run(run_lab(prepare_run(cfg, RunOptions())))
    assert result.status == "completed"
    by = {o.id: o for o in result.outcomes}
    assert (by["good"].done, by["good"].failed) == (3, 0)
    assert (by["bad"].done, by["bad"].failed, by["bad"].status) == (3, 3, "failed")
    lines = (result.folder.path / "records.jsonl").read_text().splitlines()
    manifest = json.loads((result.folder.path / "manifest.json").read_text())
    assert manifest["records"] == len(lines) == 6 and manifest["status"] == "completed"
    assert (result.folder.path / "lab.json").is_file()


def test_labkits_own_bug_is_an_internal_record_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_on_event = OpenAIChatParser.on_event

    def buggy(self: OpenAIChatParser, event: object) -> int:
        if '"Hello"' in getattr(event, "data", ""):
            raise ZeroDivisionError("a bug in labkit")
        return real_on_event(self, event)  # type: ignore[arg-type]

    monkeypatch.setattr(OpenAIChatParser, "on_event", buggy)
    other = [sse(oa_chunk("Fine", finish="stop")), b"data: [DONE]\n\n"]
    with (
        MisbehavingServer(lambda _: sse_reply(other)) as good,
        MisbehavingServer(lambda _: sse_reply(_valid_events())) as bad,
    ):
        cfg = parse_config(_two_provider_config(good.base_url, bad.base_url, tmp_path))
        result = asyncio.run(run_lab(prepare_run(cfg, RunOptions())))
    bad_records = [r for r in result.records if r.provider == "bad"]
    assert len(bad_records) == 3
    for rec in bad_records:
        assert rec.error is not None and rec.error.kind == ErrorKind.INTERNAL
        assert "ZeroDivisionError: a bug in labkit" in rec.error.message
        assert rec.client.headers_ms is not None  # the timings it reached are kept
    assert all(r.error is None for r in result.records if r.provider == "good")


def test_a_dead_proxy_is_named_on_the_sdk_path_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from labkit.measurement.sdkpath import SDKRecorder

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name in ("HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://me:hunter2pass@127.0.0.1:{port}")

    async def main() -> RequestRecord:
        provider = _provider("http://api.remote.test/v1")
        sdk = SDKRecorder()
        try:
            return await sdk.record(provider, chat(), RecordContext("r", "t"))
        finally:
            await sdk.aclose()
            await provider.aclose()

    rec = asyncio.run(main())
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    assert f"through proxy http://127.0.0.1:{port} (from HTTP_PROXY)" in rec.error.message
    assert "hunter2pass" not in rec.to_json_line()


_CHUNKED_HEAD = http_head(
    200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}
)
_HELLO = sse(oa_chunk(role="assistant")) + sse(oa_chunk("Hello"))


@pytest.mark.parametrize(
    "reply",
    [
        [_CHUNKED_HEAD, b"%x\r\n%s\r\n" % (len(_HELLO), _HELLO), b"zz\r\nabc\r\n"],
        [_CHUNKED_HEAD, b"%x\r\n%s\r\n" % (len(_HELLO), _HELLO), b"-5\r\nabcde\r\n"],
        [_CHUNKED_HEAD, b"%x\r\n%s\r\n" % (len(_HELLO), _HELLO), b"ff\r\ndata: {"],
        [_CHUNKED_HEAD, b"%x\r\n%s" % (len(_HELLO), _HELLO), b"XX"],
        [b"HTTP/1.1 abc OK\r\ncontent-length: 0\r\n\r\n"],
        [b"hello, not http\r\n\r\n"],
        [b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n"],
        [http_head(200, {"content-type": "text/event-stream", "content-length": "5000"}), _HELLO],
        [],
    ],
    ids=[
        "bad-chunk-size",
        "negative-chunk-size",
        "truncated-chunk",
        "chunk-without-crlf",
        "bad-status-line",
        "not-http",
        "huge-header",
        "short-content-length",
        "closed-at-once",
    ],
)
def test_broken_http_framing_costs_one_record(reply: list[bytes], transport: str) -> None:
    # Framing no well-behaved server sends: each ends as one record with a protocol or
    # connection error naming it (what was read before the break kept), never an exception.
    with MisbehavingServer(lambda _: reply) as server:
        rec = _record(server, transport=transport)
    assert rec.error is not None, rec
    assert rec.error.kind in (ErrorKind.PROTOCOL, ErrorKind.CONNECTION), rec.error
    assert rec.error.message
