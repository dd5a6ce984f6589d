"""What requests, agent sessions and successful answers cost under a dated price table.

Every figure here rests on `labkit.pricing.frame_costs` (one cost definition, one row per
request; docs/pricing.md). The frame is a runs-as-data frame (`labkit.rundata`) or the
store's probes frame: the same column names.

- **per request**: the mean cost of a priced, non-warm-up request (failed ones included where
  the provider counted their tokens: they are billed), with its t-interval;
- **per session**: the mean of each agent session's summed cost (records tagged ``session``
  and ``agent``, every turn and retry), with its t-interval;
- **per successful answer**: the total cost over the successful answers. A unit of work is
  a request outside a session, or a whole session: a request succeeds when it has no error
  and stopped on its own (``end``, ``stop_sequence``, ``tool_call``), a session when its
  main agent's last turn did (`labkit.analysis.sessions.session_end`'s ``answer``). The
  interval is a paired bootstrap over the units (`labkit.analysis.stats.ratio_of_sums`);
- **goodput per unit of money**: successful answers per currency unit, the reciprocal of
  the cost per successful answer (its interval the reciprocal of that one's bounds).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from labkit.analysis.stats import mean, ratio_of_sums
from labkit.figures import Estimate
from labkit.figures.observatory import CostFigures
from labkit.pricing import PriceTable, frame_costs

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COST_COLUMNS", "SUCCESS_STOPS", "cost_figures", "session_costs", "unit_costs"]

#: Stop reasons of an answer that came to its own end.
SUCCESS_STOPS = frozenset({"end", "stop_sequence", "tool_call"})
_FAILED_SESSION_STOPS = frozenset({"length", "content_filter", "refusal"})

#: The columns the cost figures read (with ``tags.*`` where sessions are tagged).
COST_COLUMNS = (
    "provider",
    "model",
    "started_at",
    "ok",
    "warmup",
    "stop_reason",
    "usage.input_tokens",
    "usage.output_tokens",
    "usage.cached_input_tokens",
    "usage.cache_write_input_tokens",
    "tags.session",
    "tags.agent",
    "tags.step",
    "tags.final",
    "tags.trace_calls",
)


def _est(value: Any) -> Estimate | None:
    if value is None or value.value is None:
        return None
    return Estimate(value=value.value, lo=value.lo, hi=value.hi)


def _column(frame: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    import pandas as pd

    if name in frame.columns:
        return frame[name]
    return pd.Series([default] * len(frame), index=frame.index, dtype=object)


def _request_ok(frame: pd.DataFrame) -> pd.Series:
    ok = _column(frame, "ok", True).fillna(False).astype(bool)
    return ok & _column(frame, "stop_reason").isin(SUCCESS_STOPS)


def _in_session(frame: pd.DataFrame) -> pd.Series:
    return _column(frame, "tags.session").notna() & _column(frame, "tags.agent").notna()


def _session_key(frame: pd.DataFrame) -> pd.Series:
    run = _column(frame, "run_id", "").astype(str)
    return run + "#" + _column(frame, "tags.session").map(_whole)


def _whole(value: Any) -> str:
    """A session number as text: 3, not 3.0 (numeric tags read back as floats)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _session_answered(turns: pd.DataFrame) -> bool:
    """Whether a session's main agent ended with an answer (as `session_end` says)."""
    main = turns[_column(turns, "tags.agent").astype(str) == "0"]
    if main.empty:
        return False
    last = main.sort_values(["tags.step", "started_at"]).iloc[-1]
    if not bool(last.get("ok", False)) or not _truthy(last.get("tags.final")):
        return False
    stop = str(last.get("stop_reason"))
    if stop == "length" and not _truthy(last.get("tags.trace_calls")):
        return False
    return stop not in _FAILED_SESSION_STOPS - {"length"}


def _truthy(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, float) and math.isnan(value):
        return False
    return bool(value)


#: The text columns the cost figures read, held as categories (a few distinct values over
#: a large run's million rows: codes, not a Python string per row).
_LABELS = ("provider", "model", "stop_reason", "run_id")


def _priced(frame: pd.DataFrame, table: PriceTable) -> pd.DataFrame:
    """The non-warm-up rows with their cost columns joined (unpriced rows dropped): only
    the columns the figures read, labels as categories, so a large run's frame is copied
    once, lean."""
    keep = [c for c in (*COST_COLUMNS, "run_id") if c in frame.columns and c != "started_at"]
    warm = _column(frame, "warmup", False).fillna(False).astype(bool).to_numpy()
    rows = frame.loc[~warm, keep]
    rows = rows.assign(
        **{c: rows[c].astype("category") for c in _LABELS if c in rows.columns},
        started_at=_times(_column(frame, "started_at")[~warm]),
    )
    costs = _block_costs(rows, table)
    for name in ("cost", "currency", "price_date"):  # `rows` is this function's own copy
        rows[name] = costs[name].to_numpy()
    priced = rows["cost"].notna().to_numpy()
    return rows if priced.all() else rows[priced]


