"""The one cost definition (`labkit.pricing`) against costs worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.pricing import (
    PriceEntry,
    frame_costs,
    price_table,
    record_cost,
    token_cost,
    usage_cost,
)
from labkit.records import Usage
from tests.support.records import make_record

pytestmark = pytest.mark.unit

#: A made-up table (labkit ships no prices): gpt-x at openai, claude-x at anthropic, with a
#: price change for gpt-x on 2025-06-01 12:00 UTC.
TABLE = price_table(
    [
        {
            "provider": "openai",
            "model": "gpt-x",
            "date": "2025-01-01",
            "input": 2.50,
            "output": 10.00,
            "cached_read": 1.25,
        },
        {
            "provider": "openai",
            "model": "gpt-x",
            "date": "2025-06-01T12:00:00",
            "input": 1.00,
            "output": 4.00,
            "cached_read": 0.50,
        },
        {
            "provider": "anthropic",
            "model": "claude-x",
            "date": "2025-01-01",
            "currency": "USD",
            "input": 3.00,
            "output": 15.00,
            "cached_read": 0.30,
            "cache_write": 3.75,
        },
        {"model": "open-x", "date": "2025-01-01", "input": 0.20, "output": 0.60},
    ]
)


def test_openai_cached_tokens_by_hand() -> None:
    # 1,200 prompt tokens of which 1,024 cached; 300 output tokens of which 100 reasoning.
    # Uncached: (1200 − 1024) × 2.50 / 1e6 = 0.00044; cached: 1024 × 1.25 / 1e6 = 0.00128;
    # output (reasoning billed as output): 300 × 10 / 1e6 = 0.003. Total 0.00472.
    entry = TABLE.entry_for("openai", "gpt-x", datetime(2025, 3, 1, tzinfo=UTC))
    assert entry is not None
    usage = Usage(
        input_tokens=1200, cached_input_tokens=1024, output_tokens=300, reasoning_tokens=100
    )
    cost = usage_cost(usage, entry)
    assert cost is not None
    assert cost.input == pytest.approx(0.00044)
    assert cost.cached_read == pytest.approx(0.00128)
    assert cost.cache_write == 0
    assert cost.output == pytest.approx(0.003)
    assert cost.total == pytest.approx(0.00472)
    assert (cost.currency, cost.price_date) == ("USD", "2025-01-01")


def test_anthropic_cache_read_and_write_by_hand() -> None:
    # Anthropic reports input_tokens 50, cache_read 2,000, cache_creation 1,000: the record's
    # input_tokens is their sum, 3,050. Uncached 50 × 3 / 1e6 = 0.00015; read 2000 × 0.30 /
    # 1e6 = 0.0006; write 1000 × 3.75 / 1e6 = 0.00375; output 400 × 15 / 1e6 = 0.006.
    # Total 0.0105.
    entry = TABLE.entry_for("anthropic", "claude-x", datetime(2025, 3, 1, tzinfo=UTC))
    assert entry is not None
    usage = Usage(
        input_tokens=3050,
        cached_input_tokens=2000,
        cache_write_input_tokens=1000,
        output_tokens=400,
    )
    cost = usage_cost(usage, entry)
    assert cost is not None
    assert cost.total == pytest.approx(0.00015 + 0.0006 + 0.00375 + 0.006)


def test_the_entry_in_force_at_the_request_is_used() -> None:
    before = TABLE.entry_for("openai", "gpt-x", datetime(2025, 6, 1, 11, 59, tzinfo=UTC))
    after = TABLE.entry_for("openai", "gpt-x", datetime(2025, 6, 1, 12, 0, tzinfo=UTC))
    assert before is not None and after is not None
    assert (before.input, after.input) == (2.50, 1.00)
    assert after.date_iso == "2025-06-01T12:00:00+00:00"
    # Before the first date, and a model no entry names: no price in force.
    assert TABLE.entry_for("openai", "gpt-x", datetime(2024, 12, 31, tzinfo=UTC)) is None
    assert TABLE.entry_for("openai", "other", datetime(2025, 3, 1, tzinfo=UTC)) is None
    # An entry with no provider prices the model at any provider.
    anywhere = TABLE.entry_for("my-vllm", "open-x", datetime(2025, 3, 1, tzinfo=UTC))
    assert anywhere is not None and anywhere.input == 0.20


def test_a_price_change_mid_run_prices_each_row_by_its_own_date() -> None:
    # Two requests of 1,000 in / 100 out either side of the change:
    # before: 1000 × 2.50 / 1e6 + 100 × 10 / 1e6 = 0.0035; after: 0.001 + 0.0004 = 0.0014.
    frame = pd.DataFrame(
        {
            "provider": ["openai", "openai", "openai"],
            "model": ["gpt-x", "gpt-x", "gpt-x"],
            "started_at": [
                "2025-06-01T11:00:00+00:00",
                "2025-06-01T13:00:00+00:00",
                "2025-06-01T13:00:01+00:00",
            ],
            "usage.input_tokens": [1000, 1000, None],
            "usage.output_tokens": [100, 100, 5],
        }
    )
    costs = frame_costs(frame, TABLE)
    assert costs["cost"].iloc[0] == pytest.approx(0.0035)
    assert costs["cost"].iloc[1] == pytest.approx(0.0014)
    assert pd.isna(costs["cost"].iloc[2])  # unknown input: no cost, never a guess
    assert list(costs["price_date"][:2]) == ["2025-01-01", "2025-06-01T12:00:00+00:00"]


def test_unknown_counts_give_no_cost() -> None:
    entry = PriceEntry(model="m", date=datetime(2025, 1, 1, tzinfo=UTC), input=1, output=1)
    assert usage_cost(Usage(output_tokens=3), entry) is None
    assert token_cost(entry, 10, 0, cached_read_tokens=20).input == 0  # never below zero


BASE = {
    "name": "x",
    "providers": [{"kind": "openai_compatible", "id": "a", "base_url": "http://x", "model": "m"}],
    "experiments": [{"kind": "single"}],
}


def test_config_prices_are_read_and_dated() -> None:
    config = parse_config(
        {
            **BASE,
            "prices": [
                {"provider": "a", "model": "m", "date": "2025-01-01", "input": 1, "output": 2}
            ],
        }
    )
    entry = config.price_table().entry_for("a", "m", datetime(2025, 2, 1, tzinfo=UTC))
    assert entry is not None and entry.output == 2
    assert not parse_config(BASE).price_table()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"provider": "b", "model": "m", "date": "2025-01-01", "input": 1, "output": 2},
            "prices[0].provider: no provider with id 'b'",
        ),
        ({"model": "m", "date": "2025-01-01", "input": -1, "output": 2}, "prices[0].input"),
        ({"model": "m", "date": "soon", "input": 1, "output": 2}, "expected an ISO date"),
        ({"model": "m", "input": 1, "output": 2}, "prices[0].date: required field is missing"),
        (
            {"model": "m", "date": "2025-01-01", "input": 1, "output": 2, "cachd": 1},
            "prices[0].cachd: unknown field",
        ),
    ],
)
def test_bad_prices_get_one_line(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**BASE, "prices": [entry]})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_two_entries_of_one_date_are_refused() -> None:
    same = {"model": "m", "date": "2025-01-01", "input": 1, "output": 2}
    with pytest.raises(ConfigError, match="two entries for m dated 2025-01-01"):
        parse_config({**BASE, "prices": [same, {**same, "output": 3}]})


@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["openai", "anthropic", "my-vllm", "unpriced"]),
            st.sampled_from(["gpt-x", "claude-x", "open-x"]),
            st.integers(-400, 400),  # days from 2025-01-01
            st.integers(0, 100_000),
            st.integers(0, 5_000),
            st.integers(0, 50_000),
            st.integers(0, 50_000),
        ),
        max_size=30,
    )
)
@settings(max_examples=60, deadline=None)
def test_the_columnar_costs_are_each_records_cost(rows: list[tuple[Any, ...]]) -> None:
    """`frame_costs` (columnar) and `record_cost` (one record) price alike: one definition."""
    base = datetime(2025, 1, 1, tzinfo=UTC)
    frame = pd.DataFrame(
        {
            "provider": [r[0] for r in rows],
            "model": [r[1] for r in rows],
            "started_at": [(base + timedelta(days=r[2], hours=12)).isoformat() for r in rows],
            "usage.input_tokens": [r[3] for r in rows],
            "usage.output_tokens": [r[4] for r in rows],
            "usage.cached_input_tokens": [r[5] for r in rows],
            "usage.cache_write_input_tokens": [r[6] for r in rows],
        },
        dtype=object,
    )
    got = frame_costs(frame, TABLE)
    for k, (provider, model, days, i, o, c, w) in enumerate(rows):
        record = make_record(
            provider=provider, model=model, started_at=base + timedelta(days=days, hours=12)
        ).model_copy(
            update={"usage": Usage(input_tokens=i, output_tokens=o, cached_input_tokens=c,
                                   cache_write_input_tokens=w)}
        )  # fmt: skip
        want = record_cost(record, TABLE)
        if want is None:
            assert pd.isna(got["cost"].iloc[k])
        else:
            assert got["cost"].iloc[k] == pytest.approx(want.total, rel=1e-12, abs=1e-15)
            assert got["price_date"].iloc[k] == want.price_date
