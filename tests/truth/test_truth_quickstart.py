"""The quickstart's five experiments against the fake server as `kind: llamacpp` with
`managed: false`: every request is answered, and what labkit recorded of each agrees with
the truth log (counts, the end token, cached tokens, the server's prefill, logprobs)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import yaml

from labkit.config import parse_config
from labkit.runner import RunOptions, prepare_run
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration

QUICKSTART = Path(__file__).resolve().parents[2] / "labkit" / "examples" / "quickstart.yaml"
SCHEDULE = {
    "first_token_ms": 5,
    "token_interval_ms": 1,
    "tokens": 12,
    "prefill_ms_per_token": 0.02,
    "cached_ms_per_token": 0.002,
    "cache_tokens": 100_000,
    "chat_template": True,
    "end_token": True,
    "sampling": True,
    "server_timings": "llamacpp",
    "slots": 1,
}


def test_the_quickstart_runs_against_the_fake_server_and_agrees_with_its_log(
    tmp_path: Path,
) -> None:
    config = yaml.safe_load(QUICKSTART.read_text())
    for exp in config["experiments"]:  # fewer requests, the same five questions
        if exp["kind"] in ("single", "determinism"):
            exp["repeats"] = 2
        if exp["kind"] == "prefill_decode":
            exp.update(prompt_tokens=[16, 128], repeats=1, cache_prefix_tokens=64, cache_repeats=1)
    log = tmp_path / "truth.jsonl"
    with TruthServer(truth_log=log, **SCHEDULE) as server:
        config["providers"] = [
            {
                "id": "local",
                "kind": "llamacpp",
                "managed": False,
                "base_url": f"http://127.0.0.1:{server.port}",
            }
        ]
        runner = prepare_run(parse_config(config), RunOptions(out_dir=tmp_path / "runs"))
        result = asyncio.run(runner.run())
    assert result.status == "completed"
    records = result.records
    kinds = {r.experiment for r in records}
    assert kinds >= {"single", "determinism", "prefill_decode", "attribution"}
    truth = {t.id: t for t in read_truth_log(log).requests}
    assert len(truth) == len(records)
    for rec in records:
        assert rec.error is None, rec.error
        assert "truth" in (rec.server_build or "")
        t = truth[rec.response_id or ""]
        assert rec.usage.input_tokens == t.prompt_tokens
        assert rec.usage.output_tokens == t.usage_output_tokens
        assert rec.usage.streamed_output_tokens == t.output_tokens
        assert (rec.usage.cached_input_tokens or 0) == t.cached_tokens
        assert rec.provider_timings.prefill_ms == t.prefill_ms
        assert rec.provider_timings.decode_ms == t.decode_ms
        if rec.logprobs is not None:
            assert [s.token for s in rec.logprobs.steps] == [s.token for s in t.steps]
            for got, drawn in zip(rec.logprobs.steps, t.steps, strict=True):
                assert got.logprob == pytest.approx(math.log(drawn.probability), abs=1e-12)
    assert any(t.cached_tokens for t in truth.values())  # the prefix was read from the cache
    assert any(r.logprobs for r in records)
