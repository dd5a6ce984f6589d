"""The measured client builds and sends what httpx's own client would, with less per request.

`MeasuredClient.build_request` is compared with `httpx.AsyncClient.build_request` on the same
arguments (URL, headers in order, body, extensions); its streamed `send` on the lean
transport is run against a real server on 127.0.0.1 and compared with httpx's path (status,
headers, body, a cookie kept and sent back), and falls back to httpx's path wherever a
layer it skips has work to do (an event hook, auth).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from labkit.wire.client import URLS_KEPT, MeasuredClient
from labkit.wire.lean import LeanTransport

pytestmark = pytest.mark.integration  # the send tests use real sockets

BASE = "http://127.0.0.1:9/interval_ms=2/v1"
BODY = {"model": "m", "messages": [{"role": "user", "content": "héllo"}], "stream": True}


def _pair(**kwargs: Any) -> tuple[httpx.AsyncClient, MeasuredClient]:
    options: dict[str, Any] = {"base_url": BASE, "headers": {"accept-encoding": "identity"}}
    options.update(kwargs)
    return httpx.AsyncClient(**options), MeasuredClient(**options)


def _same(a: httpx.Request, b: httpx.Request) -> None:
    assert (a.method, a.url, a.headers.raw, a.extensions) == (
        b.method,
        b.url,
        b.headers.raw,
        b.extensions,
    )
    assert a.read() == b.read()


@pytest.mark.parametrize(
    "args",
    [
        {"json": BODY, "headers": {"authorization": "Bearer k", "x-a": "1"}},
        {"json": BODY},
        {"content": b'{"a": 1}', "headers": {"content-type": "application/json"}},
        {"json": BODY, "timeout": 3.0},
        {"json": BODY, "extensions": {"timeout": {"read": 1.0}}},
        {"json": BODY, "headers": {"Content-Type": "application/x-ndjson"}},
        {"json": BODY, "headers": {"content-length": "5"}},  # httpx's own path
        {"json": BODY, "headers": {"Transfer-Encoding": "chunked"}},  # httpx's own path
        {"json": [1, "é", None], "headers": {}},
        {"params": {"q": "1"}},  # httpx's own path
        {"cookies": {"c": "1"}},  # httpx's own path
    ],
)
def test_build_request_is_httpx_s(args: dict[str, Any]) -> None:
    plain, measured = _pair()
    for path in ("/chat/completions", "chat/completions", "https://other.example/v1/x"):
        _same(
            plain.build_request("POST", path, **args), measured.build_request("POST", path, **args)
        )


def test_a_json_request_s_kept_headers_follow_the_body_and_the_client() -> None:
    """The headers kept for a JSON request (`MeasuredClient._json_request`) carry each body's
    own length, change with the client's headers, and share nothing between requests."""
    plain, measured = _pair()
    for body in (BODY, {"short": 1}, {**BODY, "max_tokens": 10_000}):
        args: dict[str, Any] = {"json": body, "headers": {"authorization": "Bearer k"}}
        a = plain.build_request("POST", "/chat/completions", **args)
        b = measured.build_request("POST", "/chat/completions", **args)
        _same(a, b)
    for client in (plain, measured):
        client.headers["x-added"] = "later"  # in place, after a template was kept
    args = {"json": BODY, "headers": {"authorization": "Bearer k"}}
    _same(
        plain.build_request("POST", "/chat/completions", **args),
        measured.build_request("POST", "/chat/completions", **args),
    )
    first = measured.build_request("POST", "/chat/completions", **args)
    first.headers["connection"] = "close"
    first.extensions["trace"] = "t"
    second = measured.build_request("POST", "/chat/completions", **args)
    assert "trace" not in second.extensions
    assert second.headers["connection"] == "keep-alive"
    with pytest.raises(ValueError, match="JSON compliant"):
        measured.build_request("POST", "/x", json={"f": float("nan")}, headers={})


def test_a_path_s_url_is_kept_and_renewed_with_the_base_url() -> None:
    _, client = _pair()
    first = client.build_request("POST", "/chat/completions", json=BODY)
    kept = client._urls["/chat/completions"]
    again = client.build_request("POST", "/chat/completions", json=BODY)
    assert client._urls["/chat/completions"] is kept
    assert first.url == again.url == kept
    client.base_url = "http://127.0.0.1:10/v2"
    moved = client.build_request("POST", "/chat/completions", json=BODY)
    assert str(moved.url) == "http://127.0.0.1:10/v2/chat/completions"
    for i in range(URLS_KEPT + 5):  # bounded: a client asked for many paths keeps a few
        client.build_request("GET", f"/p{i}")
    assert len(client._urls) == URLS_KEPT


