"""Any server speaking OpenAI's Chat Completions protocol at a `base_url`.

vLLM, SGLang, Ollama's ``/v1``, LM Studio, llama.cpp's ``llama-server``: the same stream,
an optional key, and ``max_tokens`` sent as it is (these servers do not all know
``max_completion_tokens``).
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from labkit.providers.base import ProviderSettings, check_base_url, register, with_root_path
from labkit.providers.openai import OpenAIProvider

__all__ = ["OpenAICompatibleProvider", "OpenAICompatibleSettings"]


class OpenAICompatibleSettings(ProviderSettings):
    """An OpenAI-compatible entry: `base_url` required (it includes `/v1`), key optional."""

    base_url: str | None = Field(
        default=None, description="API root including /v1, e.g. http://127.0.0.1:8000/v1."
    )

    metrics_url: str | None = Field(
        default=None,
        description="The server's Prometheus metrics, scraped during experiments (vLLM, "
        "SGLang with --enable-metrics): a URL, or a path such as `/metrics` on the "
        "base_url's host.",
    )

    key_required: ClassVar[bool] = False

    @field_validator("metrics_url")
    @classmethod
    def _metrics_url_is_sendable(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            check_base_url(value)
        return value

    def resolved_base_url(self) -> str:
        """The API root; a bare server URL (`http://host:8000`) gets `/v1`."""
        return with_root_path(super().resolved_base_url(), "/v1")

    def resolved_metrics_url(self) -> str | None:
        """`metrics_url` as a full URL (a path is taken on the base_url's host)."""
        if self.metrics_url is None or not self.metrics_url.startswith("/"):
            return self.metrics_url
        parts = urlsplit(self.resolved_base_url())
        return f"{parts.scheme}://{parts.netloc}{self.metrics_url}"


@register
class OpenAICompatibleProvider(OpenAIProvider):
    """OpenAI's protocol on someone else's server."""

    kind: ClassVar[str] = "openai_compatible"
    settings_model: ClassVar[type[ProviderSettings]] = OpenAICompatibleSettings

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Parameters go as they are."""
        return params

    def metrics_url(self) -> str | None:
        """The entry's `metrics_url`, where it gives one."""
        settings = self.settings
        return (
            settings.resolved_metrics_url()
            if isinstance(settings, OpenAICompatibleSettings)
            else None
        )
