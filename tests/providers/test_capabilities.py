"""Provider capabilities: each provider declares what it can do, experiments and the runner
ask the capability (never the kind), and a provider that declares nothing gets the defaults
that mean "cannot"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from labkit.analysis.levels import Level
from labkit.config import parse_config
from labkit.experiments.determinism import DeterminismExperiment, DeterminismSettings
from labkit.experiments.load import LoadExperiment, LoadSettings, LoadState
from labkit.experiments.prefill_decode import PrefillDecodeExperiment, PrefillDecodeSettings
from labkit.experiments.token_ratio import TokenRatioExperiment, TokenRatioSettings
from labkit.providers import Provider, provider_class
from labkit.providers.base import ManagedServerHandle, ProviderSettings
from labkit.providers.fake import FakeProvider, FakeSchedule, FakeSettings
from labkit.providers.llamacpp import LlamaCppSettings
from labkit.runner import RunOptions, prepare_run, run_lab
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def build(entry: dict[str, Any]) -> Provider:
    cls = provider_class(entry["kind"])
    return cls(cls.settings_model.model_validate(entry), api_key="k")


@pytest.fixture
def providers() -> Iterator[dict[str, Provider]]:
    made = {
        "llamacpp": build(
            {"id": "l", "kind": "llamacpp", "base_url": "http://127.0.0.1:9", "ctx_size": 2048}
        ),
        "openai": build({"id": "o", "kind": "openai", "model": "gpt-4"}),
        "openai_compatible": build(
            {
                "id": "c",
                "kind": "openai_compatible",
                "model": "gpt-3.5-turbo",
                "base_url": "http://127.0.0.1:9/v1",
            }
        ),
        "anthropic": build({"id": "a", "kind": "anthropic", "model": "claude-haiku-4-5"}),
        "fake": build({"id": "f", "kind": "fake", "model": "gpt-4"}),
    }
    yield made
    for provider in made.values():
        asyncio.run(provider.aclose())


def test_llamacpp_declares_its_server_controls(providers: dict[str, Provider]) -> None:
    llama = providers["llamacpp"]
    assert llama.prompt_cache_params(False) == {"cache_prompt": False}
    assert llama.prompt_cache_params(True) == {"cache_prompt": True}
    assert llama.exact_length_params() == {"ignore_eos": True}
    assert llama.reports_server_timings and llama.tokenizer_name == "llamacpp:/tokenize"
    assert llama.count_locally("hello") is None  # its tokenizer lives in the server
    assert llama.settings.context_size() == 2048


def test_hosted_and_fake_providers_get_the_defaults(providers: dict[str, Provider]) -> None:
    for kind in ("openai", "openai_compatible", "anthropic", "fake"):
        p = providers[kind]
        assert p.prompt_cache_params(False) == {} and p.exact_length_params() == {}, kind
        assert not p.reports_server_timings and p.tokenizer_name is None, kind
        assert asyncio.run(p.tokenize("hello")) is None, kind
        assert p.settings.context_size() is None, kind
        assert p.settings.managed_server(Path("/nonexistent")) is None, kind


def test_offline_counting_only_where_labkit_has_the_tokenizer(
    providers: dict[str, Provider],
) -> None:
    for kind in ("openai", "openai_compatible"):
        count = providers[kind].count_locally("hello world")
        assert count is not None and count.tokens == 2, kind
        assert count.source == "tiktoken:cl100k_base"
    # a fake provider labelled gpt-4 still has no tokenizer; Anthropic's is not offline
    assert providers["fake"].count_locally("hello world") is None
    assert providers["anthropic"].count_locally("hello world") is None
    newer = build({"id": "n", "kind": "openai", "model": "gpt-4o"})
    count = newer.count_locally("hello world")  # o200k_base ships offline too (bpe-openai)
    assert count is not None and (count.tokens, count.source) == (2, "tiktoken:o200k_base")
    asyncio.run(newer.aclose())


def test_llamacpp_managed_entry_hands_the_runner_a_server(tmp_path: Path) -> None:
    managed = LlamaCppSettings(id="l", kind="llamacpp")
    server = managed.managed_server(tmp_path)
    assert server is not None and server.name == "llama-server"
    assert server.log_path == tmp_path / "llama-server-l.log"
    assert not server.is_running() and server.info() == {}
    server.stop()  # stopping a server that never started is safe
    existing = managed.model_copy(update={"managed": False, "base_url": "http://127.0.0.1:9"})
    assert existing.managed_server(tmp_path) is None


# --- experiments ask the capability ------------------------------------------------------


class _CapableSettings(FakeSettings):
    def context_size(self) -> int | None:
        return 600


class _CapableProvider(FakeProvider):
    """A provider (not registered) with every capability, under names no experiment knows."""

    settings_model: ClassVar[type[ProviderSettings]] = _CapableSettings
    tokenizer_name: ClassVar[str | None] = "capable:tokens"

    def prompt_cache_params(self, enabled: bool) -> dict[str, Any]:
        return {"reuse_prefix": enabled}

    def exact_length_params(self) -> dict[str, Any]:
        return {"stop_at_max": True}

    async def tokenize(self, text: str) -> list[int] | None:
        return [len(word) for word in text.split()]

    def count_locally(self, text: str) -> Any:
        from labkit.providers.base import TokenCount

        return TokenCount(len(text.split()), "capable:local")


@pytest.fixture
def capable() -> Iterator[_CapableProvider]:
    provider = _CapableProvider(_CapableSettings(id="cap", kind="fake"))
    yield provider
    asyncio.run(provider.aclose())


def test_prefill_decode_uses_the_capabilities(capable: _CapableProvider) -> None:
    exp = PrefillDecodeExperiment(PrefillDecodeSettings(repeats=1, warmup=0))
    # 600-token context: lengths capped to 600 - 32 output - 64 margin
    assert exp.lengths_for(capable.settings) == [16, 64, 256]
    plan = list(exp.plan(capable))
    cold = [p for p in plan if p.tags.get("variant") == "cold"]
    cache = [p for p in plan if p.tags.get("variant") == "cache"]
    assert cold and all(p.request.params["reuse_prefix"] is False for p in cold)
    assert all(p.request.params["stop_at_max"] is True for p in cold + cache)
    assert cache and all(p.request.params["reuse_prefix"] is True for p in cache)
    assert {p.tags["cache_params"] for p in cold} == {"reuse_prefix=false"}
    records = [
        make_record(
            experiment="prefill_decode",
            ttft_ms=10.0 + n,
            input_tokens=n,
            tags={**p.tags},
        )
        for p, n in zip(cold, (16, 64, 256), strict=True)
    ]
    figures = exp.analyze("cap", "m", records).figures
    assert figures is not None and figures.kind == "prefill_decode"
    assert figures.cache_control == "unique nonce per prompt; reuse_prefix=false"


def test_load_decodes_exactly_where_the_provider_can(capable: _CapableProvider) -> None:
    exp = LoadExperiment(LoadSettings(concurrency=[1], requests=1, output_tokens=8))
    asyncio.run(exp.prepare(capable))
    planned = exp.request(Level(0, "concurrency", 1), 0, "run")
    assert planned.request.params["max_tokens"] == 8
    assert planned.request.params["stop_at_max"] is True
    # the worker processes get the same parameters through the job
    other = LoadExperiment(LoadSettings(concurrency=[1], requests=1, output_tokens=8))
    other.restore(LoadState.model_validate_json(exp.shard_state().model_dump_json()))
    assert other.request(Level(0, "concurrency", 1), 0, "run").request.params["stop_at_max"]


def test_determinism_and_token_ratio_use_the_providers_tokenizers(
    capable: _CapableProvider,
) -> None:
    det = DeterminismExperiment(DeterminismSettings())
    records = [
        make_record(experiment="determinism", output_text="aa bbb", tags={"variant": "t0"})
        for _ in range(2)
    ]
    asyncio.run(det.finalize(capable, records))
    figures = det.analyze("cap", "m", records).figures
    assert figures is not None and figures.kind == "determinism"
    assert figures.tokenizer == "capable:tokens"
    assert figures.variants[0].output_tokens == [2, 2]  # two "tokens" each, not 6 characters
    ratio = TokenRatioExperiment(TokenRatioSettings(send=False))
    asyncio.run(ratio.prepare(capable))
    rows = ratio.analyze("cap", "m", []).figures
    assert rows is not None and rows.kind == "token_ratio"
    english = next(r for r in rows.rows if r.text_id == "english")
    assert english.tiktoken_tokens == len(english_text(ratio).split())


def english_text(exp: TokenRatioExperiment) -> str:
    settings = exp.settings
    assert isinstance(settings, TokenRatioSettings)
    return next(t.text for t in settings.texts if t.id == "english")


# --- the runner starts what the settings hand it -------------------------------------------


class _StubServer:
    """A managed server that runs nothing: it records what the runner asked of it."""

    name = "stub-server"

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.calls: list[str] = []

    def start(self) -> str:
        self.calls.append("start")
        return "http://fake.labkit.invalid/v1"

    def stop(self) -> None:
        self.calls.append("stop")

    def is_running(self) -> bool:
        return "stop" not in self.calls

    def info(self) -> dict[str, Any]:
        return {"stub": True}


def test_the_runner_starts_and_stops_a_managed_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers: list[_StubServer] = []

    def managed_server(self: FakeSettings, log_dir: Path) -> ManagedServerHandle:
        servers.append(_StubServer(log_dir / f"stub-{self.id}.log"))
        return servers[-1]

    monkeypatch.setattr(FakeSettings, "managed_server", managed_server)
    schedule = FakeSchedule(first_token_ms=0, token_interval_ms=0, tokens=3)
    cfg = parse_config(
        {
            "name": "managed",
            "providers": [{"id": "f", "kind": "fake", "schedule": schedule.model_dump()}],
            "experiments": [
                {
                    "kind": "single",
                    "prompt_cache": "as_sent",
                    "prompts": ["hi"],
                    "repeats": 1,
                    "warmup": 0,
                }
            ],
        }
    )
    runner = prepare_run(cfg, RunOptions(out_dir=tmp_path))
    messages: list[str] = []
    runner.on_message = messages.append
    result = asyncio.run(run_lab(runner))
    (server,) = servers
    assert server.calls == ["start", "stop"]
    assert server.log_path.parent == result.folder.path
    assert result.outcomes[0].server == {"stub": True} and result.outcomes[0].status == "ok"
    assert "provider 'f': preparing the local stub-server" in messages
    assert "provider 'f': stub-server ready at http://fake.labkit.invalid/v1" in messages
    assert len(result.records) == 1 and result.records[0].error is None
    entry = json.loads((result.folder.path / "manifest.json").read_text())["providers"]["f"]
    assert entry["server"] == {"stub": True} and entry["reports_server_timings"] is False
