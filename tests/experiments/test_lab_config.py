"""Bad lab configs fail clearly before any request is sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app

pytestmark = pytest.mark.unit

runner = CliRunner()


def _run(tmp_path: Path, text: str) -> tuple[int, str]:
    cfg = tmp_path / "lab.yaml"
    cfg.write_text(text, encoding="utf-8")
    out = tmp_path / "runs"
    result = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--no-report"])
    assert not out.exists() or not any(out.rglob("records.jsonl")), "a request was sent"
    return result.exit_code, result.output


def test_unknown_experiment_kind(tmp_path: Path) -> None:
    code, out = _run(
        tmp_path,
        "name: x\nproviders: [{id: f, kind: fake}]\nexperiments: [{kind: throughput}]\n",
    )
    assert code == 1
    assert "experiments[0].kind: unknown kind 'throughput'" in out
    assert "prefill_decode" in out  # lists what is available
    assert "Traceback" not in out


def test_prompt_length_the_model_cannot_hold(tmp_path: Path) -> None:
    code, out = _run(
        tmp_path,
        "name: x\n"
        "providers: [{id: local, kind: llamacpp, ctx_size: 512}]\n"
        "experiments: [{kind: prefill_decode, prompt_tokens: [16, 2048]}]\n",
    )
    assert code == 1
    assert "2048-token prompt" in out and "context of 512 tokens" in out
    assert "Traceback" not in out


def test_empty_text_set(tmp_path: Path) -> None:
    code, out = _run(
        tmp_path,
        "name: x\nproviders: [{id: f, kind: fake}]\n"
        "experiments: [{kind: token_ratio, texts: []}]\n",
    )
    assert code == 1
    assert "experiments[0].texts" in out and "at least 1 item" in out


def test_determinism_needs_two_repeats(tmp_path: Path) -> None:
    code, out = _run(
        tmp_path,
        "name: x\nproviders: [{id: f, kind: fake}]\n"
        "experiments: [{kind: determinism, repeats: 1}]\n",
    )
    assert code == 1
    assert "experiments[0].repeats" in out
