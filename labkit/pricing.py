"""Money: a dated price table and what one request cost under it.

The user supplies the prices (``prices:`` in the config); labkit ships none, because it could
not keep them current. A table holds dated entries per provider × model: the entry in force
at a request's ``started_at`` is the latest one dated at or before it. Prices are per
million tokens, in the entry's currency. One cost definition, used everywhere (the report,
``compare``, the observatory, the watch's budget): `token_cost`. Which tokens each price
applies to: docs/pricing.md, "One cost definition".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, field_validator

if TYPE_CHECKING:
    import pandas as pd

    from labkit.records import RequestRecord, Usage

__all__ = [
    "PER_TOKENS",
    "CostBreakdown",
    "PriceEntry",
    "PriceTable",
    "check_one_per_date",
    "frame_costs",
    "price_table",
    "record_cost",
    "token_cost",
    "usage_cost",
]

#: Prices are per this many tokens.
PER_TOKENS = 1_000_000


class PriceEntry(BaseModel):
    """One model's prices at one provider from one date on (per 1M tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str | None = Field(
        default=None,
        description="A provider id from the config; left out, the entry applies to every "
        "provider serving `model` that has no entry of its own.",
    )
    model: str = Field(min_length=1, description="The model name, as the records give it.")
    date: datetime = Field(
        description="From when the prices hold (UTC): a date (its 00:00 UTC) or a date and time."
    )
    currency: str = Field(default="USD", min_length=1, max_length=8)
    input: NonNegativeFloat = Field(description="Uncached prompt tokens, per 1M.")
    output: NonNegativeFloat = Field(description="Output tokens (reasoning included), per 1M.")
    cached_read: NonNegativeFloat | None = Field(
        default=None, description="Prompt tokens read from the cache, per 1M (default: input)."
    )
    cache_write: NonNegativeFloat | None = Field(
        default=None, description="Prompt tokens written to the cache, per 1M (default: input)."
    )

    @field_validator("date", mode="before")
    @classmethod
    def _as_utc(cls, value: Any) -> Any:
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day, tzinfo=UTC)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError("expected an ISO date, e.g. 2025-06-01") from None
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return value

    @property
    def cached_read_price(self) -> float:
        """The cached-read price in force (the input price where none is given)."""
        return self.input if self.cached_read is None else self.cached_read

    @property
    def cache_write_price(self) -> float:
        """The cache-write price in force (the input price where none is given)."""
        return self.input if self.cache_write is None else self.cache_write

    @property
    def date_iso(self) -> str:
        """The entry's date as ISO text (a bare date where it is midnight UTC)."""
        d = self.date.astimezone(UTC)
        return d.date().isoformat() if d.time() == datetime.min.time() else d.isoformat()


class PriceTable(BaseModel):
    """The config's ``prices:``: dated entries per provider × model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: tuple[PriceEntry, ...] = ()

    @field_validator("entries")
    @classmethod
    def _one_per_date(cls, value: tuple[PriceEntry, ...]) -> tuple[PriceEntry, ...]:
        check_one_per_date(value)
        return value

    def __bool__(self) -> bool:
        return bool(self.entries)

    def entry_for(self, provider: str, model: str, at: datetime) -> PriceEntry | None:
        """The entry in force for `provider` × `model` at `at`: the latest dated at or before
        it, the provider's own entries first, then those for any provider. None where no
        entry is in force (before the first date, or a model the table does not price)."""
        when = at if at.tzinfo else at.replace(tzinfo=UTC)
        for scope in (provider, None):
            dated = [
                e
                for e in self.entries
                if e.provider == scope and e.model == model and e.date <= when
            ]
            if dated:
                return max(dated, key=lambda e: e.date)
        return None

    def priced(self, provider: str, model: str) -> bool:
        """Whether the table prices `model` at `provider` at any date."""
        return any(e.model == model and e.provider in (provider, None) for e in self.entries)


def check_one_per_date(entries: Iterable[PriceEntry]) -> None:
    """Raise ValueError where two entries price one provider × model from one date."""
    seen: set[tuple[str | None, str, datetime]] = set()
    for e in entries:
        key = (e.provider, e.model, e.date)
        if key in seen:
            who = f"{e.provider}/{e.model}" if e.provider else e.model
            raise ValueError(f"two entries for {who} dated {e.date_iso}")
        seen.add(key)


def price_table(entries: Iterable[PriceEntry | dict[str, Any]] | None) -> PriceTable:
    """A `PriceTable` from entries (or their mappings, as in a config)."""
    return PriceTable.model_validate({"entries": list(entries or ())})


@dataclass(frozen=True)
class CostBreakdown:
    """What one request cost, part by part, in `currency` units."""

    input: float
    cached_read: float
    cache_write: float
    output: float
    currency: str
    price_date: str

    @property
    def total(self) -> float:
        """The request's whole cost."""
        return self.input + self.cached_read + self.cache_write + self.output


