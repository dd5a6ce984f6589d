"""The HTTP client a provider's measured requests go through: httpx's, minus per-request work.

A measured request is built and sent hundreds of times a second in a load level. httpx's
client parses the base URL and the path again for every request, and sends each through its
auth, redirect and cookie layers, which labkit configures empty; on the lean transport that
was about a tenth of a request's CPU. `MeasuredClient` keeps httpx's behaviour and cuts only
that: the merged URL of each path is kept, and on the lean transport a streamed `send` goes
straight to the transport. Anything it does not cover (query parameters, cookies in the jar
or in the call, form data, auth, event hooks, redirects followed) takes httpx's own path.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import httpx
from httpx._client import USE_CLIENT_DEFAULT, ClientState, UseClientDefault
from httpx._content import ByteStream, encode_json
from httpx._transports.base import AsyncBaseTransport

__all__ = ["MeasuredClient", "chat_body_key"]

#: Paths whose merged URL a client keeps (a provider uses a handful).
URLS_KEPT = 64
#: Encoded JSON bodies a client keeps by their `chat_body_key` (a load level's prompts).
BODIES_KEPT = 64
#: The largest encoded body kept (so the kept ones stay under 4 MiB together).
BODY_BYTES_KEPT = 64 * 1024
#: Parameter values a key takes as they are: their JSON is told apart by type and value.
_SCALARS = (str, int, bool, type(None))

_log = logging.getLogger("httpx")
#: Request headers that set how its body is framed: httpx keeps a caller's own.
_FRAMING = frozenset({"content-length", "transfer-encoding"})


class MeasuredClient(httpx.AsyncClient):
    """An `httpx.AsyncClient` whose `build_request` keeps each path's merged URL and whose
    streamed `send` on a `direct_transport` skips httpx's auth, redirect and hook layers.

    `direct_transport`: the transport class whose `send` goes straight to it (the lean
    transport, which fires the trace events and raises httpx's exceptions itself); None:
    every send takes httpx's path.
    """

    def __init__(self, *, direct_transport: type[AsyncBaseTransport] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._direct = direct_transport is not None and isinstance(
            self._transport, direct_transport
        )
        self._urls: dict[str, httpx.URL] = {}
        self._urls_base: httpx.URL | None = None
        self._templates: dict[tuple[Any, ...], httpx.Headers] = {}
        self._bodies: dict[Hashable, bytes] = {}
        self._body_hits = 0
        self._body_misses = 0

    @property
    def keeps_bodies(self) -> bool:
        """Whether a body key is worth building: the kept bodies have room, or keys have
        hit as often as they missed (a level of unique prompts stops paying for keys)."""
        return len(self._bodies) < BODIES_KEPT or self._body_hits >= self._body_misses

    def build_request(  # type: ignore[override]
        self,
        method: str,
        url: httpx.URL | str,
        *,
        params: Any = None,
        cookies: Any = None,
        data: Any = None,
        files: Any = None,
        timeout: Any = USE_CLIENT_DEFAULT,
        extensions: dict[str, Any] | None = None,
        body_key: Hashable | None = None,
        **kwargs: Any,
    ) -> httpx.Request:
        """httpx's `build_request`; for a path (a string) with no query parameters, cookies
        or form data, the merged URL is the one kept for that path. `body_key`: a key that
        names the `json` body's encoding wholly (`chat_body_key`, the caller's fixed parts
        beside it): the body encoded once is sent again for the same key."""
        if (
            type(url) is not str
            or params is not None
            or cookies is not None
            or data is not None
            or files is not None
            or self.params
            or self.cookies
        ):
            return super().build_request(
                method,
                url,
                params=params,
                cookies=cookies,
                data=data,
                files=files,
                timeout=timeout,
                extensions=extensions,
                **kwargs,
            )
        if self._urls_base is not self.base_url:  # base_url set anew: the kept URLs are stale
            self._urls.clear()
            self._templates.clear()  # their Host came from the old base_url too
            self._bodies.clear()  # a caller's key may hold a part that changed with it
            self._urls_base = self.base_url
        merged = self._urls.get(url)
        if merged is None:
            merged = self._merge_url(url)
            if len(self._urls) < URLS_KEPT:
                self._urls[url] = merged
        extensions = {} if extensions is None else extensions
        if "timeout" not in extensions:
            chosen = (
                self.timeout if isinstance(timeout, UseClientDefault) else httpx.Timeout(timeout)
            )
            extensions = dict(**extensions, timeout=chosen.as_dict())
        if kwargs.keys() == {"json", "headers"} and type(kwargs["headers"]) is dict:
            request = self._json_request(
                method,
                merged,
                kwargs["json"],
                kwargs["headers"],
                extensions,
                path=url,
                body_key=body_key,
            )
            if request is not None:
                return request
        headers = self._merge_headers(kwargs.pop("headers", None))
        return httpx.Request(method, merged, headers=headers, extensions=extensions, **kwargs)

    def _json_request(
        self,
        method: str,
        url: httpx.URL,
        body: Any,
        headers: dict[str, str],
        extensions: dict[str, Any],
        *,
        path: str,
        body_key: Hashable | None = None,
    ) -> httpx.Request | None:
        """httpx's request of a JSON `body` with `headers`, its headers copied from the
        ones httpx built for the same method, URL, client and request headers (kept per
        those: a provider sends the same few), only the Content-Length its own; None where
        a header of the request's own sets the body's framing (httpx's path then).

        The URL is known by the `path` it was merged from (the kept ones are dropped with
        the base URL's), and the client's headers by their raw bytes: hashing an
        `httpx.URL` writes it out again, and the decoded headers are a copy each request.
        A body with a `body_key` is encoded once (httpx's own encoding, kept by the key)."""
        key = (method, path, tuple(self._headers.raw), tuple(headers.items()))
        template = self._templates.get(key)
        if template is None:
            if any(name.lower() in _FRAMING for name in headers):
                return None
            template = httpx.Request(
                method, url, headers=self._merge_headers(headers), json={}
            ).headers
            if len(self._templates) < URLS_KEPT:
                self._templates[key] = template
        content = None if body_key is None else self._bodies.get(body_key)
        if content is None:
            _, stream = encode_json(body)  # httpx's own encoding of `json=`
            content = b"".join(stream)
            if body_key is not None:
                self._body_misses += 1
                if len(self._bodies) < BODIES_KEPT and len(content) <= BODY_BYTES_KEPT:
                    self._bodies[body_key] = content
        else:
            self._body_hits += 1
        request = httpx.Request(
            method, url, headers=template, stream=ByteStream(content), extensions=extensions
        )
        request.headers["Content-Length"] = str(len(content))
        request._content = content  # what httpx's read() of a body it encoded keeps
        return request

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = USE_CLIENT_DEFAULT,
        follow_redirects: Any = USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """httpx's `send`; a streamed request on the direct transport, with no auth, event
        hooks or redirects to follow, is handed to the transport at once (what httpx's
        layers would do for it, without them: the timeout set, cookies kept, the log line)."""
        if (
            not self._direct
            or not stream
            or auth is not USE_CLIENT_DEFAULT
            or follow_redirects is not USE_CLIENT_DEFAULT
            or self.follow_redirects
            or self._auth is not None
            or self._event_hooks["request"]
            or self._event_hooks["response"]
            or self._mounts
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        if self._state == ClientState.CLOSED:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        self._state = ClientState.OPENED
        self._set_timeout(request)
        response = await self._transport.handle_async_request(request)
        response.request = request
        if "set-cookie" in response.headers:
            self.cookies.extract_cookies(response)
        response.default_encoding = self._default_encoding
        if _log.isEnabledFor(logging.INFO):
            _log.info(
                'HTTP Request: %s %s "%s %d %s"',
                request.method,
                request.url,
                response.http_version,
                response.status_code,
                response.reason_phrase,
            )
        return response


def chat_body_key(
    messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> tuple[Any, ...] | None:
    """A hashable key that tells apart every encoding of chat `messages` and `params`
    (each in its order): each message's string names and values, each parameter's name,
    type and value (``1``, ``1.0`` and ``True`` apart; a float by its ``repr``, so
    ``-0.0`` is not ``0.0``). None where a value is not of those (structured content, a
    list of stops, a subclass): such a body is encoded each time."""
    turns = []
    for message in messages:
        for name, value in message.items():
            if type(name) is not str or type(value) is not str:
                return None
        turns.append(tuple(message.items()))
    items = []
    for name, value in params.items():
        if type(name) is not str:
            return None
        kind = type(value)
        if kind is float:
            value = repr(value)
        elif kind not in _SCALARS:
            return None
        items.append((name, kind, value))
    return (tuple(turns), tuple(items))
