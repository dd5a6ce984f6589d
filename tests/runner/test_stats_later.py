"""OpenRouter's generation stats fetched after the run, from a fake OpenRouter on 127.0.0.1
that streams chat completions and answers `GET /api/v1/generation?id=` in its documented
shape (404 until the generation is stored, then `{"data": {...}}`, durations in ms)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.provider_stats import read_later_stats, stats_file_name
from labkit.providers import provider_class
from labkit.report import write_report
from labkit.runner import RunOptions, prepare_run
from labkit.runner.run import RunResult
from labkit.scrub import registered_secrets
from tests.support.misbehaving import MisbehavingServer, body_reply, sse_reply

pytestmark = pytest.mark.integration

KEY = "sk-or-v1-test-stats-later-0123456789"


def _chunk(gen_id: str, **delta: Any) -> bytes:
    choice = {"index": 0, "delta": delta.get("delta", {}), "finish_reason": delta.get("finish")}
    body: dict[str, Any] = {"id": gen_id, "object": "chat.completion.chunk", "choices": [choice]}
    if "usage" in delta:
        body["usage"] = delta["usage"]
    return f"data: {json.dumps(body)}\n\n".encode()


class FakeOpenRouter:
    """Chat at /api/v1/chat/completions; each generation's stats appear after `late`
    asks (404 before); ids in `refused` answer 403; `gone` never appear."""

    def __init__(self, late: int = 1) -> None:
        self.late = late
        self.asked: dict[str, int] = {}
        self.refused: set[str] = set()
        self.gone: set[str] = set()
        self.auth: list[str] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.server = MisbehavingServer(self._reply)

    def _reply(self, head: bytes) -> list[bytes | float]:
        line = head.split(b"\r\n", 1)[0].decode()
        if line.startswith("POST /api/v1/chat/completions"):
            with self._lock:
                gen_id = f"gen-{next(self._ids):04d}"
            events = [
                _chunk(gen_id, delta={"role": "assistant", "content": ""}),
                *(_chunk(gen_id, delta={"content": w}) for w in ("Hello", " there", "!")),
                _chunk(gen_id, finish="stop",
                       usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}),
                b"data: [DONE]\n\n",
            ]  # fmt: skip
            return sse_reply(events)
        if line.startswith("GET /api/v1/generation?id="):
            for h in head.split(b"\r\n"):
                if h.lower().startswith(b"authorization:"):
                    self.auth.append(h.split(b":", 1)[1].strip().decode())
            gen_id = line.split("id=", 1)[1].split(" ", 1)[0]
            with self._lock:
                n = self.asked[gen_id] = self.asked.get(gen_id, 0) + 1
            if gen_id in self.refused:
                return body_reply(403, b'{"error":{"message":"forbidden"}}', "application/json")
            if gen_id in self.gone or n <= self.late:
                return body_reply(404, b'{"error":{"message":"not found"}}', "application/json")
            data = {
                "id": gen_id, "upstream_id": f"chatcmpl-up-{gen_id}", "total_cost": 0.0015,
                "created_at": "2026-12-01T09:00:00+00:00", "model": "meta/llama-x",
                "streamed": True, "cancelled": False, "provider_name": "Infermatic",
                "latency": 1250, "moderation_latency": 50, "generation_time": 1200,
                "finish_reason": "stop", "tokens_prompt": 10, "tokens_completion": 25,
                "native_tokens_prompt": 5, "native_tokens_completion": 3,
                "echo": KEY,  # a secret in the answer must not reach the file
            }  # fmt: skip
            return body_reply(200, json.dumps({"data": data}).encode(), "application/json")
        return body_reply(404, b"{}", "application/json")


def _run(fake: FakeOpenRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunResult:
    monkeypatch.setenv("OR_TEST_KEY", KEY)
    monkeypatch.setattr("labkit.runner.later.FIRST_WAIT_S", 0.05)
    config = parse_config(
        {
            "name": "router",
            "providers": [
                {"id": "or", "kind": "openai_compatible", "model": "meta/llama-x",
                 "base_url": fake.server.base_url + "/api/v1", "api_key_env": "OR_TEST_KEY",
                 "generation_stats": True}
            ],
            "experiments": [{
                "kind": "single",
                "prompt_cache": "as_sent",
                "repeats": 3,
                "warmup": 1,
            }],
        }
    )  # fmt: skip
    return asyncio.run(prepare_run(config, RunOptions(out_dir=tmp_path)).run())


def test_stats_are_fetched_after_the_run_and_joined_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeOpenRouter(late=2)
    with fake.server:
        result = _run(fake, tmp_path, monkeypatch)
    assert result.status == "completed"
    measured = [r for r in result.records if not r.warmup]
    assert len(measured) == 3 and all(r.response_id for r in measured)
    # Warm-ups are not asked for; each measured one twice too early, then found.
    assert sorted(fake.asked) == sorted(r.response_id for r in measured)  # type: ignore[misc]
    assert set(fake.asked.values()) == {3}
    assert set(fake.auth) == {f"Bearer {KEY}"}
    stats = read_later_stats(result.folder.path, "or")
    assert set(stats) == {r.record_id for r in measured}
    one = stats[measured[0].record_id]
    assert one.response_id == measured[0].response_id and one.attempts == 3
    assert (one.latency_ms, one.generation_time_ms, one.moderation_latency_ms) == (1250, 1200, 50)
    assert one.upstream_provider == "Infermatic" and one.total_cost == 0.0015
    assert (one.input_tokens, one.output_tokens) == (5, 3) and one.error is None
    text = (result.folder.path / stats_file_name("or")).read_text()
    assert KEY in registered_secrets() and KEY not in text
    manifest = json.loads((result.folder.path / "manifest.json").read_text())
    assert manifest["providers"]["or"]["stats_later"]["fetched"] == 3
    # The records file is untouched by the second pass: append-only, as the run wrote it.
    assert "Infermatic" not in result.folder.records_path.read_text()
    report = write_report(result.folder.path).md.read_text()
    assert "## Fetched after the run" in report
    row = next(
        line for line in report.splitlines() if line.startswith("| or ") and "single" in line
    )
    assert "Infermatic×3" in row and "1,250" in row and "1,200" in row and "0.004500" in row


def test_stats_that_never_come_are_bounded_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeOpenRouter(late=0)
    fake.gone.add("gen-0002")
    fake.refused.add("gen-0003")
    with fake.server:
        result = _run(fake, tmp_path, monkeypatch)
    assert result.status == "completed"
    assert fake.asked["gen-0002"] == 5  # the bounded retries
    assert fake.asked["gen-0003"] == 1  # a refusal is not asked again
    assert fake.asked["gen-0004"] == 1
    stats = read_later_stats(result.folder.path, "or")
    errors = sorted(s.error or "" for s in stats.values())
    assert errors == ["", "HTTP 403", "not available after 5 attempts"]
    entry = json.loads((result.folder.path / "manifest.json").read_text())["providers"]["or"]
    assert entry["stats_later"]["missing"] == 2
    report = write_report(result.folder.path).md.read_text()
    row = next(
        line for line in report.splitlines() if line.startswith("| or ") and "single" in line
    )
    assert "Infermatic×1" in row
    assert "did not come for 2 responses" in report


def test_openrouter_is_detected_from_its_host() -> None:
    def provider(**extra: Any) -> Any:
        config = parse_config(
            {
                "name": "x",
                "providers": [{"id": "p", "kind": "openai_compatible", "model": "m", **extra}],
                "experiments": [{"kind": "single", "prompt_cache": "as_sent"}],
            }
        )
        settings = config.providers[0]
        return provider_class(settings.kind)(settings)

    assert provider(base_url="https://openrouter.ai/api/v1").fetches_stats_later()
    assert not provider(base_url="http://127.0.0.1:8000/v1").fetches_stats_later()
    assert not provider(
        base_url="https://openrouter.ai/api/v1", generation_stats=False
    ).fetches_stats_later()
