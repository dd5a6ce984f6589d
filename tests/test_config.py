"""Config loading: the documented example loads; every mistake is one ConfigError that names
the file, the field path and what was expected — also through the CLI, without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.config import LabConfig, load_config, parse_config
from labkit.errors import ConfigError
from labkit.providers.anthropic import AnthropicSettings
from labkit.providers.openai_compatible import OpenAICompatibleSettings

pytestmark = pytest.mark.unit

EXAMPLE = """\
name: smoke                      # run name (part of the run folder's name)
description: optional free text
output_dir: results              # where run folders go (--out overrides)
store_text: true                 # keep generated text in records
providers:
  - id: local-vllm               # free name, used in records and reports
    kind: openai_compatible
    base_url: http://127.0.0.1:8000/v1
    model: my-model
    api_key_env: VLLM_KEY        # optional: the variable's NAME, never the key
  - id: claude
    kind: anthropic
    model: claude-haiku-4-5
    api_key_env: ANTHROPIC_API_KEY
experiments:
  - kind: single
    prompts: ["Explain what a token is in one sentence."]
    repeats: 3
    params: {temperature: 0, max_tokens: 64}
"""

GOOD_PROVIDERS = """\
providers:
  - id: fake
    kind: fake
  - id: vllm
    kind: openai_compatible
    base_url: http://127.0.0.1:8000/v1
    model: m
