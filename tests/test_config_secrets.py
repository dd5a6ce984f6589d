"""Secrets written into a config are refused before anything is made or printed, and config
errors name their field before any run folder exists: a key as the run name, URL userinfo,
credentials in `extra_body`, a key of the config's own variable pasted elsewhere, an
`output_dir` with a NUL byte, a `base_url_env` that cannot be a variable's name.

Proxy credentials (from the proxy variables, never in a config) are registered with the
scrubber, so an echo of `Proxy-Authorization` is masked in every output.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from labkit.cli import app
from labkit.config import looks_like_secret
from labkit.scrub import register_environment_credentials, scrub, scrub_json

pytestmark = pytest.mark.unit

KEY = "sk-proj-Q7wErTy2uIoP4aSdF6gHjK8lZxCvB0nM"
PROVIDER = "{id: fake, kind: fake, schedule: {first_token_ms: 0, token_interval_ms: 0, tokens: 2}"
EXPERIMENT = "experiments: [{kind: single, prompts: [hi], repeats: 1, warmup: 0}]\n"


def _run(tmp_path: Path, yaml_text: str, env: dict[str, str] | None = None) -> tuple[Result, Path]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)], env=env)
    return result, out


def _refused(result: Result, out: Path, *needles: str) -> None:
    """Exit 1, one `error:` line naming the field, no folder made, the secret not shown."""
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert KEY not in result.output and KEY[:10] not in result.output
    assert not out.exists()


CASES = {
    "the run name": (f"name: {KEY}\nproviders: [{PROVIDER}}}]\n{EXPERIMENT}", "name: holds"),
    "the run name, inside words": (
        f"name: run-{KEY}-today\nproviders: [{PROVIDER}}}]\n{EXPERIMENT}",
        "name: holds",
    ),
    "URL userinfo": (
        "name: r\nproviders: [{id: o, kind: openai_compatible, model: m, "
        f"base_url: 'http://me:{KEY}@127.0.0.1:9/v1'}}]\n{EXPERIMENT}",
        "providers[0].base_url: holds",
    ),
    "extra_body api_key": (
        f"name: r\nproviders: [{PROVIDER}, extra_body: {{api_key: hunter2hunter2}}}}]\n"
        f"{EXPERIMENT}",
        "providers[0].extra_body.api_key: holds",
    ),
    "extra_body nested token": (
        f"name: r\nproviders: [{PROVIDER}, extra_body: {{auth: {{token: abc12345}}}}}}]\n"
        f"{EXPERIMENT}",
        "providers[0].extra_body.auth.token: holds",
    ),
    "a key-shaped prompt": (
        f"name: r\nproviders: [{PROVIDER}}}]\n"
        f"experiments: [{{kind: single, prompts: ['use {KEY}'], repeats: 1}}]\n",
        "experiments[0].prompts[0]: holds",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_secret_in_a_config_is_refused_unshown_before_any_folder(
    tmp_path: Path, case: str
) -> None:
    text, needle = CASES[case]
    result, out = _run(tmp_path, text)
    _refused(result, out, needle, "environment variables")


def test_the_value_of_the_configs_own_key_variable_is_refused_anywhere(tmp_path: Path) -> None:
    key = "plainlowercasekeyvalue"  # no key shape: found because the variable holds it
    text = (
        f"name: {key}\nproviders: [{{id: o, kind: openai_compatible, model: m, "
        f"base_url: 'http://127.0.0.1:9/v1', api_key_env: LABKIT_TEST_K}}]\n{EXPERIMENT}"
    )
    result, out = _run(tmp_path, text, env={"LABKIT_TEST_K": key})
    _refused(result, out, "name: holds")
    assert key not in result.output


def test_ordinary_names_and_values_are_not_taken_for_secrets() -> None:
    for text in [
        "baseline-run-20261201",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M",
        "sk-no-key-required",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "http://127.0.0.1:8080/v1",
        "Summarise the paper in 3 sentences.",
    ]:
        assert not looks_like_secret(text), text


def test_prompt_cache_key_and_max_tokens_in_extra_body_are_not_credentials(
    tmp_path: Path,
) -> None:
    text = (
        f"name: r\nproviders: [{PROVIDER}, extra_body: {{prompt_cache_key: s1, max_tokens: 5}}}}]\n"
        f"{EXPERIMENT}"
    )
    result, _ = _run(tmp_path, text)
    assert "holds what looks like a key" not in result.output


# --- Fields checked before a folder is made ----------------------------------------------------


def test_a_nul_byte_in_output_dir_names_the_field_before_any_folder(tmp_path: Path) -> None:
    result, out = _run(
        tmp_path,
        f'name: r\noutput_dir: "{tmp_path}/made\\0here"\nproviders: [{PROVIDER}}}]\n{EXPERIMENT}',
    )
    _refused(result, out, "output_dir:", "NUL byte")
    assert not (tmp_path / "made").exists()


@pytest.mark.parametrize("value", ["http://127.0.0.1:8080/v1", "MY-URL", "2URL", "A B"])
def test_a_base_url_env_that_cannot_be_a_variable_name_names_the_field(
    tmp_path: Path, value: str
) -> None:
    text = (
        f"name: r\nproviders: [{{id: o, kind: openai_compatible, model: m, "
        f"base_url_env: {json.dumps(value)}}}]\n{EXPERIMENT}"
    )
    result, out = _run(tmp_path, text)
    _refused(result, out, "providers[0].base_url_env: must be the name of an environment variable")


# --- Proxy credentials --------------------------------------------------------------------------


def test_proxy_credentials_are_masked_in_every_form_a_proxy_echoes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://lab%40user:Pr0xy-S3cret-pw@127.0.0.1:3128")
    register_environment_credentials()
    basic = base64.b64encode(b"lab@user:Pr0xy-S3cret-pw").decode()
    echoed = (
        f"Proxy-Authorization: Basic {basic}; password Pr0xy-S3cret-pw; "
        "url lab%40user:Pr0xy-S3cret-pw@"
    )
    for cleaned in (scrub(echoed), json.loads(scrub_json(json.dumps(echoed)))):
        assert "Pr0xy-S3cret" not in cleaned and basic not in cleaned
