"""Any server speaking OpenAI's Chat Completions protocol at a `base_url`.

vLLM, SGLang, Ollama's ``/v1``, LM Studio, llama.cpp's ``llama-server``: the same stream,
an optional key, and ``max_tokens`` sent as it is (these servers do not all know
``max_completion_tokens``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from labkit.providers.base import ProviderSettings, register, with_root_path
from labkit.providers.openai import OpenAIProvider
from labkit.providers.server_timings import Server

__all__ = ["OpenAICompatibleProvider", "OpenAICompatibleSettings"]


class OpenAICompatibleSettings(ProviderSettings):
    """An OpenAI-compatible entry: `base_url` required (it includes `/v1`), key optional."""

    base_url: str | None = Field(
        default=None, description="API root including /v1, e.g. http://127.0.0.1:8000/v1."
    )
    server: Server = Field(
        default="auto",
        description="Which server's own timings to read (`groq`, `cerebras`, `fireworks`, "
        "`vllm`, `tgi`, `llamacpp`, `openai`); `auto` detects them from the fields that "
        "arrive. `fireworks` also asks for them (`perf_metrics_in_response: true`).",
    )

    key_required: ClassVar[bool] = False

    def resolved_base_url(self) -> str:
        """The API root; a bare server URL (`http://host:8000`) gets `/v1`."""
        return with_root_path(super().resolved_base_url(), "/v1")


@register
class OpenAICompatibleProvider(OpenAIProvider):
    """OpenAI's protocol on someone else's server."""

    kind: ClassVar[str] = "openai_compatible"
    settings_model: ClassVar[type[ProviderSettings]] = OpenAICompatibleSettings
    default_server: ClassVar[str] = "auto"

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Parameters go as they are; `server: fireworks` asks for its perf metrics."""
        if self.server() == "fireworks" and "perf_metrics_in_response" not in params:
            return {**params, "perf_metrics_in_response": True}
        return params