#: Rows parsed (and priced) at once: a text column becomes one Python string per row while
#: it is parsed, and pricing takes a dozen temporary arrays the rows' length.
_PARSE_ROWS = 1 << 16


def _block_costs(rows: pd.DataFrame, table: PriceTable) -> pd.DataFrame:
    """`frame_costs` of `rows`, a block of `_PARSE_ROWS` rows at a time (a row's cost is
    its own: the same figures, with a block's temporaries, not the run's)."""
    import pandas as pd

    if len(rows) <= _PARSE_ROWS:
        return frame_costs(rows, table)
    blocks = range(0, len(rows), _PARSE_ROWS)
    return pd.concat([frame_costs(rows.iloc[i : i + _PARSE_ROWS], table) for i in blocks])


def _times(texts: pd.Series) -> pd.Series:
    """Send times as UTC datetimes (unreadable ones NaT), parsed a block of rows at a time
    so a large run's column never becomes a million Python strings at once; the same
    `pd.to_datetime` call `frame_costs` makes, which then has nothing left to parse."""
    import warnings

    import pandas as pd

    if len(texts) <= _PARSE_ROWS:
        return pd.to_datetime(texts, utc=True, errors="coerce")
    with warnings.catch_warnings():
        # a block that opens on an unreadable time infers no format: its rows are parsed
        # one by one (dateutil), to the same values
        warnings.filterwarnings("ignore", "Could not infer format", UserWarning)
        return pd.concat(
            [
                pd.to_datetime(texts.iloc[i : i + _PARSE_ROWS], utc=True, errors="coerce")
                for i in range(0, len(texts), _PARSE_ROWS)
            ]
        )


def session_costs(frame: pd.DataFrame, table: PriceTable) -> pd.DataFrame:
    """One row per agent session: ``provider``, ``model``, ``session`` (run id # session),
    ``cost`` (the sum over its priced turns), ``turns`` and ``answered``."""
    return _sessions_of(_priced(frame, table))


def _sessions_of(priced: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    rows = priced[_in_session(priced)]
    out = []
    for (provider, model, key), turns in rows.groupby(
        [rows["provider"], rows["model"], _session_key(rows)], sort=True
    ):
        out.append(
            {
                "provider": provider,
                "model": model,
                "session": key,
                "cost": float(turns["cost"].sum()),
                "turns": len(turns),
                "answered": _session_answered(turns),
            }
        )
    return pd.DataFrame(out, columns=["provider", "model", "session", "cost", "turns", "answered"])


def unit_costs(frame: pd.DataFrame, table: PriceTable) -> pd.DataFrame:
    """The units of work with their cost and whether each succeeded: each priced request
    outside a session, and each session whole (``provider``, ``model``, ``cost``, ``ok``)."""
    return _units_of(_priced(frame, table))


def _units_of(rows: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    single = rows[~_in_session(rows)]
    requests = pd.DataFrame(
        {
            "provider": single["provider"],
            "model": single["model"],
            "cost": single["cost"].astype(float),
            "ok": _request_ok(single),
        }
    )
    sessions = _sessions_of(rows).rename(columns={"answered": "ok"})
    parts = [p for p in (requests, sessions[["provider", "model", "cost", "ok"]]) if len(p)]
    if not parts:
        return pd.DataFrame(columns=["provider", "model", "cost", "ok"])
    return pd.concat(parts, ignore_index=True)


def cost_figures(frame: pd.DataFrame, table: PriceTable) -> list[CostFigures]:
    """Per provider × model (and currency): cost per request, per session, per successful
    answer and answers per currency unit, each with its 95 % interval. Empty where the
    table is empty or prices none of the frame's requests."""
    if not table or frame.empty:
        return []
    rows = _priced(frame, table)
    if rows.empty:
        return []
    units = _units_of(rows)
    sessions = _sessions_of(rows)
    out: list[CostFigures] = []
    for (provider, model, currency), group in rows.groupby(
        ["provider", "model", "currency"], sort=True
    ):
        costs = group["cost"].astype(float).to_numpy()
        per_request = _est(mean(costs))
        assert per_request is not None  # a group has rows
        mine = units[(units["provider"] == provider) & (units["model"] == model)]
        per_answer = ratio_of_sums(
            mine["cost"].to_numpy(dtype=float), mine["ok"].to_numpy(dtype=float)
        )
        goodput = None
        if per_answer is not None and per_answer.value > 0:
            goodput = Estimate(
                value=1 / per_answer.value,
                lo=1 / per_answer.hi if per_answer.hi else 0.0,
                hi=1 / per_answer.lo if per_answer.lo else None,
            )
        its = sessions[(sessions["provider"] == provider) & (sessions["model"] == model)]
        dates = sorted({str(d) for d in group["price_date"]})
        out.append(
            CostFigures(
                provider=str(provider),
                model=str(model),
                currency=str(currency),
                price_date=", ".join(dates),
                per_request=per_request,
                per_session=_est(mean(its["cost"].astype(float).to_numpy())) if len(its) else None,
                per_successful_answer=per_answer,
                goodput_per_dollar=goodput,
                requests=len(group),
                total=float(costs.sum()),
            )
        )
    return out
