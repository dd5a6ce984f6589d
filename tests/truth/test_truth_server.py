"""The truth server over real sockets: every API shape read by the official SDKs, streaming
and not, ``/v1/models``, slots, keep-alive comments, and the truth log it writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[TruthServer, Path]]:
    log = tmp_path / "truth.jsonl"
    with TruthServer(truth_log=log, first_token_ms=5, token_interval_ms=1, tokens=4) as srv:
        yield srv, log


def _openai(srv: TruthServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="none", max_retries=0)


def test_every_api_streams_and_answers_and_the_log_keys_each_by_its_id(
    served: tuple[TruthServer, Path],
) -> None:
    srv, log = served
    with _openai(srv) as client:
        chat_text, chat_id = _openai_apis(client)
    assert chat_text == " tokens are the pieces"
    claude = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{srv.port}", api_key="x", max_retries=0
    )
    with (
        claude,
        claude.messages.stream(
            model="m", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3
    assert text == " tokens are the"

    srv.stop()  # flushes the log
    truth = read_truth_log(log)
    apis = [(t.api, t.stream, t.output_tokens) for t in truth.requests]
    assert apis == [
        ("chat", True, 4),
        ("chat", False, 4),
        ("completions", True, 2),
        ("responses", True, 4),
        ("responses", False, 2),
        ("messages", True, 3),
    ]
    first = truth.requests[0]
    assert first.id == chat_id
    assert len(first.events_ns) == 4 == len(first.events_sent_ns)
    assert first.events_ns[0] - first.t_read_ns >= 5_000_000  # never early
    assert first.events_ns == sorted(first.events_ns) and first.t_end_ns >= first.events_ns[-1]


def _openai_apis(client: openai.OpenAI) -> tuple[str, str]:
    """Every OpenAI shape through the official SDK; the streamed chat's text and id."""
    assert [m.id for m in client.models.list()] == ["labkit-truth"]

    chat = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hi there"}], stream=True
    )
    chat_id = chat.headers["x-request-id"]
    chat_text = "".join(c.choices[0].delta.content or "" for c in chat.parse() if c.choices)
    whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert whole.choices[0].message.content == chat_text
    assert whole.usage is not None and whole.usage.completion_tokens == 4

    completion = client.completions.create(model="m", prompt="a b", max_tokens=2, stream=True)
    assert "".join(c.choices[0].text for c in completion if c.choices) == " tokens are"

    deltas, final = [], None
    with client.responses.stream(model="m", input="hello") as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert "".join(deltas) == chat_text and final.usage is not None
    assert final.usage.output_tokens == 4
    plain = client.responses.create(model="m", input="hello", max_output_tokens=2)
    assert plain.status == "incomplete"
    return chat_text, chat_id


def test_client_request_ids_slots_and_keepalive_comments(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    body = {"model": "m", "messages": [], "stream": True}
    with TruthServer(
        truth_log=log, first_token_ms=20, token_interval_ms=1, tokens=2, slots=1, keepalive_ms=5
    ) as srv:
        with httpx.Client(timeout=30) as http:
            first = http.post(
                srv.base_url + "/chat/completions", json=body, headers={"x-request-id": "mine-1"}
            )
        assert b": keep-alive" in first.content
    truth = read_truth_log(log)
    (only,) = truth.requests
    assert only.client_request_id == "mine-1"
    # A comment due every 5 ms of service until the first token at 20 ms: at 5, 10 and 15,
    # each sent (late or not) no earlier than it was due, and before the first token.
    assert len(only.comments_ns) == 3
    for k, sent in enumerate(only.comments_ns, 1):
        assert sent >= only.t_start_ns + k * 5_000_000
    assert only.comments_ns == sorted(only.comments_ns)
    assert all(c < only.events_ns[0] for c in only.comments_ns)


def test_slots_queue_the_requests_beyond_them(tmp_path: Path) -> None:
    import concurrent.futures

    log = tmp_path / "truth.jsonl"
    body = {"model": "m", "messages": [], "stream": True}
    with TruthServer(
        truth_log=log, first_token_ms=30, token_interval_ms=1, tokens=2, slots=1
    ) as srv:

        def post(_: int) -> int:
            with httpx.Client(timeout=30) as http:
                return http.post(srv.base_url + "/chat/completions", json=body).status_code

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert list(pool.map(post, range(2))) == [200, 200]
    a, b = sorted(read_truth_log(log).requests, key=lambda t: t.t_start_ns)
    assert b.t_start_ns >= a.t_end_ns  # served after the first left its slot
    assert b.events_ns[0] - b.t_start_ns >= 30_000_000


def test_per_request_schedules_bursts_and_prefill_are_served_as_logged(tmp_path: Path) -> None:
    log, plan = tmp_path / "truth.jsonl", tmp_path / "plan.jsonl"
    plan.write_text('{"tokens": 5, "tokens_per_event": 2}\n{"tokens": 3, "first_token_ms": 40}\n')
    body = {"model": "m", "messages": [{"role": "user", "content": "a b c d"}], "stream": True}
    with (
        TruthServer(
            truth_log=log,
            schedule_file=plan,
            first_token_ms=5,
            token_interval_ms=1,
            prefill_ms_per_token=1,
        ) as srv,
        httpx.Client(timeout=30) as http,
    ):
        for _ in range(2):
            http.post(srv.base_url + "/chat/completions", json=body).raise_for_status()
    burst, slow = read_truth_log(log).requests
    assert burst.event_tokens == [2, 2, 1] and burst.output_tokens == 5
    assert slow.event_tokens == [1, 1, 1]
    prompt = slow.prompt_tokens  # the server's count: the words of the prompt
    assert prompt > 0
    assert slow.events_ns[0] - slow.t_start_ns >= (40 + prompt) * 1_000_000
    assert burst.events_ns[0] - burst.t_start_ns >= (5 + prompt) * 1_000_000


def test_a_chunked_body_is_read_and_a_malformed_request_gets_a_400(tmp_path: Path) -> None:
    import socket

    log = tmp_path / "truth.jsonl"
    body = b'{"model": "m", "stream": true, "max_tokens": 2}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with TruthServer(truth_log=log, first_token_ms=1, token_interval_ms=1) as srv:
        with socket.create_connection(("127.0.0.1", srv.port)) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + chunked
            )
            reply = b""
            while data := sock.recv(65536):
                reply += data
        assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"0\r\n\r\n")
        with socket.create_connection(("127.0.0.1", srv.port)) as sock:
            sock.sendall(b"NONSENSE\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 400")
        assert httpx.get(f"http://127.0.0.1:{srv.port}/health").json() == {"status": "ok"}
    (only,) = read_truth_log(log).requests
    assert only.output_tokens == 2
