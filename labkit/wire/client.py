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
from typing import Any

import httpx
from httpx._client import USE_CLIENT_DEFAULT, ClientState, UseClientDefault
from httpx._content import encode_json
from httpx._transports.base import AsyncBaseTransport

__all__ = ["MeasuredClient"]

#: Paths whose merged URL a client keeps (a provider uses a handful).
URLS_KEPT = 64

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
        **kwargs: Any,
    ) -> httpx.Request:
        """httpx's `build_request`; for a path (a string) with no query parameters, cookies
        or form data, the merged URL is the one kept for that path."""
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
                method, merged, kwargs["json"], kwargs["headers"], extensions, path=url
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
    ) -> httpx.Request | None:
        """httpx's request of a JSON `body` with `headers`, its headers copied from the
        ones httpx built for the same method, URL, client and request headers (kept per
        those: a provider sends the same few), only the Content-Length its own; None where
        a header of the request's own sets the body's framing (httpx's path then).

        The URL is known by the `path` it was merged from (the kept ones are dropped with
        the base URL's), and the client's headers by their raw bytes: hashing an
        `httpx.URL` writes it out again, and the decoded headers are a copy each request."""
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
        content_headers, stream = encode_json(body)  # httpx's own encoding of `json=`
        request = httpx.Request(method, url, headers=template, stream=stream, extensions=extensions)
        request.headers["Content-Length"] = content_headers["Content-Length"]
        request._content = b"".join(stream)  # what httpx's read() of a body it encoded keeps
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
