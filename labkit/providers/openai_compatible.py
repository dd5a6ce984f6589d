"""Any server speaking OpenAI's Chat Completions protocol at a `base_url`.

vLLM, SGLang, Ollama's ``/v1``, LM Studio, llama.cpp's ``llama-server``: the same stream,
an optional key, and ``max_tokens`` sent as it is (these servers do not all know
``max_completion_tokens``). Tokens are counted by the server's own ``/tokenize`` where it
has one (`OpenAICompatibleProvider.tokenized`; its shapes: docs/providers.md, "Tokenizers").
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from pydantic import Field, field_validator

from labkit.provider_stats import LaterStats
from labkit.providers.base import (
    ChatRequest,
    ProviderSettings,
    check_base_url,
    register,
    with_root_path,
)
from labkit.providers.openai import OpenAIProvider
from labkit.providers.server_timings import Server
from labkit.tokenizers import Tokenized, vocab_pieces
from labkit.wire.connections import STATS_LATER, TOKENIZE, own_request

__all__ = ["OpenAICompatibleProvider", "OpenAICompatibleSettings", "tokenize_reply"]

#: Statuses of a server that has no `/tokenize`.
_NO_TOKENIZER = frozenset({404, 405, 501})


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

    metrics_url: str | None = Field(
        default=None,
        description="The server's Prometheus metrics, scraped during experiments (vLLM, "
        "SGLang with --enable-metrics): a URL, or a path such as `/metrics` on the "
        "base_url's host.",
    )

    generation_stats: bool | None = Field(
        default=None,
        description="Fetch OpenRouter's generation stats of every response after the run "
        "(`GET <base_url>/generation?id=`: upstream provider, its latency and generation "
        "time, cost), into provider-stats-<id>.jsonl; null: when base_url is on openrouter.ai.",
    )

    key_required: ClassVar[bool] = False

    @field_validator("metrics_url")
    @classmethod
    def _metrics_url_is_sendable(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            check_base_url(value)
        return value

    @classmethod
    def answered_at(cls, entry: dict[str, Any], root: str, key_env: str) -> dict[str, Any] | None:
        """The entry at `root` (the API root; the kind adds its own path), keyed by
        `key_env`."""
        kept = {k: v for k, v in entry.items() if k not in ("base_url", "base_url_env")}
        return {**kept, "base_url": root, "api_key_env": key_env}

    def resolved_base_url(self) -> str:
        """The API root; a bare server URL (`http://host:8000`) gets `/v1`."""
        return with_root_path(super().resolved_base_url(), "/v1")

    def resolved_metrics_url(self) -> str | None:
        """`metrics_url` as a full URL (a path is taken on the base_url's host)."""
        if self.metrics_url is None or not self.metrics_url.startswith("/"):
            return self.metrics_url
        parts = urlsplit(self.resolved_base_url())
        return f"{parts.scheme}://{parts.netloc}{self.metrics_url}"


@lru_cache(maxsize=64)
def _on_fireworks(base_url: str) -> bool:
    """Whether `base_url` is on fireworks.ai (kept per URL: every request asks)."""
    host = urlsplit(base_url).hostname or ""
    return host == "fireworks.ai" or host.endswith(".fireworks.ai")


@register
class OpenAICompatibleProvider(OpenAIProvider):
    """OpenAI's protocol on someone else's server."""

    kind: ClassVar[str] = "openai_compatible"
    settings_model: ClassVar[type[ProviderSettings]] = OpenAICompatibleSettings
    default_server: ClassVar[str] = "auto"
    prompt_cache_min_tokens: ClassVar[int | None] = None  # each server its own

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Parameters go as they are; Fireworks is asked for its perf metrics."""
        if self.asks_per_request_metrics() and "perf_metrics_in_response" not in params:
            return {**params, "perf_metrics_in_response": True}
        return params

    def asks_per_request_metrics(self) -> bool:
        """Whether this server sends its per-request timings only when asked, and is asked
        (Fireworks: `server: fireworks`, or `auto` with a base_url on fireworks.ai)."""
        server = self.server()
        if server == "auto":
            return _on_fireworks(self.settings.resolved_base_url())
        return server == "fireworks"

    def chat_framing_tokens(self, request: ChatRequest) -> int | None:
        """Unknown: each server applies its model's own chat template."""
        return None

    async def tokenized(self, text: str) -> Tokenized | None:
        """The server's `/tokenize` (vLLM, SGLang, llama.cpp), else the offline encoding
        of an OpenAI model name, else None. Servers without one (Ollama, LM Studio, hosted
        APIs) answer 404."""
        root = self.settings.resolved_base_url().removesuffix("/v1")
        url = f"{root}/tokenize"
        source = f"{self.kind}:/tokenize"
        body = {
            "model": self.model,
            "prompt": text,
            "add_special_tokens": False,
            "return_token_strs": True,
        }
        resp = await own_request(
            self.client, "POST", url, TOKENIZE, json=body, headers=self.request_headers()
        )
        if resp.status_code in _NO_TOKENIZER:
            return await super().tokenized(text)
        resp.raise_for_status()
        cut = tokenize_reply(resp.json(), source)
        if cut.count == 0 and text:  # llama.cpp reads `content`, not `prompt`
            llama_body = {"content": text, "with_pieces": True}
            resp = await own_request(
                self.client, "POST", url, TOKENIZE, json=llama_body, headers=self.request_headers()
            )
            resp.raise_for_status()
            cut = tokenize_reply(resp.json(), source)
        return cut

    def fetches_stats_later(self) -> bool:
        """OpenRouter's generation stats: `generation_stats`, by default on openrouter.ai."""
        settings = self.settings
        if not isinstance(settings, OpenAICompatibleSettings):
            return False
        if settings.generation_stats is not None:
            return settings.generation_stats
        host = urlsplit(settings.resolved_base_url()).hostname or ""
        return host == "openrouter.ai" or host.endswith(".openrouter.ai")

    async def stats_later(self, client: httpx.AsyncClient, response_id: str) -> LaterStats | None:
        """`GET /generation?id=`: 404 until OpenRouter has stored the generation (seconds
        after the stream ends); its durations are milliseconds."""
        resp = await own_request(
            client,
            "GET",
            "generation",
            STATS_LATER,
            params={"id": response_id},
            headers=self.request_headers(),
        )
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        body = resp.json()
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise httpx.DecodingError("generation stats without a `data` object")
        return LaterStats(
            response_id=response_id,
            fetched_at=datetime.now(UTC).isoformat(),
            source="GET /api/v1/generation",
            latency_ms=_number(data.get("latency")),
            generation_time_ms=_number(data.get("generation_time")),
            moderation_latency_ms=_number(data.get("moderation_latency")),
            upstream_provider=_text(data.get("provider_name")),
            upstream_id=_text(data.get("upstream_id")),
            model=_text(data.get("model")),
            total_cost=_number(data.get("total_cost")),
            input_tokens=_count(data.get("native_tokens_prompt")),
            output_tokens=_count(data.get("native_tokens_completion")),
            raw=data,
        )

    def metrics_url(self) -> str | None:
        """The entry's `metrics_url`, where it gives one."""
        settings = self.settings
        return (
            settings.resolved_metrics_url()
            if isinstance(settings, OpenAICompatibleSettings)
            else None
        )


def tokenize_reply(reply: Any, source: str) -> Tokenized:
    """A `/tokenize` reply (vLLM, SGLang or llama.cpp shape) as a `Tokenized`.

    Raises ValueError for a reply of neither shape.
    """
    tokens = reply.get("tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, list):
        raise ValueError(f"{source}: reply has no `tokens` list")
    if all(isinstance(t, int) for t in tokens):
        strs = reply.get("token_strs")
        pieces = None
        if isinstance(strs, list) and len(strs) == len(tokens):
            pieces = vocab_pieces([str(s) for s in strs])
        return Tokenized(source, len(tokens), tuple(tokens), pieces)
    ids: list[int] = []
    pieces_list: list[bytes] = []
    for t in tokens:
        if not isinstance(t, dict) or not isinstance(t.get("id"), int):
            raise ValueError(f"{source}: a token is neither an id nor {{id, piece}}: {t!r}"[:200])
        ids.append(t["id"])
        piece = t.get("piece")
        if isinstance(piece, str):
            pieces_list.append(piece.encode("utf-8"))
        elif isinstance(piece, list) and all(isinstance(b, int) and 0 <= b < 256 for b in piece):
            pieces_list.append(bytes(piece))
        else:
            raise ValueError(f"{source}: token {t['id']} has no usable piece")
    return Tokenized(source, len(ids), tuple(ids), tuple(pieces_list))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
