"""The connections a provider's requests travel on: pools, TLS, proxies, the transport choice.

The measurement core builds them and hands them to the provider (`Provider.connections`),
which only builds requests on `client` and speaks its protocol. Here: one TLS context per
provider, the lean or httpx transport (`transport: auto|httpx|lean`), one-connection clients
for streams in flight, connections opened ahead of a level (`preconnect`) or of a request
(`connect_ahead`), a request made ready to send before its clock (`prepare_send`), a side
client for requests outside the measurement, and the SDK path's
`httpx2` client with the same timeouts, pool and proxy, and `own_request`, which bounds the
requests labkit makes of its own. Proxies: `labkit.wire.proxies`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from labkit.errors import ProviderUnavailable
from labkit.wire.client import MeasuredClient
from labkit.wire.lean import LeanTransport, lean_applies
from labkit.wire.lean.outgoing import Outgoing
from labkit.wire.lean.stamps import hold_kernel_stamps
from labkit.wire.proxies import ProxyChoice, is_loopback, proxy_for, unusable_because
from labkit.wire.setup import (
    DRY_RUN_BODY,
    DRY_RUN_URL,
    EVENT_STREAM_HEADERS,
    import_network_backends,
)

__all__ = [
    "DESCRIBE",
    "STATS_LATER",
    "TOKENIZE",
    "WARM_UP",
    "AnswerTooLarge",
    "Bound",
    "Connections",
    "DeadlinePassed",
    "TransportChoice",
    "own_request",
    "send_bounded",
]

#: `ProviderSettings.transport`: how the wire path reads HTTP.
TransportChoice = Literal["auto", "httpx", "lean"]


class Connections:
    """One provider's HTTP clients, on the wire path and the SDK path.

    `label` names the provider in messages; `timeout` holds its connect, read (and write)
    and total (pool) timeouts; `pool_size` is how many connections may be open at once
    (`concurrency`, or more for a load level); `load_level`: the requests come from a load
    level. `transport: auto` reads through the lean transport in a load level, from a
    server on this machine (a loopback base URL) and from any plain-http server (a LAN box),
    where the request path is a visible share of the time to first token and httpx stamps
    the request sent after a near server has read it.
    `client_factory` builds every client instead (the fake provider's in-process server).
    """

    def __init__(
        self,
        base_url: str,
        *,
        label: str,
        timeout: httpx.Timeout,
        transport: TransportChoice = "auto",
        pool_size: int = 1,
        load_level: bool = False,
        client_factory: Callable[[], httpx.AsyncClient] | None = None,
    ) -> None:
        self.base_url = base_url
        self.label = label
        self.timeout = timeout
        #: Connections the HTTP client may hold: a smaller pool would make requests wait
        #: for a connection after t_start.
        self.pool_size = pool_size
        self.lean = self._wants_lean(transport, load_level)
        #: The provider's cheap request that opens a connection (`Provider.warm_up_request`),
        #: lent by the provider so that `preconnect` can warm httpx connections.
        self.warm_up: Callable[[], httpx.Request | None] = lambda: None
        self._lean_transport: LeanTransport | None = None
        self._client_factory = client_factory
        # One TLS context for every client: building one loads the CA bundle (tens of ms).
        self._tls = httpx.create_ssl_context()
        self.client = self._make_client()
        self._idle_shards: list[httpx.AsyncClient] = []
        self._shards: list[httpx.AsyncClient] = []
        #: The proxy the measured requests go through (None: direct, or in-process), for
        #: errors that name it (`ProxyChoice.describe`, never its credentials).
        self.proxy = None if client_factory is not None else proxy_for(base_url)

    def _wants_lean(self, transport: TransportChoice, load_level: bool) -> bool:
        if transport == "httpx":
            return False
        url = self.base_url
        if transport == "lean":
            if not lean_applies(url):
                raise ProviderUnavailable(
                    f"provider {self.label!r}: transport: lean reads http:// and https:// "
                    f"only, without a proxy (base_url {url}); use transport: httpx"
                )
            return True
        parsed = httpx.URL(url)
        # Lean wherever it costs nothing: a load level, a server on this machine, any plain
        # http server (a LAN box: no TLS or HTTP/2 to give up). httpx's send stamp comes after
        # anyio's and httpcore's return path, by when a near server has read the request.
        near = parsed.scheme == "http" or is_loopback(parsed.host)
        return (load_level or near) and lean_applies(url)

    def set_up(self) -> None:
        """The one-off work of the first request on these connections, done now, before any
        request's clock (`labkit.wire.setup`): httpx's first-connection imports, a client
        ready for a stream in flight and, on the lean transport, its kernel-stamp probe
        (`hold_kernel_stamps`, else run by its first connection)."""
        import_network_backends()
        self.reserve(1)
        if self._lean_transport is not None:  # not where `client_factory` built the client
            hold_kernel_stamps()

    def checkout(self) -> httpx.AsyncClient:
        """The client to stream one request on; give it back with `checkin`.

        With room for more than one request in flight, each request gets a one-connection
        client of its own (reused, keep-alive included, by a later request): httpcore's
        shared pool re-examines every connection on each request and response, work that
        grows with the square of the streams and took a quarter of labkit's CPU at 32
        streams (benchmarks/bench_load.py).
        """
        if self.pool_size <= 1 or self.lean:  # the lean transport's pool has no such cost
            return self.client
        if self._idle_shards:
            return self._idle_shards.pop()
        shard = self._make_client(connections=1)
        self._shards.append(shard)
        return shard

    def checkin(self, client: httpx.AsyncClient) -> None:
        """Return a client from `checkout`."""
        if client is not self.client:
            self._idle_shards.append(client)

    def reserve(self, requests: int) -> None:
        """Have clients ready for `requests` in flight, so none is built mid-measurement."""
        if self.pool_size <= 1 or self.lean:
            return
        while len(self._shards) < requests:
            shard = self._make_client(connections=1)
            self._shards.append(shard)
            self._idle_shards.append(shard)

    async def preconnect(self, streams: int) -> None:
        """Open a connection for each of `streams` requests about to go in flight, before
        the level's clock starts, so none opens inside a measured request.

        The lean transport opens bare connections. On httpx each stream's one-connection
        client (`reserve`) opens its connection with the provider's `warm_up` request; a
        provider without one leaves them to connect on their first request, which records
        `client.new_connection`. A failure opens nothing: the requests report it themselves.
        """
        connect_s = self.timeout.connect
        lean = self._lean_transport
        try:
            if lean is not None:
                await lean.preconnect(self.client.base_url, streams, timeout=connect_s)
                return
            self.reserve(streams)
            if self.warm_up() is None:
                return
            clients = self._idle_shards[-streams:] if self._idle_shards else [self.client]
            await asyncio.gather(*(self._warm_up(c) for c in clients))
        except httpx.HTTPError:
            return

    async def _warm_up(self, client: httpx.AsyncClient) -> None:
        request = self.warm_up()
        if request is not None:
            with contextlib.suppress(httpx.HTTPError):
                await send_bounded(client, request, WARM_UP)

    async def connect_ahead(self, client: httpx.AsyncClient) -> bool:
        """Open a connection for the next request on `client` when it has none ready,
        before the request's clock starts; True when one was opened.

        Only the lean transport can open a bare connection; on httpx the request connects
        inside its own measurement (False), as it always has.
        """
        lean = self._lean_transport
        if lean is None or client is not self.client:
            return False
        # The client's parsed URL: parsing the string again costs 10 µs on every request.
        url = client.base_url
        return await lean.preconnect(url, 1, timeout=self.timeout.connect) > 0

    def prepare_send(self, client: httpx.AsyncClient, request: httpx.Request) -> Outgoing | None:
        """`request` made ready to go out on `client` before its clock starts: on the lean
        transport its whole bytes built and a pooled connection taken (`Outgoing.send`
        writes it right after the stamp); None on httpx, whose request is already built
        (`Provider.build_request`: the body serialised) and sent by httpx after the stamp."""
        lean = self._lean_transport
        if lean is None or client is not self.client:
            return None
        return lean.prepare(request)

    def _make_client(self, connections: int | None = None) -> httpx.AsyncClient:
        """The HTTP client; `connections` overrides the pool size.

        Proxies come from `labkit.wire.proxies` (loopback never proxied), not from
        httpx's own reading of the environment. A proxy whose scheme this install cannot
        speak (SOCKS without socksio) is ProviderUnavailable; a failed connect through a
        proxy names it.
        """
        if self._client_factory is not None:
            return self._client_factory()
        size = connections or self.pool_size
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        transport: httpx.AsyncBaseTransport
        if self.lean:
            transport = self._lean_transport = LeanTransport(ssl_context=self._tls)
        else:
            transport = self._http_transport(limits)
        return MeasuredClient(
            direct_transport=LeanTransport,
            base_url=self.base_url,
            timeout=self.timeout,
            limits=limits,
            verify=self._tls,
            # Identity encoding: a compressed stream would be buffered by the decoder.
            headers={"accept-encoding": "identity"},
            transport=transport,
            trust_env=False,
        )

    def _http_transport(self, limits: httpx.Limits) -> httpx.AsyncBaseTransport:
        proxy = proxy_for(self.base_url)
        if proxy is None:
            return httpx.AsyncHTTPTransport(verify=self._tls, limits=limits, trust_env=False)
        lacking = unusable_because(proxy)
        if lacking:  # check_available says so first; a provider built without it lands here
            raise ProviderUnavailable(
                f"provider {self.label!r}: requests would go through {proxy.describe()}, "
                f"which needs {lacking}; or add the host to NO_PROXY"
            )
        return _ProxiedTransport(proxy, verify=self._tls, limits=limits, trust_env=False)

    def side_client(self) -> httpx.AsyncClient:
        """A one-connection httpx client to the API root for requests outside the
        measurement (stats after the run), through the same proxy as the measured ones."""
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        return httpx.AsyncClient(
            base_url=self.base_url,
            timeout=self.timeout,
            verify=self._tls,
            transport=self._http_transport(limits),
            trust_env=False,
        )

    def sdk_http_client(self, factory: Callable[..., Any] | None = None) -> Any:
        """The SDK path's `httpx2.AsyncClient`: the wire path's timeouts, pool size and
        proxy (loopback never proxied; the CA variables still read). `factory` builds it
        instead from the timeout (tests: a mock transport)."""
        import httpx2

        t = self.timeout
        timeout = httpx2.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool)
        if factory is not None:
            return factory(timeout=timeout)
        n = self.pool_size
        proxy = proxy_for(self.base_url)

        def dry_run_answer(request: Any) -> Any:
            body = DRY_RUN_BODY.get() or b""
            return httpx2.Response(200, headers=EVENT_STREAM_HEADERS, content=body)

        return httpx2.AsyncClient(
            timeout=timeout,
            limits=httpx2.Limits(max_connections=n, max_keepalive_connections=n),
            proxy=proxy.url if proxy else None,
            # The set-up's dry run of the SDK (labkit.wire.setup), answered in-process.
            mounts={DRY_RUN_URL.replace("http", "all", 1): httpx2.MockTransport(dry_run_answer)},
            trust_env=False,  # proxies decided above; the CA variables still read here:
            verify=httpx2.create_ssl_context(trust_env=True),
        )

    async def aclose(self) -> None:
        """Close every client."""
        for shard in self._shards:
            await shard.aclose()
        await self.client.aclose()


class _ProxiedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport through a proxy, whose connection errors name the proxy."""

    def __init__(self, proxy: ProxyChoice, **kwargs: Any) -> None:
        super().__init__(proxy=proxy.url, **kwargs)
        self._through = f"through {proxy.describe()}"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` through the proxy."""
        try:
            return await super().handle_async_request(request)
        except httpx.ConnectError as exc:
            raise httpx.ConnectError(f"{exc or 'connect failed'} ({self._through})") from exc
        except httpx.ProxyError as exc:  # the proxy answered CONNECT with an error status
            advice = ""
            if "407" in str(exc):
                advice = (
                    ": the proxy wants credentials; put user:password in the proxy URL of "
                    "that variable, or add the host to NO_PROXY"
                )
            raise httpx.ProxyError(f"{exc} ({self._through}){advice}") from exc


# --- labkit's own requests, bounded (issue 25) ---------------------------------------------
#
# A request labkit makes of its own (describing a server, tokenizing, stats after the run; no
# measured stream) gets a deadline for the whole exchange and a bound on the body it reads:
# a server whose answer never ends, trickles or never stops growing holds its provider for
# at most the deadline and labkit's memory for at most the bound (docs/guarantees.md).


@dataclass(frozen=True, slots=True)
class Bound:
    """How long one of labkit's own requests may take in all, and how much body it reads."""

    deadline_s: float
    max_bytes: int


#: `/props`, `/api/version`: a few kB (llama-server's /props carries the chat template).
DESCRIBE = Bound(deadline_s=10.0, max_bytes=1024 * 1024)
#: `/tokenize` with pieces, `count_tokens`: ~40 bytes a token, a long prompt's worth.
TOKENIZE = Bound(deadline_s=60.0, max_bytes=32 * 1024 * 1024)
#: A generation's stats after the run (OpenRouter's `/generation`): one small object.
STATS_LATER = Bound(deadline_s=30.0, max_bytes=1024 * 1024)
#: The warm-up request that opens a level's connections (llama.cpp `GET /health`).
WARM_UP = Bound(deadline_s=10.0, max_bytes=64 * 1024)


class DeadlinePassed(httpx.TimeoutException):
    """One of labkit's own requests had no whole answer within its deadline."""


class AnswerTooLarge(httpx.DecodingError):
    """One of labkit's own requests was answered with more than its bound."""


_NOT_CARRIED = frozenset({"content-encoding", "content-length", "transfer-encoding"})


async def own_request(
    client: httpx.AsyncClient, method: str, url: str, bound: Bound, **kwargs: Any
) -> httpx.Response:
    """`client.request(method, url, **kwargs)` within `bound`: the response, its body read
    (decoded) and closed; DeadlinePassed or AnswerTooLarge (both httpx.HTTPError) when the
    server takes longer or sends more."""
    return await send_bounded(client, client.build_request(method, url, **kwargs), bound)


async def send_bounded(
    client: httpx.AsyncClient, request: httpx.Request, bound: Bound
) -> httpx.Response:
    """`own_request` for a request already built."""
    what = f"{request.method} {request.url.path}"
    parts: list[bytes] = []
    try:
        async with asyncio.timeout(bound.deadline_s):
            response = await client.send(request, stream=True)
            try:
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > bound.max_bytes:
                        raise AnswerTooLarge(
                            f"{what}: answer over labkit's bound of {bound.max_bytes:,} bytes",
                            request=request,
                        )
                    parts.append(chunk)
            finally:
                await response.aclose()
    except TimeoutError:
        raise DeadlinePassed(
            f"{what}: no whole answer within labkit's deadline of {bound.deadline_s:g} s",
            request=request,
        ) from None
    headers = [(k, v) for k, v in response.headers.multi_items() if k not in _NOT_CARRIED]
    return httpx.Response(
        response.status_code, headers=headers, content=b"".join(parts), request=request
    )
