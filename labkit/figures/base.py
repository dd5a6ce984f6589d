"""The base of every figures model, and the registry of each experiment kind's model.

A kind's module here (`single.py`) defines its model with a `kind` literal and registers it
with `register_figures`; `labkit.figures` imports every module of this package, so the
`Figures` union holds each registered kind without a list to edit.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = ["figures_models", "register_figures"]


class _Figures(BaseModel):
    model_config = ConfigDict(extra="forbid")


_MODELS: dict[str, type[_Figures]] = {}

F = TypeVar("F", bound=type[_Figures])


def register_figures(cls: F) -> F:
    """Class decorator: make a kind's model one of `Figures`, told apart by its `kind`."""
    model: type[_Figures] = cls
    kind = str(model.model_fields["kind"].default)
    if kind in _MODELS and _MODELS[kind] is not model:
        raise ValueError(f"figures kind {kind!r} registered twice")
    _MODELS[kind] = model
    return cls


def figures_models() -> dict[str, type[_Figures]]:
    """Each registered kind's model, by kind (sorted)."""
    return dict(sorted(_MODELS.items()))