def test_cookies_in_the_jar_take_httpx_s_path() -> None:
    plain, measured = _pair()
    plain.cookies.set("session", "abc")
    measured.cookies.set("session", "abc")
    a = plain.build_request("POST", "/chat/completions", json=BODY)
    b = measured.build_request("POST", "/chat/completions", json=BODY)
    _same(a, b)
    assert b.headers["cookie"] == "session=abc"


async def _serve(replies: list[bytes]) -> tuple[asyncio.Server, int, list[bytes]]:
    """A server on 127.0.0.1 that answers each request with the next of `replies`."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while replies:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(replies.pop(0))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], heads


_STREAM = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Set-Cookie: affinity=n1; Path=/\r\nX-Request-Id: r1\r\n\r\n"
    b'f\r\ndata: {"a":1}\n\n\r\n0\r\n\r\n'
)


async def _exchange(client: httpx.AsyncClient, port: int) -> tuple[int, list[Any], bytes]:
    client.base_url = f"http://127.0.0.1:{port}/v1"
    request = client.build_request("POST", "/chat/completions", json=BODY)
    response = await client.send(request, stream=True)
    try:
        body = b"".join([chunk async for chunk in response.aiter_raw()])
    finally:
        await response.aclose()
    return response.status_code, response.headers.multi_items(), body


def test_a_streamed_send_on_the_lean_transport_answers_as_httpx_s_path() -> None:
    async def main() -> None:
        got = []
        for direct in (LeanTransport, None):
            server, port, heads = await _serve([_STREAM, _STREAM])
            async with server:
                client = MeasuredClient(
                    direct_transport=direct, base_url=BASE, transport=LeanTransport()
                )
                first = await _exchange(client, port)
                second = await _exchange(client, port)
                await client.aclose()
            # The server's cookie was kept and sent back with the next request.
            assert b"cookie: affinity=n1" not in heads[0].lower()
            assert b"cookie: affinity=n1" in heads[1].lower()
            got.append((first, second, client.cookies.get("affinity")))
        assert got[0] == got[1]
        assert got[0][0][0] == 200 and got[0][0][2] == b'data: {"a":1}\n\n'

    asyncio.run(main())


def test_a_send_with_a_hook_or_auth_takes_httpx_s_path() -> None:
    async def main() -> None:
        seen: list[str] = []

        async def hook(response: httpx.Response) -> None:
            seen.append(response.headers["x-request-id"])

        server, port, heads = await _serve([_STREAM, _STREAM])
        async with server:
            client = MeasuredClient(
                direct_transport=LeanTransport,
                base_url=BASE,
                transport=LeanTransport(),
                event_hooks={"response": [hook]},
            )
            await _exchange(client, port)
            client.event_hooks = {}
            client.auth = ("user", "secret")
            await _exchange(client, port)
            await client.aclose()
        assert seen == ["r1"]
        assert b"authorization: basic" in heads[1].lower()

    asyncio.run(main())


def test_a_closed_client_refuses_to_send() -> None:
    async def main() -> None:
        client = MeasuredClient(
            direct_transport=LeanTransport, base_url=BASE, transport=LeanTransport()
        )
        await client.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await client.send(client.build_request("GET", "/x"), stream=True)

    asyncio.run(main())


def test_a_json_request_s_headers_follow_a_new_base_url_and_client_headers() -> None:
    plain, measured = _pair()
    for client in (plain, measured):
        client.build_request("POST", "/chat/completions", json=BODY, headers={"a": "1"})
        client.base_url = "http://127.0.0.2:10/v2"
    after = [
        c.build_request("POST", "/chat/completions", json=BODY, headers={"a": "1"})
        for c in (plain, measured)
    ]
    assert after[1].headers["host"] == "127.0.0.2:10"
    assert after[1].headers.raw == after[0].headers.raw
    assert after[1].url == after[0].url
    for client in (plain, measured):
        client.headers["X-Later"] = "yes"  # in place: the kept headers are another key
    later = [
        c.build_request("POST", "/chat/completions", json=BODY, headers={"a": "1"})
        for c in (plain, measured)
    ]
    assert later[1].headers["x-later"] == "yes"
    assert later[1].headers.raw == later[0].headers.raw
