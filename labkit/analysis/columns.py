"""Records as columns: one array per contract field, so each aggregate has one definition
whether its records are Python objects (the runner) or a run read into columns (the report).

`Columns` names fields as docs/measurement.md and the report's frame do (``client.ttft_ms``,
``provider_timings.queue_ms``, ``tags.level``, ``ok``) and gives each as numbers (float64,
NaN where missing), texts (objects, None where missing) or flags. `Columns.of_records` reads
them off `RequestRecord`s, only the fields asked for; `Columns.of_arrays` wraps arrays that
are already columns (a field absent there reads as missing everywhere).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

import numpy as np

from labkit.records import RequestRecord

__all__ = ["Columns", "texts"]

#: Fields that are not a plain attribute path of the record.
_DERIVED: dict[str, Callable[[RequestRecord], Any]] = {
    "ok": lambda r: r.error is None,
    "client.n_events": lambda r: len(r.client.event_offsets_ms),
}


def _record_getter(name: str) -> Callable[[RequestRecord], Any]:
    """How to read the field `name` (a dotted contract name) off one record."""
    if name in _DERIVED:
        return _DERIVED[name]
    head, _, tail = name.partition(".")
    if head == "tags":
        return lambda r: r.tags.get(tail)
    if not tail:
        return lambda r: getattr(r, head, None)

    def get(r: RequestRecord) -> Any:
        section = getattr(r, head, None)
        return None if section is None else getattr(section, tail, None)

    return get


def _values(name: str, recs: list[RequestRecord]) -> Iterable[Any]:
    """The field `name` of each record, read in C (`operator.attrgetter`, `map`): what
    `_record_getter` reads, where every record has each attribute on the path (else
    AttributeError, and the caller reads them one by one)."""
    if name == "ok":
        return map(is_, map(attrgetter("error"), recs), repeat(None))
    if name == "client.n_events":
        return map(len, map(attrgetter("client.event_offsets_ms"), recs))
    head, _, tail = name.partition(".")
    if head == "tags":
        return map(dict.get, map(attrgetter("tags"), recs), repeat(tail))
    return map(attrgetter(name), recs)


def _number(v: Any) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    return math.nan


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, float) and v.is_integer():  # an integer tag, read as a float column
        return str(int(v))
    return str(v)


def texts(values: Any) -> np.ndarray:
    """Values as an object array of strings (None where missing)."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        try:
            distinct = set(values.tolist())  # a run's texts repeat: check each one once
        except TypeError:  # an unhashable value: not a text, converted below
            distinct = {0}
        if all(v is None or type(v) is str for v in distinct):
            return values
    return np.array([v if type(v) is str else _text(v) for v in values], dtype=object)


class Columns:
    """The fields of a set of records, one array each (see the module).

    A subset (`take`) shares its parent's arrays: each field is read and converted once,
    for all the records, however many groups are cut from them.
    """

    def __init__(
        self, n: int, source: Callable[[str], np.ndarray | None], index: np.ndarray | None = None
    ) -> None:
        self._n = n if index is None else int(index.size)
        self._source = source
        self._index = index
        self._full: dict[tuple[str, str], np.ndarray | None] = {}

    @classmethod
    def of_records(cls, records: Sequence[RequestRecord]) -> Columns:
        """The records' fields, each read off the records when first asked for."""
        recs = list(records)

        def source(name: str) -> np.ndarray:
            try:  # item by item, in C: lists stay items (the runner's figures after a level)
                return np.fromiter(_values(name, recs), dtype=object, count=len(recs))
            except (AttributeError, TypeError):  # a section missing on some record (error)
                pass
            get = _record_getter(name)
            out = np.empty(len(recs), dtype=object)  # item by item: lists stay items
            for i, r in enumerate(recs):
                out[i] = get(r)
            return out

        return cls(len(recs), source)

    @classmethod
    def of_arrays(cls, n: int, arrays: Mapping[str, Any]) -> Columns:
        """Columns that are already arrays of `n` items (a frame's), by field name."""
        return cls(n, lambda name: None if name not in arrays else np.asarray(arrays[name]))

    def __len__(self) -> int:
        return self._n

    def take(self, mask: np.ndarray) -> Columns:
        """The rows where `mask` holds (a boolean array) or at these positions."""
        positions = np.flatnonzero(mask) if mask.dtype == bool else mask
        child = Columns(
            0, self._source, positions if self._index is None else self._index[positions]
        )
        child._full = self._full
        return child

    def _get(self, kind: str, name: str, convert: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        key = (kind, name)
        if key not in self._full:
            raw = self._source(name)
            self._full[key] = None if raw is None else convert(raw)
        full = self._full[key]
        if full is None:
            empty = {"num": np.nan, "text": None, "flag": False, "objects": None}[kind]
            dtype = {"num": float, "flag": bool}.get(kind, object)
            return np.full(self._n, empty, dtype=dtype)
        return full if self._index is None else full[self._index]

    def num(self, name: str) -> np.ndarray:
        """The field as float64 (NaN where missing or not a number)."""
        return self._get("num", name, _numbers)

    def text(self, name: str) -> np.ndarray:
        """The field as an object array of strings (None where missing)."""
        return self._get("text", name, texts)

    def flag(self, name: str) -> np.ndarray:
        """The field as booleans (missing: False)."""
        return self._get("flag", name, _flags)

    def objects(self, name: str) -> np.ndarray:
        """The field as it is held (per-event arrays: a sequence or None per record)."""
        return self._get("objects", name, lambda raw: raw)

    @property
    def asked(self) -> set[str]:
        """The fields asked for so far (of these columns and any cut from them)."""
        return {name for _, name in self._full}

    def first_text(self, name: str) -> str | None:
        """The field's value in the first row, as text."""
        return self.text(name)[0] if self._n else None


#: The types `_number` reads as themselves (NoneType: as NaN), converted as an array at once.
_PLAIN_NUMBERS = frozenset({float, int, type(None)})


def _numbers(raw: np.ndarray) -> np.ndarray:
    if raw.dtype.kind in "fiub":
        return raw.astype(float, copy=False)  # a float column is used as it is
    if raw.dtype == object and _PLAIN_NUMBERS.issuperset(map(type, raw.tolist())):
        nothing: Any = None
        missing = np.equal(raw, nothing)  # item by item: `is None`
        out = np.full(raw.size, math.nan)
        out[~missing] = raw[~missing].astype(float)  # float(v) each, as `_number` converts
        return out
    return np.array([_number(v) for v in raw], dtype=float)


def _flags(raw: np.ndarray) -> np.ndarray:
    if raw.dtype.kind == "b":
        return raw
    return np.array([v is True or v is np.True_ for v in raw], dtype=bool)