"""


def write(tmp_path: Path, text: str, name: str = "lab.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def test_documented_example_loads(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, EXAMPLE))
    assert isinstance(cfg, LabConfig)
    assert cfg.name == "smoke" and cfg.store_text is True
    vllm, claude = cfg.providers
    assert isinstance(vllm, OpenAICompatibleSettings)
    assert vllm.resolved_base_url() == "http://127.0.0.1:8000/v1"
    assert vllm.api_key_env == "VLLM_KEY" and vllm.timeouts.read == 120.0
    assert isinstance(claude, AnthropicSettings) and claude.model == "claude-haiku-4-5"
    (single,) = cfg.experiments
    assert single.kind == "single" and single.repeats == 3
    assert single.params == {"temperature": 0, "max_tokens": 64}
    # The manifest copy holds the variable names, never a key.
    red = cfg.redacted()
    assert red["providers"][0]["api_key_env"] == "VLLM_KEY"
    assert red["providers"][1]["kind"] == "anthropic"


def test_shipped_fake_config_loads() -> None:
    cfg = load_config(Path(__file__).parent.parent / "configs" / "fake.yaml")
    assert [p.kind for p in cfg.providers] == ["fake"]


BAD = [
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "    timeouts: {connect: -1}\n"
        "experiments: [{kind: single}]\n",
        ["providers[1].timeouts.connect", "greater than 0", "-1"],
        id="wrong-value-nested",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "    timeouts: {connect: soon}\n"
        "experiments: [{kind: single}]\n",
        ["providers[1].timeouts.connect", "valid number", "'soon'"],
        id="wrong-type",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "    colour: red\nexperiments: [{kind: single}]\n",
        ["providers[1].colour", "unknown field"],
        id="wrong-field",
    ),
    pytest.param(
        "name: x\nproviders:\n  - {id: a, kind: fake}\n  - {id: b, kind: gemini, model: g}\n"
        "experiments: [{kind: single}]\n",
        ["providers[1].kind", "unknown kind 'gemini'", "expected one of", "openai_compatible"],
        id="unknown-kind",
    ),
    pytest.param(
        "name: x\nproviders:\n  - {id: a, kind: openai, model: g, api_key: sk-live-123456789}\n"
        "experiments: [{kind: single}]\n",
        ["providers[0]", "keys do not belong in a config", "api_key_env"],
        id="key-in-config",
    ),
    pytest.param(
        'name: x\nproviders:\n  - {id: a, kind: openai, model: g, api_key_env: "sk-abc123def456"}\n'
        "experiments: [{kind: single}]\n",
        ["providers[0].api_key_env", "name of an environment variable", "not the key itself"],
        id="key-in-api_key_env",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "experiments: [{kind: single, repeats: many}]\n",
        ["experiments[0].repeats", "valid integer"],
        id="experiment-wrong-type",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "experiments: [{kind: benchmark}]\n",
        ["experiments[0].kind", "unknown kind 'benchmark'"],
        id="experiment-unknown-kind",
    ),
    pytest.param(
        GOOD_PROVIDERS + "experiments: [{kind: single}]\n",
        ["name", "required field is missing"],
        id="missing-name",
    ),
    pytest.param(
        "name: x\nproviders: []\nexperiments: [{kind: single}]\n",
        ["providers", "at least 1"],
        id="no-providers",
    ),
    pytest.param(
        "name: x\nproviders:\n  - {id: a, kind: fake}\n  - {id: a, kind: fake}\n"
        "experiments: [{kind: single}]\n",
        ["providers", "id 'a' is used more than once"],
        id="duplicate-id",
    ),
    pytest.param(
        "name: x\nproviders:\n  - {id: a, kind: fake, client: sdk}\n"
        "experiments: [{kind: single}]\n",
        ["providers[0].client", "provider kind 'fake' has no official SDK", "client: wire"],
        id="client-sdk-without-sdk",
    ),
    pytest.param(
        "name: x\nproviders:\n  - {id: a, kind: openai, model: g, client: browser}\n"
        "experiments: [{kind: single}]\n",
        ["providers[0].client", "'wire' or 'sdk'", "'browser'"],
        id="client-unknown",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "experiments: [{kind: single, paths: [sdk]}]\n",
        ["experiments[0].paths", "[sdk] needs an official SDK", "provider 'fake'", "[wire, sdk]"],
        id="sdk-only-paths-without-sdk",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "experiments: [{kind: single, paths: [sdk, sdk]}]\n",
        ["experiments[0].paths", "wire and/or sdk, each once"],
        id="paths-repeated",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "experiments:\n"
        "  - {kind: attribution, compare_sdk: false, paths: [wire, sdk]}\n",
        ["experiments[0]", "compare_sdk (deprecated) contradicts paths"],
        id="compare_sdk-contradicts-paths",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "    params: {n: 2}\nexperiments: [{kind: single}]\n",
        ["providers[1].params", "n: 2 asks for several choices", "one choice per request"],
        id="n-above-1-in-provider-params",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "    extra_body: {n: 4}\nexperiments: [{kind: single}]\n",
        ["providers[1].extra_body", "n: 4 asks for several choices"],
        id="n-above-1-in-extra-body",
    ),
    pytest.param(
        "name: x\n" + GOOD_PROVIDERS + "experiments: [{kind: single, params: {n: 3}}]\n",
        ["experiments[0].params", "n: 3 asks for several choices", "one choice per request"],
        id="n-above-1-in-experiment-params",
    ),
    pytest.param(
        "- just\n- a list\n",
        ["expected a mapping at the top level"],
        id="not-a-mapping",
    ),
    pytest.param(
        "name: x\nproviders:\n  - id: a\n   kind: fake\n",
        ["not valid YAML", "line 4, column 4"],
        id="bad-yaml",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_config_is_one_clear_error(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for part in expected:
        assert part in message, (part, message)
    assert "sk-live-123456789" not in message and "sk-abc123def456" not in message
    assert "Traceback" not in message


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_config_through_the_cli(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    out = result.output
    assert "Traceback" not in out
    assert result.exception is None or isinstance(result.exception, SystemExit)
    error_lines = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, out
    assert str(path) in flat(out)
    for part in expected:
        assert part in flat(out), (part, out)
    assert not (tmp_path / "out").exists()  # nothing is written for a broken config


def test_every_problem_is_listed_in_the_one_error(tmp_path: Path) -> None:
    text = (
        "name: x\nproviders:\n"
        "  - {id: a, kind: fake, colour: red}\n"
        "  - {id: b, kind: openai_compatible, model: m, base_url: 'http://h/v1',"
        " timeouts: {connect: 0}}\n"
        "experiments: [{kind: single, repeats: 0}]\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    msg = str(info.value)
    assert "providers[0].colour" in msg
    assert "providers[1].timeouts.connect" in msg
    assert "experiments[0].repeats" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope.yaml")])
    assert result.exit_code != 0 and "no such config file" in flat(result.output)
    assert "Traceback" not in result.output


def test_parse_config_names_its_source() -> None:
    with pytest.raises(ConfigError, match=r"^manifest\.json: invalid config"):
        parse_config({"name": "x", "providers": [{"id": "a", "kind": "fake"}]}, "manifest.json")


def test_one_choice_is_accepted(tmp_path: Path) -> None:
    text = "name: x\n" + GOOD_PROVIDERS + "    params: {n: 1}\nexperiments: [{kind: single}]\n"
    assert load_config(write(tmp_path, text)).providers[1].params == {"n": 1}
