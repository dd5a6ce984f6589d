"""llama.cpp's `llama-server`: the OpenAI-compatible stream plus the server's own timings.

The last chunk carries ``timings`` (``prompt_ms``, ``predicted_ms``, ``cache_n``, ...), which
become `ProviderTimings`; ``prompt_ms`` covers prompt processing only, ``predicted_ms`` runs
from the first sampled token, and neither includes HTTP or queueing: that difference is
exactly the client-vs-provider gap. ``/tokenize`` is the model's exact tokenizer and
``/props`` reports the build. `base_url` is the server root (no ``/v1``). With ``managed:
true`` (the default without a `base_url`) the settings hand the runner a local `llama-server`
to start for the run (`managed_server`, `labkit.local`); it fills in `base_url` first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import httpx
from pydantic import Field, PositiveInt, model_validator

from labkit.filenames import safe_filename
from labkit.providers._wire import describe as describe_value
from labkit.providers._wire import wire_count
from labkit.providers.base import (
    ManagedServerHandle,
    ProviderSettings,
    SamplingParams,
    StreamParser,
    TokenCount,
    register,
)
from labkit.providers.openai import OpenAIChatParser
from labkit.providers.openai_compatible import OpenAICompatibleProvider, tokenize_reply
from labkit.providers.tools import GrammarTools, ToolFormat
from labkit.tokenizers import Tokenized
from labkit.wire.connections import DESCRIBE, TOKENIZE, own_request

if TYPE_CHECKING:  # the local server is imported only when a run starts one
    from labkit.local import ManagedServer

__all__ = ["LlamaCppParser", "LlamaCppProvider", "LlamaCppSettings", "bundled_model_settings"]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1"


class LlamaCppSettings(ProviderSettings):
    """A llama.cpp entry: a managed local server, or an existing one at `base_url`."""

    model: str = Field(
        default=DEFAULT_MODEL_NAME,
        min_length=1,
        description="Label for the model (llama-server serves the one it loaded).",
    )
    managed: bool | None = Field(
        default=None,
        description="Start and stop a local llama-server around the run (default: true "
        "unless base_url is given).",
    )
    model_path: Path | None = Field(
        default=None, description="A GGUF file; default: the bundled SmolLM2-135M-Instruct."
    )
    server_path: Path | None = Field(
        default=None, description="A llama-server binary; default: found or built by setup."
    )
    backend: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="Build/run backend when labkit builds llama-server."
    )
    ctx_size: PositiveInt = Field(default=4096, description="Context tokens per slot.")
    slots: PositiveInt = Field(default=1, description="Parallel slots (-np).")
    exclusive: bool = Field(
        default=False,
        description="An existing server (`managed: false`) that labkit alone uses, with "
        "`slots` slots: its queue is then 0 by construction while no more requests are in "
        "flight than its slots, as on a managed one (`labkit run --truth` sets it).",
    )
    threads: PositiveInt | None = Field(
        default=None,
        description="CPU threads (-t); default on CPU: every core but one, so the measuring "
        "client has a core of its own.",
    )
    gpu_layers: int | None = Field(
        default=None, ge=0, description="Layers offloaded to the GPU (-ngl); all on CUDA."
    )
    startup_timeout_s: float = Field(default=120.0, gt=0, description="Wait for /health.")
    cache_ram_mib: int | None = Field(
        default=None,
        ge=-1,
        description="A managed server's host-memory prompt cache (`--cache-ram`, MiB; 0: off, "
        "-1: no limit): the prompts it keeps after their slot is reused, restored when they "
        "come back. Null: llama-server's default (8,192 MiB where it has one). 0 leaves the "
        "slots as the only cache, so a prompt is evicted when its slot serves another.",
    )

    @model_validator(mode="after")
    def _managed_or_url(self) -> LlamaCppSettings:
        if self.managed is None:
            self.managed = self.base_url is None
        elif not self.managed and self.base_url is None:
            raise ValueError("managed: false needs a base_url (the existing server's root)")
        return self

    @classmethod
    def answered_at(cls, entry: dict[str, Any], root: str, key_env: str) -> dict[str, Any] | None:
        """The entry as an existing llama-server at `root` (its root, no `/v1`) that labkit
        alone uses (`exclusive`: the queue rule of a managed one holds); what only a managed
        server takes is dropped."""
        managed_only = (
            "managed",
            "model_path",
            "server_path",
            "backend",
            "gpu_layers",
            "threads",
            "cache_ram_mib",
        )
        kept = {k: v for k, v in entry.items() if k not in managed_only}
        return {**kept, "managed": False, "exclusive": True, "base_url": root}

    def resolved_base_url(self) -> str:
        """The server root; a trailing `/v1` is dropped."""
        url = super().resolved_base_url()
        return url.removesuffix("/v1")

    def context_size(self) -> int | None:
        """`ctx_size`: the context of each slot."""
        return self.ctx_size

    def host_cpus_used(self) -> int:
        """A managed server: on CPU its threads (default every core but one), on CUDA the
        one core that feeds the GPU; one already running: as any server
        (`ProviderSettings.host_cpus_used`)."""
        if not self.managed:
            return super().host_cpus_used()
        if self.backend == "cuda":
            return 1
        from labkit.local.server import default_threads

        return self.threads or default_threads()

    def managed_server(self, log_dir: Path) -> ManagedServerHandle | None:
        """A local llama-server for the run when `managed`, logging into `log_dir`."""
        if not self.managed:
            return None
        return LocalLlamaServer(self, log_dir / f"llama-server-{safe_filename(self.id)}.log")


class LocalLlamaServer:
    """The llama-server a managed entry runs on: found or built, then started (blocking)."""

    name = "llama-server"

    def __init__(self, settings: LlamaCppSettings, log_path: Path) -> None:
        self._settings = settings
        self._log_path = log_path
        self._server: ManagedServer | None = None

    @property
    def log_path(self) -> Path:
        """The server's log file in the run folder."""
        return self._log_path

    def start(self) -> str:
        """Find or build llama-server and the model, start it; its base URL once healthy."""
        from labkit.local import ManagedServer, ensure_setup

        s = self._settings
        setup = ensure_setup(server_path=s.server_path, model_path=s.model_path, backend=s.backend)
        self._server = ManagedServer(
            setup,
            ctx_size=s.ctx_size,
            slots=s.slots,
            threads=s.threads,
            gpu_layers=s.gpu_layers,
            log_path=self._log_path,
            startup_timeout_s=s.startup_timeout_s,
            extra_args=() if s.cache_ram_mib is None else ("--cache-ram", str(s.cache_ram_mib)),
        )
        return self._server.start()

    def stop(self) -> None:
        """Stop the server process, if one was started."""
        if self._server is not None:
            self._server.stop()

    def is_running(self) -> bool:
        """Whether the server process is alive."""
        return self._server is not None and self._server.is_running()

    def info(self) -> dict[str, Any]:
        """Build, model, port and settings of the running server."""
        return self._server.info() if self._server is not None else {}


