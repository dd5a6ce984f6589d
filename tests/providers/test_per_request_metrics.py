"""Servers that send their per-request timings only when asked are asked by the provider
itself, never through `extra_body`."""

from __future__ import annotations

import pytest

from labkit.providers.openai_compatible import OpenAICompatibleProvider, OpenAICompatibleSettings

pytestmark = pytest.mark.unit


def _provider(base_url: str, server: str = "auto") -> OpenAICompatibleProvider:
    settings = OpenAICompatibleSettings(
        id="p", kind="openai_compatible", model="m", base_url=base_url, server=server
    )
    return OpenAICompatibleProvider(settings)


@pytest.mark.parametrize(
    ("base_url", "server", "asked"),
    [
        ("https://api.fireworks.ai/inference/v1", "auto", True),
        ("http://127.0.0.1:8000/v1", "fireworks", True),
        ("http://127.0.0.1:8000/v1", "auto", False),
        ("https://api.fireworks.ai/inference/v1", "vllm", False),
        ("https://notfireworks.ai/v1", "auto", False),
    ],
)
def test_fireworks_is_asked_for_its_perf_metrics(base_url: str, server: str, asked: bool) -> None:
    provider = _provider(base_url, server)
    params = provider.wire_params({"max_tokens": 4})
    assert ("perf_metrics_in_response" in params) is asked
    assert provider.asks_per_request_metrics() is asked
    assert params["max_tokens"] == 4


def test_a_value_the_config_sets_is_kept() -> None:
    provider = _provider("https://api.fireworks.ai/inference/v1")
    assert provider.wire_params({"perf_metrics_in_response": False}) == {
        "perf_metrics_in_response": False
    }