def token_cost(
    price: PriceEntry,
    input_tokens: int,
    output_tokens: int,
    cached_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> CostBreakdown:
    """The cost of one request's tokens: the one cost definition (docs/pricing.md).

    `input_tokens` includes the cached reads and cache writes; `output_tokens` includes
    reasoning. The uncached rest of the prompt, ``input − cached read − cache write``, is
    billed at ``input`` and never counted below zero; a ``cached_read`` or ``cache_write``
    price left out is the ``input`` price.
    """
    prices = (price.input, price.output, price.cached_read_price, price.cache_write_price)
    parts = _parts(prices, input_tokens, output_tokens, cached_read_tokens, cache_write_tokens)
    return CostBreakdown(
        input=float(parts[0]),
        cached_read=float(parts[1]),
        cache_write=float(parts[2]),
        output=float(parts[3]),
        currency=price.currency,
        price_date=price.date_iso,
    )


def _parts(
    prices: tuple[Any, Any, Any, Any], inp: Any, out: Any, cached: Any, written: Any
) -> tuple[Any, Any, Any, Any]:
    """The cost definition itself, on numbers or numpy arrays alike: the uncached prompt
    (never below 0), cached reads, cache writes and output, each tokens × price per 1M.
    `prices`: input, output, cached read, cache write."""
    import numpy as np

    p_in, p_out, p_read, p_write = prices
    uncached = np.maximum(0, inp - cached - written)
    return (
        uncached * p_in / PER_TOKENS,
        cached * p_read / PER_TOKENS,
        written * p_write / PER_TOKENS,
        out * p_out / PER_TOKENS,
    )


def usage_cost(usage: Usage, price: PriceEntry) -> CostBreakdown | None:
    """A record's `Usage` priced; None where its input or output count is unknown."""
    if usage.input_tokens is None or usage.output_tokens is None:
        return None
    return token_cost(
        price,
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens or 0,
        usage.cache_write_input_tokens or 0,
    )


def record_cost(record: RequestRecord, table: PriceTable) -> CostBreakdown | None:
    """What one record cost under `table` (the entry in force at its ``started_at``); None
    where no entry prices it or its usage is unknown."""
    entry = table.entry_for(record.provider, record.model, record.started_at)
    return None if entry is None else usage_cost(record.usage, entry)


#: The runs-as-data columns `frame_costs` reads.
FRAME_COLUMNS: Sequence[str] = (
    "provider",
    "model",
    "started_at",
    "usage.input_tokens",
    "usage.output_tokens",
    "usage.cached_input_tokens",
    "usage.cache_write_input_tokens",
)


def frame_costs(frame: pd.DataFrame, table: PriceTable) -> pd.DataFrame:
    """Each row's cost under `table`, for a runs-as-data (or store probes) frame.

    Returns a frame on `frame`'s index with ``cost`` (float, NaN where unpriced or the usage
    is unknown), ``currency`` and ``price_date`` (None where unpriced). Missing count
    columns read as unknown (input, output) or 0 (cached read, cache write). Columnar: each
    provider × model's rows find their entries by one sorted search, and `_parts` prices
    them all at once (the same formula `token_cost` uses).
    """
    import numpy as np
    import pandas as pd

    n = len(frame)

    def col(name: str) -> pd.Series:
        if name in frame.columns:
            return frame[name]
        return pd.Series([None] * n, index=frame.index, dtype=object)

    def counts(name: str) -> np.ndarray:
        return pd.to_numeric(col(name), errors="coerce").to_numpy(dtype=float)

    # ISO 8601 time by time: a format inferred from the first (no fraction on a whole
    # second) would read every later time with a fraction as unreadable, hence unpriced
    when = pd.to_datetime(col("started_at"), utc=True, errors="coerce", format="ISO8601")
    stamps = when.dt.tz_convert(None).to_numpy(dtype="datetime64[ns]")
    missing_time = np.isnat(stamps)
    flat = list(table.entries)
    chosen = np.full(n, -1, dtype=np.int64)
    keys = pd.DataFrame({"p": col("provider").to_numpy(), "m": col("model").to_numpy()})
    groups: dict[Any, Any] = dict(keys.groupby(["p", "m"], sort=False).indices)
    for key, rows in groups.items():
        provider, model = key
        where = np.asarray(rows, dtype=np.int64)
        scopes: tuple[str | None, ...] = (str(provider), None)
        for scope in scopes:
            mine = sorted(
                (k for k, e in enumerate(flat) if e.provider == scope and e.model == str(model)),
                key=lambda k: flat[k].date,
            )
            if not mine:
                continue
            dates = np.array(
                [flat[k].date.astimezone(UTC).replace(tzinfo=None) for k in mine],
                dtype="datetime64[ns]",
            )
            at = np.searchsorted(dates, stamps[where], side="right") - 1
            take = (at >= 0) & ~missing_time[where] & (chosen[where] == -1)
            chosen[where[take]] = np.asarray(mine, dtype=np.int64)[at[take]]
    priced = chosen >= 0
    pick = np.where(priced, chosen, 0)

    def price(get: Callable[[PriceEntry], float]) -> np.ndarray:
        values = np.array([get(e) for e in flat] or [np.nan], dtype=float)
        return np.where(priced, values[pick], np.nan)

    cached = np.nan_to_num(counts("usage.cached_input_tokens"))
    written = np.nan_to_num(counts("usage.cache_write_input_tokens"))
    total = sum(
        _parts(
            (price(lambda e: e.input), price(lambda e: e.output),
             price(lambda e: e.cached_read_price), price(lambda e: e.cache_write_price)),
            counts("usage.input_tokens"), counts("usage.output_tokens"), cached, written,
        )
    )  # fmt: skip
    currency: list[str | None] = [e.currency for e in flat] or [None]
    dated: list[str | None] = [e.date_iso for e in flat] or [None]
    known = priced & ~np.isnan(total)
    return pd.DataFrame(
        {
            "cost": np.where(known, total, np.nan),
            "currency": [currency[k] if ok else None for k, ok in zip(pick, known, strict=True)],
            "price_date": [dated[k] if ok else None for k, ok in zip(pick, known, strict=True)],
        },
        index=frame.index,
    )


def _unknown(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN
    except (TypeError, ValueError):
        return False
