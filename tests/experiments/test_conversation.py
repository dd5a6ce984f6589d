"""`conversation`: sessions that resend their history, against a server with a simulated
prefix cache on 127.0.0.1 (`tests/prefix_cache_server.py`), resume included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.experiments.conversation import cached_tokens
from labkit.figures import ConversationFigures
from labkit.records import RequestRecord
from labkit.runner import RunOptions, prepare_run
from labkit.runner.run import RunResult, prepare_resume
from tests.support.prefix_cache_server import PrefixCacheServer

pytestmark = pytest.mark.integration


def _config(
    base_url: str,
    store_text: bool = True,
    provider: dict[str, Any] | None = None,
    **experiment: Any,
) -> Any:
    return parse_config(
        {
            "name": "conv",
            "store_text": store_text,
            "providers": [provider or {"id": "l", "kind": "llamacpp", "base_url": base_url}],
            "experiments": [
                {
                    "kind": "conversation",
                    "sessions": 3,
                    "turns": 3,
                    "concurrency": 2,
                    "warmup": 0,
                    "user_tokens": 20,
                    "params": {"max_tokens": 5},
                    **experiment,
                }
            ],
        }
    )


def _run(tmp_path: Path, store_text: bool = True, **experiment: Any) -> tuple[RunResult, Any]:
    async def go() -> tuple[RunResult, Any]:
        async with PrefixCacheServer() as server:
            config = _config(server.base_url, store_text, **experiment)
            result = await prepare_run(config, RunOptions(out_dir=tmp_path)).run()
            return result, server

    return asyncio.run(go())


def _resume(folder: Path) -> tuple[RunResult, PrefixCacheServer]:
    async def go() -> tuple[RunResult, PrefixCacheServer]:
        async with PrefixCacheServer() as server:
            runner = prepare_resume(folder)
            settings = runner.config.providers[0].model_copy(update={"base_url": server.base_url})
            runner.config = runner.config.model_copy(update={"providers": [settings]})
            return await runner.run(), server

    return asyncio.run(go())


def _stored(result: RunResult) -> list[RequestRecord]:
    lines = result.folder.records_path.read_text().splitlines()
    return [RequestRecord.from_json_line(line) for line in lines]


def _figures(result: RunResult) -> ConversationFigures:
    figures = result.lab.answers[0].figures
    assert isinstance(figures, ConversationFigures)
    return figures


def test_each_turn_resends_the_history_with_the_models_own_answers(tmp_path: Path) -> None:
    result, server = _run(tmp_path, store_text=False)
    records = _stored(result)
    assert len(records) == 2 * 3 * 3 and all(r.ok for r in records)
    # store_text: false holds on disk, though each next turn needed the answer.
    assert all(r.output_text is None for r in records)
    assert {(r.tags["cache"], r.tags["session"], r.tags["turn"]) for r in records} == {
        (c, s, t) for c in ("on", "off") for s in range(3) for t in range(3)
    }
    assert {r.plan_key for r in records} == {
        f"conversation/{c}/s{s}/t{t}" for c in ("on", "off") for s in range(3) for t in range(3)
    }
    for body in server.bodies:
        roles = [m["role"] for m in body["messages"]]
        turn = len(roles) // 2
        assert roles == ["user", "assistant"] * turn + ["user"]
        for i, message in enumerate(body["messages"]):
            if message["role"] == "assistant":
                assert message["content"] in server.answers  # the model's own answer
            if message["role"] == "user" and i > 0:
                assert message["content"].startswith(f"Turn {i // 2 + 1}:")
        assert isinstance(body["cache_prompt"], bool)
    by_turn = {(r.tags["cache"], r.tags["session"], r.tags["turn"]): r for r in records}
    # Cache on: the whole previous turn is served from the cache; off: nothing.
    for r in records:
        cached = cached_tokens(r)
        assert cached is not None and r.usage.input_tokens is not None
        if r.tags["cache"] == "off":
            assert cached == 0
        elif r.tags["turn"] == 0:
            assert cached <= 1  # the chat template's first token, shared by every prompt
        else:  # the previous turn's prompt, the assistant marker and its answer
            prev = by_turn[(r.tags["cache"], r.tags["session"], int(r.tags["turn"]) - 1)]
            assert prev.usage.input_tokens is not None and prev.usage.output_tokens is not None
            assert cached == prev.usage.input_tokens + 1 + prev.usage.output_tokens
    figures = _figures(result)
    on = [t for t in figures.turns if t.cache == "on"]
    off = [t for t in figures.turns if t.cache == "off"]
    assert [t.turn for t in on] == [0, 1, 2] and [t.ok for t in on] == [3, 3, 3]
    assert (
        on[0].reuse_p50 is not None
        and on[0].reuse_p50 < 0.1
        and on[2].reuse_p50 is not None
        and on[2].reuse_p50 > 0.6
    )
    # What a perfect prefix cache could serve, but for the template around the answer.
    assert on[2].reusable_p50 is not None and abs(on[2].reuse_p50 - on[2].reusable_p50) < 0.05
    assert all(t.reuse_p50 == 0 for t in off)
    assert on[2].input_tokens_p50 == off[2].input_tokens_p50  # the same history length
    assert [v.complete_sessions for v in figures.variants] == [3, 3]
    answer = result.lab.answers[0]
    assert answer.status == "ok" and "cut TTFT" in answer.answer, answer.answer


def _cut(result: RunResult, drop: set[tuple[str, int, int]]) -> None:
    """Remove the records of `drop` (cache, session, turn): a run that died there."""
    path = result.folder.records_path
    kept = [
        line
        for line in path.read_text().splitlines()
        if (lambda t: (t.get("cache"), t.get("session"), t.get("turn")))(json.loads(line)["tags"])
        not in drop
    ]
    path.write_text("\n".join(kept) + "\n")


def test_resume_continues_a_cut_session_from_its_first_missing_turn(tmp_path: Path) -> None:
    first, _ = _run(tmp_path, cache=["on"])
    _cut(first, {("on", 1, 2), ("on", 2, 1), ("on", 2, 2)})
    before = {r.record_id: r for r in _stored(first)}
    second, server = _resume(first.folder.path)
    # Only the missing turns were sent, each with the recorded history.
    assert len(server.bodies) == 3
    assert sorted(len(b["messages"]) for b in server.bodies) == [3, 5, 5]
    recorded_answers = {r.output_text for r in before.values()}
    for body in server.bodies:
        for message in body["messages"][:-1]:
            if message["role"] == "assistant":
                assert message["content"] in recorded_answers | set(server.answers)
    records = _stored(second)
    assert len(records) == 9
    runs = {r.tags["session"]: set() for r in records}
    for r in records:
        runs[r.tags["session"]].add(r.tags["session_run"])
    assert all(len(v) == 1 for v in runs.values())  # resumed passes, not new ones
    assert _figures(second).variants[0].complete_sessions == 3


def test_resume_without_stored_text_restarts_the_session_from_turn_0(tmp_path: Path) -> None:
    first, _ = _run(tmp_path, store_text=False, cache=["on"])
    _cut(first, {("on", 1, 2)})
    second, server = _resume(first.folder.path)
    assert [len(b["messages"]) for b in server.bodies] == [1, 3, 5]  # session 1 from turn 0
    records = [r for r in _stored(second) if r.tags["session"] == 1]
    assert len(records) == 2 + 3 and len({r.tags["session_run"] for r in records}) == 2
    figures = _figures(second)
    assert [t.ok for t in figures.turns] == [3, 3, 3]  # the latest pass only
    assert figures.variants[0].complete_sessions == 3


def test_a_provider_without_a_cache_switch_skips_the_off_variant(tmp_path: Path) -> None:
    async def go() -> RunResult:
        async with PrefixCacheServer() as server:
            url = server.base_url + "/v1"
            compatible = {"id": "l", "kind": "openai_compatible", "model": "m", "base_url": url}
            config = _config(url, provider=compatible, sessions=1, turns=2)
            return await prepare_run(config, RunOptions(out_dir=tmp_path)).run()

    result = asyncio.run(go())
    records = _stored(result)
    assert {r.tags["cache"] for r in records} == {"on"} and len(records) == 2
    answer = result.lab.answers[0]
    assert "no prompt-cache switch" in answer.answer
    assert _figures(result).cache_switch is False
