"""`prompt_cache` without a server: hits judged from the cached-token counts, the lifetime
bracket (consistent, disagreeing, open-ended), the paired TTFT saving and the money, the
answer's words, the settings' one-line errors; and the truth server's minimum and routing."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.prompt_cache import (
    is_hit,
    lifetime_bracket,
    probe_rows,
    prompt_cache_figures,
)
from labkit.analysis.stats import proportion
from labkit.config import load_config
from labkit.experiments.prompt_cache import PromptCacheSettings, setting_label
from labkit.records import RequestRecord
from labkit.truth.reply import Responder, read_request
from labkit.truth.schedule import TruthSchedule
from labkit.wording.prompt_cache import prompt_cache_answer
from tests.support.records import T0, make_record

pytestmark = pytest.mark.unit

PROMPT = 200


def _rec(
    phase: str, setting: float, probe: str, role: str, cached: int | None, **kw: Any
) -> RequestRecord:
    return make_record(
        experiment="prompt_cache",
        input_tokens=PROMPT,
        cached_tokens=cached,
        tags={"phase": phase, "setting": setting, "probe": probe, "role": role},
        **kw,
    )


def _probe(
    phase: str, setting: float, probe: str, hit: bool, gap_s: float = 0.0, **kw: Any
) -> list[RequestRecord]:
    prime = _rec(phase, setting, probe, "prime", 10, ttft_ms=300.0)
    repeat = _rec(
        phase,
        setting,
        probe,
        "repeat",
        PROMPT - 1 if hit else 10,
        ttft_ms=100.0 if hit else 300.0,
        started_at=T0 + timedelta(seconds=gap_s),
        **kw,
    )
    return [prime, repeat]


def test_a_hit_needs_the_share_of_the_prompt_cached_not_the_templates_opening() -> None:
    assert is_hit(_rec("length", 1, "a", "repeat", 199), 0.5) is True
    assert is_hit(_rec("length", 1, "a", "repeat", 24), 0.5) is False
    assert is_hit(_rec("length", 1, "a", "repeat", None), 0.5) is None


def test_rows_count_hits_per_setting_with_an_exact_interval() -> None:
    records = _probe("length", 64, "a", False) + _probe("length", 256, "b", True)
    records += _probe("length", 256, "c", True)
    rows = probe_rows([("length", 64, "64"), ("length", 256, "256")], records, 0.5)
    assert [(r.repeats, r.hits) for r in rows] == [(1, 0), (2, 2)]
    assert rows[1].hit_rate == proportion(2, 2) and rows[0].cached_tokens_p50 == 10


def test_the_lifetime_lies_between_the_longest_hit_and_the_shortest_miss() -> None:
    records = []
    for k, (gap, hit) in enumerate([(0.5, True), (1.0, True), (2.0, False), (4.0, False)]):
        records += _probe("gap", gap, f"g{k}", hit, gap_s=gap)
    rows = probe_rows([("gap", g, str(g)) for g in (0.5, 1.0, 2.0, 4.0)], records, 0.5)
    life = lifetime_bracket(rows)
    assert life is not None and life.consistent and life.trials == 4
    assert (life.lo_s, life.hi_s, life.value_s) == (1.0, 2.0, 1.5)


def test_a_miss_before_a_later_hit_widens_the_bracket_and_says_so() -> None:
    records = _probe("gap", 1.0, "a", False, gap_s=1.0) + _probe("gap", 2.0, "b", True, gap_s=2.0)
    life = lifetime_bracket(probe_rows([("gap", 1.0, "1"), ("gap", 2.0, "2")], records, 0.5))
    assert life is not None and not life.consistent and (life.lo_s, life.hi_s) == (1.0, 2.0)


def test_no_miss_leaves_only_a_lower_bound() -> None:
    records = _probe("gap", 1.0, "a", True, gap_s=1.0)
    life = lifetime_bracket(probe_rows([("gap", 1.0, "1")], records, 0.5))
    assert life is not None and (life.lo_s, life.hi_s, life.value_s) == (1.0, None, 1.0)
    assert lifetime_bracket([]) is None


def test_the_saving_pairs_each_hit_with_its_cold_prime_and_prices_the_cached_tokens() -> None:
    records = []
    for k in range(3):
        records += _probe("length", 256, f"p{k}", True)
    records += _probe("length", 64, "cold", False)
    f = prompt_cache_figures(
        [("length", 64, "64 tokens"), ("length", 256, "256 tokens")],
        records,
        hit_share=0.5,
        min_tokens=128,
        prices=(2.0, 0.5),
    )
    assert f.ttft_saved is not None and f.ttft_saved.value == 200.0 and f.ttft_saved.n == 3
    assert f.money is not None and f.money.saved_per_hit_usd.value == pytest.approx(199 * 1.5 / 1e6)
    assert f.money.saved_share == pytest.approx(199 * 1.5 / (200 * 2.0))
    text = prompt_cache_answer(f)
    assert text.startswith("75% (95% CI") and "a hit cut TTFT by 200 ms" in text
    assert "64 tokens: 0 of 1 hit; 256 tokens: 3 of 3 hit" in text
    assert "documented minimum 128" in text


def test_without_cached_counts_nothing_is_called_a_hit() -> None:
    records = [_rec("length", 64, "a", "prime", None), _rec("length", 64, "a", "repeat", None)]
    f = prompt_cache_figures([("length", 64, "64")], records, hit_share=0.5, min_tokens=None)
    assert not f.cached_reported and f.rows[0].unreported == 1 and f.rows[0].repeats == 0
    assert "reported no cached-token count" in prompt_cache_answer(f)


def test_labels() -> None:
    assert setting_label("evict", 1) == "after 1 other prompt"
    assert setting_label("routing", 0) == "without a routing key"
    assert setting_label("length", 1024) == "1,024 tokens"


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"gaps_s": [1, 1]}, "gaps_s lists each value once"),
        ({"prices": {"input": 1, "cached_input": 2}}, "cached_input costs more than input"),
        ({"hit_share": 0}, "hit_share"),
    ],
)
def test_bad_settings_get_one_line(entry: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError) as err:
        PromptCacheSettings.model_validate({"kind": "prompt_cache", **entry})
    assert says in str(err.value)


def test_the_example_config_loads() -> None:
    path = Path(__file__).resolve().parents[2] / "labkit" / "examples" / "prompt_cache.yaml"
    config = load_config(path)
    assert config.experiments[0].kind == "prompt_cache"


def _served(
    responder: Responder, schedule: TruthSchedule, text: str, key: str | None = None
) -> int:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
    if key is not None:
        body["prompt_cache_key"] = key
    request = read_request("chat", json.dumps(body).encode())
    return responder.reply(schedule, request).cached_tokens


def test_the_truth_server_caches_no_prompt_under_its_minimum() -> None:
    schedule = TruthSchedule(cache_tokens=10_000, cache_min_tokens=50)
    responder = Responder("t")
    short, long = "a b c " * 5, "a b c " * 40
    _served(responder, schedule, short)
    assert _served(responder, schedule, short) == 0
    _served(responder, schedule, long)
    assert _served(responder, schedule, long) > 50


def test_the_truth_servers_replicas_route_by_key_else_in_turn() -> None:
    schedule = TruthSchedule(cache_tokens=10_000, cache_replicas=2)
    responder = Responder("t")
    text = "x y z " * 30
    _served(responder, schedule, text)
    assert _served(responder, schedule, text) == 0  # the other replica, in turn
    _served(responder, schedule, "k " + text, key="abc")
    assert _served(responder, schedule, "k " + text, key="abc") > 0  # the key's replica
    assert TruthSchedule().cache_replicas == 1 and TruthSchedule().cache_min_tokens == 0
