"""What requests, agent sessions and successful answers cost under a dated price table.

Every figure here rests on `labkit.pricing.frame_costs` (one cost definition, one row per
request), read from a runs-as-data frame (`labkit.rundata`) or the store's probes frame: the
same column names. The figures — per request, per session, per successful answer (a paired
bootstrap over the units of work, `labkit.analysis.stats.ratio_of_sums`) and answers per unit of
money — and what counts as a success: docs/pricing.md, "The figures".
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from labkit.analysis.stats import mean, ratio_of_sums
from labkit.figures import Estimate
from labkit.figures.observatory import CostFigures
from labkit.pricing import PriceTable, frame_costs

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COST_COLUMNS",
    "SUCCESS_STOPS",
    "CostTally",
    "cost_figures",
    "session_costs",
    "unit_costs",
]

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


def _priced(
    frame: pd.DataFrame, table: PriceTable, order: np.ndarray | None = None
) -> pd.DataFrame:
    """The non-warm-up rows with their cost columns joined (unpriced rows dropped): only
    the columns the figures read, labels as categories, so a large run's frame is copied
    once, lean. `order`: each row's place in the run (`_ORDER`, kept with the rows)."""
    keep = [c for c in (*COST_COLUMNS, "run_id") if c in frame.columns and c != "started_at"]
    warm = _column(frame, "warmup", False).fillna(False).astype(bool).to_numpy()
    rows = frame.loc[~warm, keep]
    rows = rows.assign(
        **{c: rows[c].astype("category") for c in _LABELS if c in rows.columns},
        started_at=_times(_column(frame, "started_at")[~warm]),
        **({_ORDER: np.asarray(order, dtype=np.int64)[~warm]} if order is not None else {}),
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
    so a large run's column never becomes a million Python strings at once; the
    `pd.to_datetime` call `frame_costs` makes, which then has nothing left to parse.

    Each time is read as ISO 8601 on its own (``format="ISO8601"``): a record's time has
    no fraction of a second when it fell on a whole one, and a format inferred from a
    block's first time (``…:00Z``) read every time with a fraction after it as unreadable,
    so whole blocks went unpriced (a priced 10⁷-record run lost ~4 % of its requests)."""
    import pandas as pd

    def parsed(part: pd.Series) -> pd.Series:
        times: pd.Series = pd.to_datetime(part, utc=True, errors="coerce", format="ISO8601")
        return times

    if len(texts) <= _PARSE_ROWS:
        return parsed(texts)
    blocks = [parsed(texts.iloc[i : i + _PARSE_ROWS]) for i in range(0, len(texts), _PARSE_ROWS)]
    joined: pd.Series = pd.concat(blocks)
    return joined


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
    table is empty or prices none of the frame's requests (`CostTally` over the frame's
    rows, a block at a time, in the frame's order)."""
    if not table or frame.empty:
        return []
    tally = CostTally(table)
    tally.add(frame, np.arange(len(frame), dtype=np.int64))
    return tally.figures()


#: The column `_priced` keeps each row's place in the run in (`CostTally`).
_ORDER = "_order"


#: The columns `CostTally` keeps per row: each row's place in the run, its cost, the
#: (currency, price date) that priced it, whether it is a request outside a session, and
#: whether that request succeeded.
_KEPT = (("order", np.int64), ("cost", np.float64), ("priced_as", np.int32))
_FLAGS = (("single", np.bool_), ("success", np.bool_))

#: The bytes of kept rows `CostTally` holds before it writes them out to its files.
_SPILL_BYTES = 4 << 20


class _Rows:
    """One provider × model's priced rows as `CostTally` keeps them (`_KEPT`, `_FLAGS`):
    the latest batches' in memory, the rest appended to one file per column in `folder`
    (made by the first write)."""

    def __init__(self, folder: Callable[[], Path], name: str) -> None:
        self._folder = folder
        self._name = name
        self._held: dict[str, list[np.ndarray]] = {c: [] for c, _ in (*_KEPT, *_FLAGS)}
        self._written = False
        self.held_bytes = 0

    def add(self, **columns: np.ndarray) -> None:
        """Keep one batch's rows (one array per column of `_KEPT` and `_FLAGS`)."""
        for name, values in columns.items():
            self._held[name].append(values)
            self.held_bytes += values.nbytes

    def write_out(self) -> None:
        """Append the rows held to the files, and let go of them."""
        if not self.held_bytes:
            return
        folder = self._folder()
        for name, parts in self._held.items():
            with (folder / f"{self._name}.{name}").open("ab") as fh:
                np.concatenate(parts).tofile(fh)
            parts.clear()
        self._written = True
        self.held_bytes = 0

    def joined(self) -> tuple[np.ndarray, ...]:
        """Cost, (currency, date) code, single and success, in the order of the rows in
        the run."""
        if self._written:
            self.write_out()
            folder = self._folder()
            columns = {
                name: np.fromfile(folder / f"{self._name}.{name}", dtype=kind)
                for name, kind in (*_KEPT, *_FLAGS)
            }
        else:
            columns = {name: np.concatenate(parts) for name, parts in self._held.items()}
        put = np.argsort(columns.pop("order"), kind="stable")
        return tuple(columns[name][put] for name in ("cost", "priced_as", "single", "success"))


class CostTally:
    """The cost figures (`cost_figures`) of rows given a batch at a time: a run read from
    its columnar sidecar a row group at a time is never held whole, nor its cost columns.

    Each batch is priced (`frame_costs`) and reduced to what the figures read: per
    provider × model, each row's place in the run, its cost, which currency and price date
    priced it, and whether it is a request outside a session that succeeded (17 bytes a
    row, not the frame's columns); agent sessions' turns are kept whole (a session's
    figures need all of its turns; sessions are agent runs', not a load's millions). At
    the end the rows are put back in the order of the run, so every figure is the one
    `cost_figures` states over the frame read whole, to the last bit: the same sums in the
    same order, the same bootstrap draws."""

    def __init__(self, table: PriceTable) -> None:
        self.table = table
        self._rows: dict[tuple[str, str], _Rows] = {}
        self._codes: dict[tuple[str, str], int] = {}
        self._turns: list[pd.DataFrame] = []
        self._files: tempfile.TemporaryDirectory[str] | None = None

    def _folder(self) -> Path:
        """The temporary folder the kept rows are written out to (made when first asked
        for; removed by `figures`, or when the tally is let go of)."""
        if self._files is None:
            self._files = tempfile.TemporaryDirectory(prefix="labkit-costs-")
        return Path(self._files.name)

    def add(self, frame: pd.DataFrame, order: np.ndarray) -> None:
        """Take in a batch of records (`COST_COLUMNS`, with ``run_id`` and the tags);
        `order`: each row's place in the run (its byte offset, or its row number), by
        which the rows are put back in order."""
        if not self.table or frame.empty:
            return
        places = np.asarray(order, dtype=np.int64)
        for start in range(0, len(frame), _PARSE_ROWS):  # a block's temporaries, not the frame's
            stop = start + _PARSE_ROWS
            self._add(frame.iloc[start:stop], places[start:stop])

    @property
    def sessions(self) -> bool:
        """Whether any row taken in is an agent session's turn."""
        return bool(self._turns)

    def _add(self, frame: pd.DataFrame, order: np.ndarray) -> None:
        rows = _priced(frame, self.table, order)
        if rows.empty:
            return
        session = _in_session(rows).to_numpy(dtype=bool)
        if session.any():
            self._turns.append(rows[session])
        success = _request_ok(rows).to_numpy(dtype=bool) & ~session
        cost = rows["cost"].to_numpy(dtype=float)
        places = rows[_ORDER].to_numpy(dtype=np.int64)
        keys = ["provider", "model", "currency", "price_date"]
        found = rows.groupby(keys, observed=True, sort=False).indices
        for key, at in found.items():
            provider, model, currency, date = cast("tuple[Any, Any, Any, Any]", key)
            mine = (str(provider), str(model))
            if mine not in self._rows:
                self._rows[mine] = _Rows(self._folder, f"rows-{len(self._rows)}")
            self._rows[mine].add(
                order=places[at],
                cost=cost[at],
                priced_as=np.full(len(at), self._code(str(currency), str(date)), np.int32),
                single=~session[at],
                success=success[at],
            )
        if sum(r.held_bytes for r in self._rows.values()) > _SPILL_BYTES:
            for kept in self._rows.values():  # out of memory until the figures are drawn
                kept.write_out()

    def _code(self, currency: str, date: str) -> int:
        return self._codes.setdefault((currency, date), len(self._codes))

    def figures(self) -> list[CostFigures]:
        """The figures of every row taken in (`cost_figures`'s, in its order)."""
        try:
            return self._figures()
        finally:
            self.close()

    def close(self) -> None:
        """Remove the files the kept rows were written out to (`figures` does)."""
        if self._files is not None:
            self._files.cleanup()
            self._files = None

    def _figures(self) -> list[CostFigures]:
        import pandas as pd

        if self._turns:
            turns = pd.concat(
                [t.astype({"provider": object, "model": object}) for t in self._turns],
                ignore_index=True,
            )
            sessions = _sessions_of(turns.sort_values(_ORDER, kind="stable"))
        else:
            sessions = _sessions_of(pd.DataFrame(columns=["provider", "model"]))
        names = {code: key for key, code in self._codes.items()}
        out: list[CostFigures] = []
        for provider, model in sorted(self._rows):
            cost, priced_as, single, success = self._rows[(provider, model)].joined()
            its = sessions[(sessions["provider"] == provider) & (sessions["model"] == model)]
            per_answer = ratio_of_sums(
                np.concatenate([cost[single], its["cost"].to_numpy(dtype=float)]),
                np.concatenate([success[single], its["answered"].to_numpy(dtype=bool)]).astype(
                    float
                ),
            )
            goodput = None
            if per_answer is not None and per_answer.value > 0:
                goodput = Estimate(
                    value=1 / per_answer.value,
                    lo=1 / per_answer.hi if per_answer.hi else 0.0,
                    hi=1 / per_answer.lo if per_answer.lo else None,
                )
            per_session = _est(mean(its["cost"].astype(float).to_numpy())) if len(its) else None
            used = np.unique(priced_as)
            for currency in sorted({names[int(c)][0] for c in used}):
                codes = [c for c in used if names[int(c)][0] == currency]
                mine = np.isin(priced_as, codes)
                costs = cost[mine]
                per_request = _est(mean(costs))
                assert per_request is not None  # a group has rows
                dates = sorted({names[int(c)][1] for c in codes})
                out.append(
                    CostFigures(
                        provider=provider,
                        model=model,
                        currency=currency,
                        price_date=", ".join(dates),
                        per_request=per_request,
                        per_session=per_session,
                        per_successful_answer=per_answer,
                        goodput_per_dollar=goodput,
                        requests=int(mine.sum()),
                        total=float(costs.sum()),
                    )
                )
        return out
