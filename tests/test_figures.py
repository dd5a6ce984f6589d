"""Typed figures in lab.json: they round-trip with their `kind`, and a lab.json written
before figures were typed still loads (docs/migrations.md, "Typed figures")."""

from __future__ import annotations

import json

import pytest

from labkit.experiments import experiment_kinds
from labkit.figures import (
    FIGURE_KINDS,
    AttributionFigures,
    AttributionKey,
    AttributionRow,
    LoadFigures,
)
from labkit.records import LabAnswer, LabResults
from labkit.runner.summary import load_tables

pytestmark = pytest.mark.unit

_OLD_LEVEL = {
    "level": "c2",
    "title": "concurrency 2",
    "mode": "concurrency",
    "arrival": None,
    "target": 2,
    "workers": 1,
    "requests": 4,
    "ok": 4,
    "failed": 0,
    "output_tokens_per_s": 120.0,
    "ttft_ms_p50": 30.0,
    "client_bound": False,
    "client_bound_fix": None,
}


def _old_answer(experiment: str, figures: object) -> dict[str, object]:
    return {
        "experiment": experiment,
        "provider": "p",
        "model": "m",
        "question": "q?",
        "answer": "a.",
        "figures": figures,
        "status": "ok",
    }


def test_a_lab_json_from_before_typed_figures_still_loads() -> None:
    raw = {
        "run_id": "old",
        "answers": [
            _old_answer("load#1", {"levels": [_OLD_LEVEL], "mode": "concurrency"}),
            # attribution rows had no key: that shape cannot be read any more
            _old_answer(
                "attribution",
                {"rows": [{"measurement": "prefill (prompt processing)", "owner": "provider"}]},
            ),
            _old_answer("single", {}),  # an analysis that failed
            _old_answer("no_such_kind", {"x": 1}),
        ],
    }
    lab = LabResults.model_validate_json(json.dumps(raw))
    load, attribution, single, unknown = (a.figures for a in lab.answers)
    assert isinstance(load, LoadFigures) and load.levels[0].ttft_ms_p50 == 30.0
    assert load.levels[0].display_title == "concurrency 2"
    assert attribution is None and single is None and unknown is None
    assert [a.answer for a in lab.answers] == ["a."] * 4  # every answer's text is kept
    (table,) = load_tables(lab)
    assert table.title == "load#1 · p" and table.row_count == 1


def test_typed_figures_round_trip_with_their_kind() -> None:
    figures = AttributionFigures(
        rows=[
            AttributionRow(
                key=AttributionKey.PREFILL,
                measurement="prefill (prompt processing)",
                owner="provider",
                value_ms=12.5,
                source="provider_timings.prefill_ms",
            )
        ],
        n=3,
    )
    answer = LabAnswer(
        experiment="attribution", provider="p", question="q", answer="a", figures=figures
    )
    text = answer.model_dump_json()
    assert json.loads(text)["figures"]["kind"] == "attribution"
    back = LabAnswer.model_validate_json(text).figures
    assert isinstance(back, AttributionFigures) and back == figures
    assert back.value(AttributionKey.PREFILL) == 12.5
    with pytest.raises(KeyError):
        back.row(AttributionKey.TLS_HANDSHAKE)


def test_figures_with_a_kind_are_validated_strictly() -> None:
    bad = _old_answer("load", {"kind": "load", "levels": "not a list", "mode": "rate"})
    with pytest.raises(ValueError, match="levels"):
        LabAnswer.model_validate(bad)


def test_every_experiment_kind_has_its_figures_model() -> None:
    assert set(experiment_kinds()) == FIGURE_KINDS


#: `labkit.figures.__all__` before each kind's figures had their own module.
_NAMES_BEFORE_THE_SPLIT = [
    "FIGURE_KINDS",
    "AttributionFigures",
    "AttributionKey",
    "AttributionRow",
    "CacheEffect",
    "ConversationFigures",
    "ConversationTurn",
    "ConversationVariant",
    "CriticalPath",
    "DeterminismFigures",
    "Divergence",
    "Estimate",
    "Figures",
    "GreedyMiss",
    "LinearFit",
    "LoadFigures",
    "LoadLevel",
    "LoadLevelCache",
    "MarginalCost",
    "NextTokenFigures",
    "NextTokenStep",
    "NextTokenVariant",
    "Percentiles",
    "PrefillDecodeFigures",
    "PrefillPoint",
    "PromptCost",
    "Proportion",
    "Quantile",
    "RequestStats",
    "RequestTimeline",
    "SLOCheck",
    "SLOReport",
    "ServerLevelMetrics",
    "SessionFigures",
    "SessionRow",
    "SessionStep",
    "SingleFigures",
    "SweepFigures",
    "SweepProbe",
    "TTFTSplit",
    "TokenChoice",
    "TokenPieces",
    "TokenRatioFigures",
    "TokenRatioRow",
    "TokenizerCount",
    "TokenizerSpread",
    "TraceFigures",
    "VariantRow",
    "Verdict",
    "read_figures",
]


@pytest.mark.parametrize("name", _NAMES_BEFORE_THE_SPLIT)
def test_every_name_labkit_figures_exported_still_imports_from_it(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from labkit.figures import {name}", namespace)
    assert namespace[name] is not None


def test_a_kind_model_is_the_one_its_own_module_defines() -> None:
    import labkit.figures
    from labkit.figures.load import LoadFigures as own

    assert labkit.figures.LoadFigures is own
    with pytest.raises(AttributeError):
        _ = labkit.figures.NoSuchFigures
