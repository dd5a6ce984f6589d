"""The fake server's prefix cache on its own: prefixes found, LRU eviction by tokens, the
lifetime, llama.cpp's last-token rule; and what the plan makes of cached tokens."""

from __future__ import annotations

import random

import pytest

from labkit.truth.cache import PrefixCache
from labkit.truth.schedule import TruthSchedule, plan

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_longest_shared_prefix_is_cached_but_never_the_last_prompt_token() -> None:
    cache = PrefixCache(Clock())
    assert cache.lookup([1, 2, 3], 0) == 0
    cache.store([1, 2, 3, 9, 9], capacity=100, lifetime_s=0)  # a prompt and its reply
    assert cache.lookup([1, 2, 3, 4], 0) == 3
    assert cache.lookup([1, 2, 3], 0) == 2  # a repeated prompt: all but its last token
    assert cache.lookup([1, 2, 3, 9, 9, 7], 0) == 5  # the reply is cached too
    assert cache.lookup([5, 2, 3], 0) == 0


def test_the_least_recently_used_entry_goes_when_the_tokens_exceed_the_capacity() -> None:
    cache = PrefixCache(Clock())
    cache.store([1, 1, 1, 1], capacity=8, lifetime_s=0)
    cache.store([2, 2, 2, 2], capacity=8, lifetime_s=0)
    assert cache.lookup([1, 1, 1, 1, 5], 0) == 4  # entry 1 is now the most recently used
    cache.store([3, 3, 3, 3], capacity=8, lifetime_s=0)
    assert cache.tokens == 8
    assert cache.lookup([2, 2, 2, 2, 5], 0) == 0  # evicted
    assert cache.lookup([1, 1, 1, 1, 5], 0) == 4 and cache.lookup([3, 3, 3, 3, 5], 0) == 4
    cache.store([3, 3, 3, 3, 4, 4], capacity=8, lifetime_s=0)  # extends an entry: replaces it
    assert cache.tokens == 6  # and 6 + 4 > 8 evicts the least recently used, entry 1
    assert cache.lookup([3, 3, 3, 3, 4, 4, 5], 0) == 6 and cache.lookup([1, 1, 1, 1, 5], 0) == 0


def test_an_entry_expires_its_lifetime_after_its_last_use() -> None:
    clock = Clock()
    cache = PrefixCache(clock)
    cache.store([1, 2, 3], capacity=100, lifetime_s=10)
    clock.now = 9
    assert cache.lookup([1, 2, 3, 4], 10) == 3  # used: its lifetime starts again
    clock.now = 18
    assert cache.lookup([1, 2, 3, 4], 10) == 3
    clock.now = 28.5
    assert cache.lookup([1, 2, 3, 4], 10) == 0 and cache.tokens == 0


def test_cached_prompt_tokens_cost_their_own_rate() -> None:
    s = TruthSchedule(first_token_ms=10, prefill_ms_per_token=1.0, cached_ms_per_token=0.1)
    assert plan(s, 100, None, random.Random(0), cached_tokens=60).first_ms == pytest.approx(
        10 + 40 * 1.0 + 60 * 0.1
    )
    assert plan(s, 100, None, random.Random(0)).first_ms == 10 + 100
