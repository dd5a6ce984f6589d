"""Which proxy, if any, a request to a URL goes through: one decision for every HTTP stack.

The proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, either case) apply as curl and
httpx read them, `NO_PROXY` included, with one rule added: a loopback target (127.0.0.0/8,
::1, ::ffff:127.0.0.1, localhost) never goes through a proxy, as if `NO_PROXY` always
named it. A local server behind a corporate proxy setting would otherwise be unreachable,
or measured through a detour.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import urllib.request
from dataclasses import dataclass

import httpx

__all__ = ["ProxyChoice", "is_loopback", "proxy_for", "unusable_because"]


@dataclass(frozen=True, slots=True)
class ProxyChoice:
    """The proxy a URL's requests go through, and the variable that named it."""

    url: str
    variable: str

    @property
    def where(self) -> str:
        """`scheme://host:port` of the proxy, credentials left out (for messages)."""
        try:
            parsed = httpx.URL(self.url)
        except httpx.InvalidURL:
            return "(a URL that does not parse)"
        port = f":{parsed.port}" if parsed.port else ""
        return f"{parsed.scheme}://{parsed.host}{port}"

    def describe(self) -> str:
        """`proxy socks5://host:1080 (from ALL_PROXY)`."""
        return f"proxy {self.where} (from {self.variable})"


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine: localhost, 127.0.0.0/8 or ::1, bracketed or not, and
    127.0.0.0/8 written as an IPv4-mapped IPv6 address (``::ffff:127.0.0.1``)."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.partition("%")[0])  # fe80::1%eth0: zone dropped
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # ::ffff:127.0.0.1 is 127.0.0.1
    return address.is_loopback


def proxy_for(url: str) -> ProxyChoice | None:
    """The proxy the environment sets for `url`, or None (loopback targets: always None)."""
    parsed = httpx.URL(url)
    if is_loopback(parsed.host):
        return None
    proxies = urllib.request.getproxies_environment()
    chosen = proxies.get(parsed.scheme) or proxies.get("all")
    if not chosen:
        return None
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if bypass(parsed.host):
        return None
    url = chosen if "://" in chosen else f"http://{chosen}"  # `host:port` means http, as in httpx
    for name in (f"{parsed.scheme}_proxy", "all_proxy"):
        for variable in (name.upper(), name):
            if os.environ.get(variable) == chosen:
                return ProxyChoice(url, variable)
    return ProxyChoice(url, f"{parsed.scheme.upper()}_PROXY")


def unusable_because(choice: ProxyChoice) -> str | None:
    """What this install lacks to speak through `choice`, or None when it can."""
    try:
        scheme = httpx.URL(choice.url).scheme
    except httpx.InvalidURL:
        return "a proxy URL that parses (scheme://host:port)"
    if scheme in ("socks5", "socks5h"):
        if importlib.util.find_spec("socksio") is None:
            return "the socks extra: pip install 'httpx[socks]'"
        return None
    if scheme not in ("http", "https"):
        return "a proxy scheme httpx speaks (http, https, socks5, socks5h)"
    return None
