"""The truth server's batch-dependent selection (`labkit.truth.batch`): a temperature-0
request alone decodes its likeliest tokens; one read while more than `batch_flip_above`
requests are held gets its near-tie steps flipped to the second candidate, and the truth log
says which batch each request saw and which steps flipped."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx
import pytest

from labkit.errors import ConfigError
from labkit.truth.batch import batch_flips, batch_seen
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from labkit.truth.schedule import TruthSchedule

ABOVE = 2
MARGIN = 0.3
SCHEDULE: dict[str, Any] = {
    "first_token_ms": 200,
    "token_interval_ms": 1,
    "tokens": 12,
    "sampling": True,
    "batch_flip_above": ABOVE,
    "batch_flip_margin": MARGIN,
    "batch_flip_p": 1.0,
}
STEPS = [[("a", 0.5), ("b", 0.45)], [("a", 0.9), ("b", 0.1)], [("c", 0.4), ("d", 0.35)]]


@pytest.mark.unit
def test_flips_only_near_ties_of_greedy_requests_in_large_batches() -> None:
    s = TruthSchedule.model_validate(SCHEDULE)
    rng = random.Random(0)
    assert batch_flips(s, ABOVE + 1, 0.0, STEPS, rng) == [0, 2]
    assert batch_flips(s, ABOVE, 0.0, STEPS, rng) == []
    assert batch_flips(s, ABOVE + 1, 1.0, STEPS, rng) == []
    assert batch_flips(TruthSchedule(sampling=True), 100, 0.0, STEPS, rng) == []
    never = s.with_overrides({"batch_flip_p": 0})
    assert batch_flips(never, ABOVE + 1, 0.0, STEPS, rng) == []


@pytest.mark.unit
def test_the_batch_counts_the_request_and_stops_at_the_slots() -> None:
    assert batch_seen(TruthSchedule(), 0) == 1
    assert batch_seen(TruthSchedule(), 7) == 8
    assert batch_seen(TruthSchedule(slots=4), 7) == 4


@pytest.mark.unit
def test_a_bad_flip_setting_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match="batch_flip_p"):
        TruthSchedule().with_overrides({"batch_flip_p": "2"})


def _near_ties(t: TruthRequest) -> list[int]:
    return [i for i, s in enumerate(t.steps) if s.candidates[0][1] - s.candidates[1][1] < MARGIN]


@pytest.mark.integration
def test_the_log_says_the_batch_each_request_saw_and_what_it_flipped(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Tell me about lighthouses."}],
        "temperature": 0,
        "stream": False,
    }

    async def go(url: str) -> list[str]:
        async with httpx.AsyncClient(timeout=30) as client:
            alone = await client.post(url, json=body)
            together = await asyncio.gather(*(client.post(url, json=body) for _ in range(5)))
        replies = [alone, *together]
        assert all(r.status_code == 200 for r in replies)
        return [r.json()["choices"][0]["message"]["content"] for r in replies]

    with TruthServer(truth_log=log, **SCHEDULE) as server:
        texts = asyncio.run(go(server.base_url + "/chat/completions"))
    requests = read_truth_log(log).requests
    assert len(requests) == 6
    first = requests[0]
    assert first.batch == 1 and first.flipped_steps == []
    ties = _near_ties(first)
    assert ties, "the prompt's distributions must hold a near-tie for this test to mean anything"
    # Alone: the likeliest token at every step.
    assert all(s.token == s.candidates[0][0] for s in first.steps)
    assert any(t.batch is not None and t.batch > ABOVE for t in requests[1:])
    for t, text in zip(requests, texts, strict=True):
        assert t.batch is not None and 1 <= t.batch <= 6
        assert t.flipped_steps == (ties if t.batch > ABOVE else [])
        for i, (s, alone) in enumerate(zip(t.steps, first.steps, strict=True)):
            # Greedy on what it reports; at a flip the top two swapped places.
            assert s.token == s.candidates[0][0]
            if i in t.flipped_steps:
                (a, pa), (b, pb) = alone.candidates[:2]
                assert list(s.candidates[:2]) == [(b, pa), (a, pb)]
            else:
                assert s == alone
        assert text == "".join(s.token for s in t.steps)


@pytest.mark.integration
def test_without_the_keys_nothing_is_counted_or_flipped(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    schedule = {k: v for k, v in SCHEDULE.items() if not k.startswith("batch_")}
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi."}], "temperature": 0}

    async def go(url: str) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            await asyncio.gather(*(client.post(url, json=body) for _ in range(4)))

    with TruthServer(truth_log=log, **schedule) as server:
        asyncio.run(go(server.base_url + "/chat/completions"))
    requests = read_truth_log(log).requests
    assert len(requests) == 4
    assert all(t.batch is None and t.flipped_steps == [] for t in requests)
    assert all(s.token == s.candidates[0][0] for t in requests for s in t.steps)