class LlamaCppParser(OpenAIChatParser):
    """OpenAI chunks plus `timings`; cumulative when present on every chunk, so replaced.

    Older builds and some proxies send `timings` but no `usage`: the counts then come from
    `timings` (input = `prompt_n` + `cache_n`, output = `predicted_n`, cached = `cache_n`)
    until a `usage` object, which is authoritative, replaces them.
    """

    def __init__(self) -> None:
        super().__init__("llamacpp")

    def _read_timings(self, timings: dict[str, Any]) -> None:
        super()._read_timings(timings)
        if not self._usage_seen:
            u = self.usage
            pt = self.provider_timings
            predicted_n = wire_count(timings.get("predicted_n"), "timings.predicted_n")
            if pt.prefill_tokens is not None:
                u.input_tokens = pt.prefill_tokens + (pt.cached_tokens or 0)
            if predicted_n is not None:
                u.output_tokens = predicted_n
            if pt.cached_tokens is not None:
                u.cached_input_tokens = pt.cached_tokens


@register
class LlamaCppProvider(OpenAICompatibleProvider):
    """A llama.cpp server: provider timings, exact token counts, build info."""

    kind: ClassVar[str] = "llamacpp"
    settings_model: ClassVar[type[ProviderSettings]] = LlamaCppSettings
    chat_path: ClassVar[str] = "/v1/chat/completions"
    reports_server_timings: ClassVar[bool] = True
    tokenizer_name: ClassVar[str | None] = "llamacpp:/tokenize"
    #: A slot reuses any common prefix (`cache_prompt`, on by default): no minimum.
    prompt_cache_min_tokens: ClassVar[int | None] = 0
    # llama-server closes the connection after every streamed response although it
    # advertises keep-alive; a request sent on the pooled connection in the moment before
    # that close fails with "Server disconnected without sending a response". Asking for
    # `connection: close` matches what the server does anyway (so `connect_ms` is measured
    # on every request) and removes the race.
    closes_after_each_stream: ClassVar[bool] = True

    def tool_format(self) -> ToolFormat | None:
        """Tools as a call forced by a JSON-schema grammar: the bundled model's chat
        template knows no tools (`labkit.providers.tools`)."""
        return GrammarTools()

    def warm_up_request(self) -> httpx.Request:
        """`GET /health`: a few bytes, answered without touching a slot."""
        return self.client.build_request("GET", "/health")

    def api_root(self) -> str:
        """The server's OpenAI-compatible `/v1` root, for the SDK."""
        return self.settings.resolved_base_url() + "/v1"

    def new_parser(self) -> StreamParser:
        """A parser that also reads `timings`."""
        return LlamaCppParser()

    def event_time_params(self) -> SamplingParams:
        """`timings_per_token: true`: llama-server then sends its cumulative `timings` on
        every token chunk (tools/server/README.md, "timings_per_token")."""
        return {"timings_per_token": True}

    async def tokenize(self, text: str) -> list[int]:
        """The model's own tokens for raw `text` (no chat template, no BOS)."""
        resp = await own_request(self.client, "POST", "/tokenize", TOKENIZE, json={"content": text})
        resp.raise_for_status()
        tokens = resp.json()["tokens"]
        return [t if isinstance(t, int) else int(t["id"]) for t in tokens]

    async def count_tokens(self, text: str) -> TokenCount | None:
        """Exact count from `/tokenize`."""
        return TokenCount(len(await self.tokenize(text)), "llamacpp:/tokenize")

    async def count_chat_prompt(self, messages: list[dict[str, str]]) -> TokenCount | None:
        """The prompt a chat request would be: the messages through the model's chat template
        (`/apply-template`), then cut as the server cuts a prompt (`/tokenize` with its
        special tokens, as `usage.prompt_tokens` counts them). Nothing is generated."""
        resp = await own_request(
            self.client, "POST", "/apply-template", TOKENIZE, json={"messages": messages}
        )
        resp.raise_for_status()
        prompt = resp.json().get("prompt")
        if not isinstance(prompt, str):
            raise ValueError(f"/apply-template answered no prompt text ({describe_value(prompt)})")
        body = {"content": prompt, "add_special": True}
        resp = await own_request(self.client, "POST", "/tokenize", TOKENIZE, json=body)
        resp.raise_for_status()
        tokens = resp.json().get("tokens")
        if not isinstance(tokens, list):
            raise ValueError(f"/tokenize answered no token list ({describe_value(tokens)})")
        return TokenCount(len(tokens), "llamacpp:/apply-template + /tokenize")

    async def tokenized(self, text: str) -> Tokenized | None:
        """The model's own ids and pieces from `/tokenize` with `with_pieces` (no BOS)."""
        body = {"content": text, "with_pieces": True}
        resp = await own_request(self.client, "POST", "/tokenize", TOKENIZE, json=body)
        resp.raise_for_status()
        return tokenize_reply(resp.json(), "llamacpp:/tokenize")

    def count_locally(self, text: str) -> TokenCount | None:
        """None: the model's tokenizer lives in the server (`tokenize`), not in labkit."""
        return None

    def exclusive_slots(self) -> int | None:
        """A managed llama-server's slots (`-np`): labkit started it, nobody else uses it;
        or an existing one's that the config says labkit alone uses (`exclusive`)."""
        s = self.settings
        if not isinstance(s, LlamaCppSettings):
            return None
        return s.slots if s.managed or s.exclusive else None

    def prompt_cache_params(self, enabled: bool) -> SamplingParams:
        """llama-server's `cache_prompt`: reuse the slot's KV cache for a shared prefix."""
        return {"cache_prompt": enabled}

    def exact_length_params(self) -> SamplingParams:
        """`ignore_eos`: decode until `max_tokens`."""
        return {"ignore_eos": True}

    def metrics_url(self) -> str | None:
        """`/metrics` on the server root (the managed llama-server runs with `--metrics`;
        an existing one without it answers 501, counted as failed scrapes)."""
        return self.settings.resolved_base_url() + "/metrics"

    async def describe(self) -> dict[str, Any]:
        """`/props`: build, slots, context and model path; sets `server_build`."""
        resp = await own_request(self.client, "GET", "/props", DESCRIBE)
        resp.raise_for_status()
        props = resp.json()
        self.server_build = props.get("build_info")
        gen = props.get("default_generation_settings") or {}
        return {
            "build_info": self.server_build,
            "total_slots": props.get("total_slots"),
            "n_ctx": gen.get("n_ctx"),
            "model_path": props.get("model_path"),
        }


def bundled_model_settings(provider_id: str = "local") -> LlamaCppSettings:
    """The bundled local model as a managed llama.cpp entry: no key, and no network once
    `labkit setup` has cached llama-server and the model."""
    return LlamaCppSettings(id=provider_id, kind=LlamaCppProvider.kind)
