"""The runner: retries are separate records; non-retryable errors are not retried."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import respx

from labkit.config import parse_config
from labkit.runner import RunOptions, prepare_run, run_lab
from tests.providers.streams import oa_usage, openai_events, sse_response

URL = "https://api.openai.com/v1/chat/completions"


def config(retries: int) -> dict:
    return {
        "name": "retries",
        "providers": [{"id": "gpt", "kind": "openai", "model": "gpt-4.1-mini", "retries": retries}],
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


def run(tmp_path: Path, retries: int, responses: list[httpx.Response]):
    cfg = parse_config(config(retries))
    runner = prepare_run(cfg, RunOptions(out_dir=tmp_path))
    with respx.mock() as router:
        route = router.post(URL).mock(side_effect=responses)
        result = asyncio.run(run_lab(runner))
    return result, route


def err500() -> httpx.Response:
    return httpx.Response(
        500, headers={"retry-after": "0"}, json={"error": {"message": "boom", "type": "server"}}
    )


@pytest.mark.unit
def test_retries_are_recorded_as_attempts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retries")
    good = sse_response(openai_events(["ok"], usage=oa_usage(3, 1)))
    result, route = run(tmp_path, 2, [err500(), err500(), good])
    assert route.call_count == 3
    recs = result.records
    assert [r.attempt for r in recs] == [1, 2, 3]
    assert [r.error.kind if r.error else None for r in recs] == ["http_status", "http_status", None]
    assert recs[0].error.status == 500 and recs[0].error.retry_after_s == 0.0
    assert recs[2].output_text == "ok" and recs[2].client.ttft_ms is not None
    assert len({r.plan_key for r in recs}) == 1 and len({r.record_id for r in recs}) == 3
    outcome = result.outcomes[0]
    assert (outcome.status, outcome.done, outcome.failed) == ("ok", 3, 2)
    # Every attempt is on disk, one line each.
    lines = (result.folder.path / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["attempt"] for x in lines] == [1, 2, 3]


@pytest.mark.unit
def test_retries_stop_after_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retries")
    result, route = run(tmp_path, 1, [err500(), err500()])
    assert route.call_count == 2
    assert [r.attempt for r in result.records] == [1, 2]
    assert result.outcomes[0].status == "failed"
    assert "every request failed" in (result.outcomes[0].reason or "")


@pytest.mark.unit
def test_client_errors_are_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retries")
    bad = httpx.Response(400, json={"error": {"message": "bad request"}})
    result, route = run(tmp_path, 2, [bad])
    assert route.call_count == 1
    assert [r.attempt for r in result.records] == [1]
    assert result.records[0].error.status == 400


@pytest.mark.integration
def test_retry_after_429_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retries")
    slow = httpx.Response(429, headers={"retry-after": "0.3"}, json={"error": {"message": "rl"}})
    good = sse_response(openai_events(["ok"], usage=oa_usage(3, 1)))
    result, _ = run(tmp_path, 2, [slow, good])
    first, second = result.records
    assert first.error.retry_after_s == 0.3
    gap = (second.started_at - first.started_at).total_seconds()
    # A real wait, so a lower bound only: the runner sleeps the 0.3 s before the second attempt
    # starts, and a busy machine can only lengthen the gap.
    assert gap >= 0.3
