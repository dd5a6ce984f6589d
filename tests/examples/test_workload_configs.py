"""The workload configs shipped in configs/ load and validate as a run would (no request)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.config import load_config
from labkit.runner.run import validate_experiments

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("conversation.yaml", ["conversation"]),
        ("shared_prefix.yaml", ["load", "load"]),
        ("trace.yaml", ["trace"]),
    ],
)
def test_workload_config_validates(
    name: str, kinds: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # the trace path is relative to the working directory
    config = load_config(REPO / "configs" / name)
    assert [e.kind for e in config.experiments] == kinds
    validate_experiments(config)
    provider = config.providers[0]
    assert provider.kind == "llamacpp" and getattr(provider, "slots", 1) > 1
