"""`determinism`'s part of question 3's answer: which of temperature and seed controlled the
selection, said only where the repeats measured it, and the batch named as not varied."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.figures.determinism import DeterminismFigures, VariantRow
from labkit.wording.determinism import determinism_answer

pytestmark = pytest.mark.unit


def row(name: str, params: dict[str, Any], distinct: int) -> VariantRow:
    return VariantRow(
        variant=name, params=params, n=3, identical=distinct == 1, distinct_outputs=distinct
    )


def answer(t0: int, t1: int, t1_seed: int) -> str:
    rows = [
        row("t0", {"temperature": 0}, t0),
        row("t1", {"temperature": 1.0}, t1),
        row("t1-seed", {"temperature": 1.0, "seed": 1234}, t1_seed),
    ]
    return determinism_answer(DeterminismFigures(variants=rows, tokenizer="characters"))


def test_temperature_and_seed_named_where_the_repeats_show_them() -> None:
    text = answer(t0=1, t1=3, t1_seed=1)
    assert (
        "What controlled the selection here: temperature (0 fixed the reply; above 0 without "
        "a seed it varied) and seed (it made sampled replies repeat)."
    ) in text
    assert text.endswith("The batch was not varied here (`determinism_load` varies it).")


def test_a_seed_that_did_not_repeat_is_not_named() -> None:
    text = answer(t0=1, t1=3, t1_seed=2)
    assert "here: temperature (0 fixed" in text and "seed (it made" not in text


def test_differing_greedy_replies_are_not_temperature_alone() -> None:
    assert "not temperature alone, since at temperature 0 the replies still differed" in (
        answer(t0=2, t1=1, t1_seed=1)
    )
    text = answer(t0=2, t1=3, t1_seed=1)
    assert "here: seed (it made sampled replies repeat). Not temperature alone: at " in text


def test_nothing_varied_names_nothing() -> None:
    assert "Neither temperature nor seed was shown to control the selection" in (
        answer(t0=1, t1=1, t1_seed=1)
    )
