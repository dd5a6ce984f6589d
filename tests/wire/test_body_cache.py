"""A chat body encoded once and sent again (`MeasuredClient`'s kept bodies, keyed by
`chat_body_key`) is the body httpx encodes afresh, byte for byte, whatever the messages and
parameters; a body that differs in any way never takes another's kept bytes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.providers.base import ChatRequest
from labkit.wire.client import BODIES_KEPT, BODY_BYTES_KEPT, MeasuredClient, chat_body_key
from tests.providers.streams import make_provider

pytestmark = pytest.mark.unit

BASE = "http://127.0.0.1:9/v1"
#: httpx's own client, as the provider's is set up (its requests built, never sent).
_PLAIN = httpx.AsyncClient(base_url=BASE, headers={"accept-encoding": "identity"})

_text = st.text(max_size=12)
_messages = st.lists(
    st.dictionaries(st.sampled_from(["role", "content", "name"]), _text, min_size=1),
    min_size=1,
    max_size=3,
)
_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from([0.0, -0.0, 1.0, 1, True, "1"]),
    _text,
    st.lists(_text, max_size=2),  # a list of stops: never keyed
)
_params = st.dictionaries(
    st.sampled_from(["max_tokens", "temperature", "top_p", "seed", "stop", "user", "stream"]),
    _value,
    max_size=4,
)


def _fresh(provider: Any, request: ChatRequest, params: dict[str, Any]) -> httpx.Request:
    """What httpx's own client builds of the provider's body for the same request."""
    body = {
        "model": provider.model,
        "messages": request.messages,
        **params,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return _PLAIN.build_request(
        "POST", provider.chat_path, json=body, headers=provider.request_headers()
    )


def _wire(request: httpx.Request) -> tuple[Any, ...]:
    return (request.method, request.url, request.headers.raw, request.read())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_messages, _params), min_size=1, max_size=6))
def test_kept_bodies_are_httpx_s_encoding_and_never_another_s(
    shapes: list[tuple[list[dict[str, str]], dict[str, Any]]],
) -> None:
    """Each shape, sent twice and in turn with the others (the second time from the kept
    bytes where it was keyed), goes out as httpx encodes it afresh."""
    provider = make_provider("openai", api_key="k", base_url=BASE)
    assert isinstance(provider.client, MeasuredClient)
    for _ in range(2):
        for messages, params in shapes:
            request = ChatRequest(messages, params)
            got = provider.build_request(request, params)
            assert _wire(got) == _wire(_fresh(provider, request, params))


def test_values_that_compare_equal_keep_their_own_encoding() -> None:
    """1, 1.0, True, "1", 0.0 and -0.0 compare or hash alike in Python but encode apart."""
    provider = make_provider("openai", api_key="k", base_url=BASE)
    messages = [{"role": "user", "content": "hi"}]
    bodies = []
    for value in (1, 1.0, True, "1", 0.0, -0.0, 1, -0.0):
        params = {"temperature": value}
        got = provider.build_request(ChatRequest(messages, params), params)
        assert got.read() == _fresh(provider, ChatRequest(messages, params), params).read()
        bodies.append(got.read())
    assert len(set(bodies)) == 6
    assert provider.client._body_hits == 2  # type: ignore[attr-defined]


def test_only_plain_values_are_keyed() -> None:
    """A key names strings, exact ints, bools, None and floats; anything else (a list, an
    int subclass, structured content, a name not a string) leaves the body unkeyed."""
    user = [{"role": "user", "content": "hi"}]
    assert chat_body_key(user, {"a": 1, "b": 0.5, "c": None, "d": False, "e": "x"}) is not None
    assert chat_body_key(user, {"stop": ["\n"]}) is None
    assert chat_body_key(user, {"n": _Int(1)}) is None
    assert chat_body_key([{"role": "user", "content": [{"type": "text"}]}], {}) is None  # type: ignore[dict-item]
    assert chat_body_key([{1: "x"}], {}) is None  # type: ignore[dict-item]
    assert chat_body_key(user, {1: "x"}) is None  # type: ignore[dict-item]


class _Int(int):
    """An int subclass (an IntEnum's kind): json may write it its own way."""


def test_unique_prompts_fill_the_kept_bodies_then_stop_keying() -> None:
    """A level of prompts all different keeps at most BODIES_KEPT bodies, then builds no
    more keys; a body over BODY_BYTES_KEPT is never kept. Every request is still right."""
    provider = make_provider("openai", api_key="k", base_url=BASE)
    client = provider.client
    assert isinstance(client, MeasuredClient)
    for i in range(BODIES_KEPT + 10):
        request = ChatRequest([{"role": "user", "content": f"prompt {i}"}])
        got = provider.build_request(request, {})
        assert got.read() == _fresh(provider, request, {}).read()
    assert len(client._bodies) == BODIES_KEPT
    assert not client.keeps_bodies
    big = make_provider("openai", api_key="k", base_url=BASE)
    request = ChatRequest([{"role": "user", "content": "x" * BODY_BYTES_KEPT}])
    for _ in range(2):
        assert big.build_request(request, {}).read() == _fresh(big, request, {}).read()
    assert big.client._bodies == {}  # type: ignore[attr-defined]


def test_extra_body_is_never_keyed() -> None:
    """A provider with an `extra_body` encodes each body (the key holds no part of it)."""
    provider = make_provider("openai", api_key="k", base_url=BASE, extra_body={"top_k": 5})
    request = ChatRequest([{"role": "user", "content": "hi"}])
    for _ in range(2):
        body = provider.build_request(request, {}).read()
        assert b'"top_k":5' in body
    assert provider.client._bodies == {}  # type: ignore[attr-defined]
