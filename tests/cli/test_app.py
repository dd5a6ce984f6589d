"""The CLI through typer's runner: a whole fake run, skipped providers, `kinds`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.records import RequestRecord

ROOT = Path(__file__).resolve().parents[2]

# Field names of the record contract (docs/measurement.md): reports and outside tools read them.
CONTRACT_TOP = {
    "run_id",
    "record_id",
    "experiment",
    "trial",
    "attempt",
    "warmup",
    "provider",
    "provider_kind",
    "model",
    "params",
    "prompt_id",
    "prompt_chars",
    "prompt_bytes",
    "started_at",
    "client",
    "provider_timings",
    "app",
    "usage",
    "stop_reason",
    "stop_reason_raw",
    "response_id",
    "request_id",
    "system_fingerprint",
    "server_build",
    "output_text",
    "error",
}
CONTRACT_CLIENT = {
    "queue_ms",
    "connect_ms",
    "tls_ms",
    "request_sent_ms",
    "headers_ms",
    "first_event_ms",
    "ttft_ms",
    "ttft_text_ms",
    "last_token_ms",
    "e2e_ms",
    "decode_ms_per_token",
    "output_tokens_per_s",
    "event_offsets_ms",
    "event_tokens",
    "itl_ms_p50",
    "itl_ms_p99",
    "itl_ms_max",
    "loop_lag_ms",
}
CONTRACT_PROVIDER = {
    "prefill_ms",
    "prefill_tokens",
    "decode_ms",
    "decode_ms_per_token",
    "cached_tokens",
    "load_ms",
    "processing_ms",
    "raw",
}
CONTRACT_APP = {"prepare_ms", "parse_cpu_ms", "cpu_ms", "client_path"}
CONTRACT_USAGE = {
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "input_tokens_local",
    "tokenizer",
    "output_tokens_source",
}
CONTRACT_ERROR = {"kind", "message", "status", "retry_after_s", "body_excerpt"}


def flat(text: str) -> str:
    return " ".join(text.split())


def only_run(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


@pytest.mark.integration
def test_run_fake_config_writes_records_and_manifest(tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = CliRunner().invoke(
        app, ["run", str(ROOT / "configs" / "fake.yaml"), "--out", str(out), "--no-report"]
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    run = only_run(out)
    assert (run / "records.jsonl").is_file() and (run / "manifest.json").is_file()
    assert not (run / "report.html").exists()  # --no-report
    summary = (run / "summary.txt").read_text(encoding="utf-8")  # the human summary, always
    assert "TTFT" in summary and "single · fake:" in summary
    assert (run / "lab.json").is_file()

    lines = (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
    # fake.yaml: one warm-up, then 2 prompts × 3 repeats.
    assert len(lines) == 7
    records = [RequestRecord.from_json_line(line) for line in lines]
    assert [r.warmup for r in records] == [True] + [False] * 6
    assert len({r.prompt_id for r in records}) == 2
    assert sorted(r.trial for r in records if not r.warmup) == [0, 0, 1, 1, 2, 2]
    for line, rec in zip(lines, records, strict=True):
        data = json.loads(line)
        assert set(data) >= CONTRACT_TOP
        assert set(data["client"]) >= CONTRACT_CLIENT
        assert set(data["provider_timings"]) >= CONTRACT_PROVIDER
        assert set(data["app"]) >= CONTRACT_APP
        assert set(data["usage"]) >= CONTRACT_USAGE
        assert rec.run_id == run.name and rec.provider == "fake" and rec.provider_kind == "fake"
        assert rec.experiment == "single" and rec.attempt == 1
        assert rec.error is None and rec.stop_reason == "end" and rec.stop_reason_raw == "stop"
        assert rec.usage.output_tokens == 24 and rec.usage.output_tokens_source == "provider"
        assert rec.params == {"temperature": 0, "max_tokens": 64}
        c = rec.client
        assert c.queue_ms is not None and c.queue_ms >= 0
        # Floors only (a real sleep never returns early, on the schedule's absolute times):
        # 40 ms to the first token, token 24 at 40 + 23 × 5 ms.
        assert c.ttft_ms >= 40.0
        assert c.e2e_ms >= c.last_token_ms >= 40.0 + 23 * 5.0
        assert c.last_token_ms >= c.ttft_ms
        assert c.decode_ms_per_token is not None and c.decode_ms_per_token > 0
        assert c.stamp_source == "user"  # stamped in user space (no socket: no estimate)
        assert rec.app.prepare_ms is not None and rec.app.parse_cpu_ms is not None
    assert len({r.record_id for r in records}) == 7

    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "completed"
    assert manifest["run_id"] == run.name and manifest["records"] == 7
    assert manifest["packages"]["httpx"] and manifest["packages"]["pydantic"]
    assert {"hostname", "platform", "python", "cpu_count"} <= set(manifest["host"])
    assert manifest["config"]["providers"][0]["kind"] == "fake"
    assert manifest["providers"]["fake"]["status"] == "ok"
    assert manifest["ended_at"] is not None
    assert "records:" in result.output and "run folder:" in flat(result.output)


FAKE_AND_OPENAI = """\
name: two
providers:
  - id: fake
    kind: fake
    schedule: {first_token_ms: 0, token_interval_ms: 0, tokens: 4}
  - id: gpt
    kind: openai
    model: gpt-4.1-mini
