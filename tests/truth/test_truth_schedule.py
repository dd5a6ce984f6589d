"""The truth server's schedules: what `plan` makes of each setting, and the per-request file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from labkit.errors import ConfigError
from labkit.truth.process import SCHEDULE_KEYS
from labkit.truth.schedule import TruthSchedule, load_request_schedules, plan

pytestmark = pytest.mark.unit


def test_fixed_schedule_one_token_per_event_capped_by_max_tokens() -> None:
    p = plan(
        TruthSchedule(first_token_ms=50, token_interval_ms=2, tokens=10), 7, 4, random.Random(0)
    )
    assert p.first_ms == 50
    assert p.gaps_ms == [2, 2, 2]
    assert p.event_tokens == [1, 1, 1, 1]
    assert p.capped and p.output_tokens == 4


def test_prefill_grows_with_the_prompt_and_bursts_group_tokens() -> None:
    s = TruthSchedule(
        ttft_ms=10, token_interval_ms=2, tokens=7, prefill_ms_per_token=0.5, tokens_per_event=3
    )
    p = plan(s, 100, None, random.Random(0))
    assert p.first_ms == 10 + 50
    assert p.event_tokens == [3, 3, 1]
    assert p.gaps_ms == [6, 6]  # an event every 3 token intervals
    assert not p.capped


def test_jitter_is_seeded_bounded_and_never_negative() -> None:
    s = TruthSchedule(first_token_ms=1, token_interval_ms=1, tokens=50, jitter_ms=2)
    a, b = plan(s, 0, None, random.Random(7)), plan(s, 0, None, random.Random(7))
    assert a == b
    assert all(0 <= g <= 3 for g in a.gaps_ms)
    assert len(set(a.gaps_ms)) > 1


def test_overrides_and_the_per_request_file(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text('{"ttft_ms": 120, "tokens": 3}\n\n{"interval_ms": 9}\n')
    schedules = load_request_schedules(f, TruthSchedule(tokens=5))
    # the older names (ttft_ms, interval_ms) are read as first_token_ms, token_interval_ms
    assert [(s.first_token_ms, s.tokens, s.token_interval_ms) for s in schedules] == [
        (120, 3, 10.0),
        (50, 5, 9.0),
    ]
    f.write_text('{"speed": 3}\n')
    with pytest.raises(ConfigError, match=r"s.jsonl:1: unknown schedule keys"):
        load_request_schedules(f, TruthSchedule())
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        TruthSchedule(first_token_ms=-1)
    with pytest.raises(ConfigError, match="bad schedule value for tokens"):
        TruthSchedule().with_overrides({"tokens": "many"})
    assert TruthSchedule().with_overrides({"usage": "false", "slots": "2"}).slots == 2


def test_the_process_launcher_knows_every_schedule_setting() -> None:
    assert list(SCHEDULE_KEYS) == list(TruthSchedule.model_fields)
    for key, kind in SCHEDULE_KEYS.items():
        default = TruthSchedule.model_fields[key].default
        assert default is None or isinstance(default, kind), key


def test_an_end_token_is_decoded_after_a_reply_that_stops_on_its_own() -> None:
    s = TruthSchedule(first_token_ms=5, token_interval_ms=2, tokens=4, end_token=True)
    stop = plan(s, 3, None, random.Random(0))
    assert stop.end_token and not stop.capped and stop.output_tokens == 4
    assert stop.end_gap_ms == 2 and stop.decode_ms == 3 * 2 + 2
    # a reply cut by max_tokens (or exactly as long: its end token would be one too many)
    for cap in (3, 4):
        cut = plan(s, 3, cap, random.Random(0))
        assert cut.capped and not cut.end_token and cut.end_gap_ms == 0
    # ignore_eos: never stops on its own, so max_tokens long
    long = plan(s, 3, 10, random.Random(0), ignore_eos=True)
    assert long.output_tokens == 10 and long.capped and not long.end_token
    assert plan(s.with_overrides({"end_token": False}), 3, None, random.Random(0)).end_gap_ms == 0
