"""The interface through which a provider lends its official SDK to the SDK path.

A provider with an official SDK names an `SDKAdapter` (`Provider.sdk`); `labkit.sdkpath`
owns the HTTP client (httpx2, with the trace hook that stamps connection phases), the clock
and the record, and asks the adapter only what is the provider's own: how to build the SDK
client and how to open one streaming request through it. A provider without an SDK leaves
`Provider.sdk` at None, and `paths: [sdk]` on it is a config error.

The SDK packages are imported inside the adapters' methods, so importing a provider never
imports its SDK.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labkit.providers.base import ChatRequest, Provider

__all__ = ["SDKAdapter"]


class SDKAdapter(ABC):
    """How one provider's requests are sent through its official SDK."""

    #: The SDK's package name, for messages and the manifest (`openai`, `anthropic`).
    package: str

    @abstractmethod
    def client(self, provider: Provider, *, api_key: str | None, http_client: Any) -> Any:
        """The SDK's async client on `http_client`, with the SDK's own retries off."""

    @abstractmethod
    async def open_stream(
        self, client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        """Send one streaming request; return the SDK's stream object, which iterates the
        events, has ``.response.headers`` and an async ``close()``."""

    def event_name(self, item: Any) -> str | None:
        """The SSE event name the wire parser expects for one yielded object (None: the
        protocol's events are unnamed)."""
        return None
