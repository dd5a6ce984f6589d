"""The typed figures behind each experiment's answer: what `lab.json` holds under `figures`.

Each experiment kind has one model, told apart by its `kind` field, in its own module here
(`single.py`: `SingleFigures`); the models kinds share are in `stats`, `slo`, `levels` and
`requests`. The run summary and the report read these fields, never a key of a loose dict and
never a human label. Every aggregate is computed once, in the experiment's `analyze`, and
rendered from here. Importing this package imports each of its modules, so `Figures` holds every
registered kind (`base.register_figures`) without a list to edit. Like `labkit.records`, this
package is the contract a report reads from a run folder made on another machine: it imports
nothing of labkit's.
"""

from __future__ import annotations

import importlib
import operator
import pkgutil
import sys
from functools import reduce
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from pydantic import Field, TypeAdapter, ValidationError

from labkit.figures.base import _Figures, figures_models
from labkit.figures.levels import LoadLevel, LoadLevelCache, RunsLevels, ServerLevelMetrics
from labkit.figures.requests import RequestStats, TTFTSplit
from labkit.figures.slo import SLOCheck, SLOReport, Verdict
from labkit.figures.stats import (
    Estimate,
    LinearFit,
    Mean,
    Percentiles,
    PromptCost,
    Proportion,
    Quantile,
)

__all__ = [
    "FIGURE_KINDS",
    "Estimate",
    "Figures",
    "LinearFit",
    "LoadLevel",
    "LoadLevelCache",
    "Mean",
    "Percentiles",
    "PromptCost",
    "Proportion",
    "Quantile",
    "RequestStats",
    "RunsLevels",
    "SLOCheck",
    "SLOReport",
    "ServerLevelMetrics",
    "TTFTSplit",
    "Verdict",
    "read_figures",
]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

_MODELS = figures_models()

if TYPE_CHECKING:
    Figures: TypeAlias = _Figures
else:
    Figures: TypeAlias = Annotated[
        reduce(operator.or_, _MODELS.values()), Field(discriminator="kind")
    ]
"""Any experiment's figures, told apart by `kind`."""

_ADAPTER: TypeAdapter[Figures] = TypeAdapter(Figures)

#: The experiment kinds that have figures (each model's `kind`).
FIGURE_KINDS: frozenset[str] = frozenset(_MODELS)


def __getattr__(name: str) -> Any:
    """A name of a kind's module (`SingleFigures`), as this package exported it before each
    kind had its own module; new code imports it from there (`labkit.figures.single`)."""
    for model in _MODELS.values():
        module = sys.modules[model.__module__]
        if name in getattr(module, "__all__", ()):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_figures(raw: Any, experiment: str) -> Any:
    """`raw` as `LabAnswer.figures` accepts it, for a `lab.json` written by any labkit.

    Figures with a `kind` pass through (and are validated as that kind). A `lab.json`
    written before figures were typed has plain dicts without `kind`: the kind comes from
    the experiment's name (`load#1` -> `load`); figures of that older shape that no longer
    validate, and an empty dict (an answer whose analysis failed), become None.
    """
    if raw is None or not isinstance(raw, dict) or "kind" in raw:
        return raw
    kind = experiment.split("#", 1)[0]
    if not raw or kind not in FIGURE_KINDS:
        return None
    try:
        return _ADAPTER.validate_python({**raw, "kind": kind})
    except ValidationError:
        return None