experiments:
  - kind: single
    prompt_cache: as_sent
    prompts: ["hi"]
    repeats: 2
    warmup: 0
"""


@pytest.mark.unit
def test_provider_without_key_is_skipped_and_the_rest_runs(tmp_path: Path) -> None:
    cfg = tmp_path / "two.yaml"
    cfg.write_text(FAKE_AND_OPENAI, encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(cfg), "--out", str(tmp_path), "--no-report"])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "skipping provider 'gpt': set OPENAI_API_KEY to run it" in out
    assert "Traceback" not in result.output and "error:" not in result.output
    run = only_run(tmp_path)
    text = (run / "records.jsonl").read_text(encoding="utf-8")
    records = [RequestRecord.from_json_line(x) for x in text.splitlines()]
    assert [r.provider for r in records] == ["fake", "fake"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["providers"]["gpt"]["status"] == "skipped"
    assert "OPENAI_API_KEY" in manifest["providers"]["gpt"]["reason"]
    assert manifest["providers"]["fake"]["status"] == "ok"


@pytest.mark.unit
def test_only_skipped_providers_is_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "two.yaml"
    cfg.write_text(FAKE_AND_OPENAI, encoding="utf-8")
    result = CliRunner().invoke(
        app, ["run", str(cfg), "--out", str(tmp_path), "--no-report", "--provider", "gpt"]
    )
    assert result.exit_code != 0
    assert "OPENAI_API_KEY" in flat(result.output)
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_unknown_provider_filter_is_one_error_line(tmp_path: Path) -> None:
    cfg = tmp_path / "two.yaml"
    cfg.write_text(FAKE_AND_OPENAI, encoding="utf-8")
    result = CliRunner().invoke(
        app, ["run", str(cfg), "--out", str(tmp_path / "o"), "--provider", "nope"]
    )
    assert result.exit_code != 0
    error_lines = [x for x in result.output.splitlines() if x.startswith("error:")]
    assert len(error_lines) == 1 and "no provider 'nope'" in error_lines[0]
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_run_without_config_is_an_error() -> None:
    result = CliRunner().invoke(app, ["run"])
    assert result.exit_code != 0 and "error:" in result.output
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_kinds_lists_providers_and_experiments() -> None:
    result = CliRunner().invoke(app, ["kinds"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    providers = next(x for x in lines if x.startswith("providers:"))
    for kind in ("anthropic", "fake", "llamacpp", "openai", "openai_compatible"):
        assert kind in providers
    # the experiments' list wraps at the terminal's width: read it whole
    experiments = result.output.split("experiments:", 1)[1].split()
    assert {"single,", "same_model,"} <= set(experiments)


@pytest.mark.unit
@pytest.mark.parametrize("args", [["--help"], ["run", "--help"]])
def test_help(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "Usage" in result.output


@pytest.mark.unit
def test_the_last_line_says_none_finished_where_some_answered_and_none_answered_else() -> None:
    """A provider that answered requests and then failed (its server died mid-run) did not
    fail to complete a request: the line says which of the two it is."""
    from labkit.cli.app import none_ok_line
    from labkit.runner import ProviderOutcome

    def outcome(status: str, done: int, failed: int, reason: str) -> ProviderOutcome:
        return ProviderOutcome("p", "fake", "m", status, reason, done=done, failed=failed)

    died = outcome("failed", 12, 0, "llama-server exited during the run")
    assert none_ok_line([died]) == (
        "no provider finished its run (p: llama-server exited during the run)"
    )
    refused = outcome("failed", 4, 4, "every request failed")
    assert none_ok_line([refused]) == "no provider completed a request (p: every request failed)"
    assert none_ok_line([refused, outcome("ok", 3, 0, "")]) is None
    assert none_ok_line([outcome("skipped", 0, 0, "no key")]) == (
        "no provider completed a request (p: no key)"
    )
