"""`same_model` in the report: each provider's first-token distributions against the
reference's, one dot per fixed prompt at its total variation, the tolerance as a line, and
the verdict in the row's name."""

from __future__ import annotations

from typing import Any

from labkit.figures.same_model import SameModelFigures
from labkit.records import LabResults
from labkit.report.charts import Chart, _base, _by_kind, _provider_picker
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["same_model_chart"]


def same_model_chart(lab: LabResults | None) -> Chart | None:
    """Per provider (the reference left out), each prompt's total variation from the
    reference, and the tolerance two servers of one model may differ by."""
    values: list[dict[str, Any]] = []
    tolerance = None
    for ans, fig in _by_kind(lab, SameModelFigures):
        if fig.verdict is None:
            continue
        tolerance = fig.tolerance
        row = f"{ans.provider}: {fig.verdict.verdict} ({fig.verdict.confidence:.0%})"
        for p in fig.prompts:
            if p.total_variation is None:
                continue
            values.append(
                {
                    "provider": ans.provider,
                    "row": row,
                    "prompt": p.prompt_id,
                    "tv": p.total_variation,
                    "top": p.top or "",
                    "reference_top": p.reference_top or "",
                    "stop": p.stop or "",
                    "reference_stop": p.reference_stop or "",
                }
            )
    if not values or tolerance is None:
        return None
    y = {"field": "row", "type": "nominal", "title": None, "axis": {"labelLimit": 360}}
    x = {
        "field": "tv",
        "type": "quantitative",
        "title": "total variation from the reference's first-token distribution",
        "scale": {"domain": [0, 1]},
    }
    spec = {
        **_base("Same model? Each prompt's next-token distribution against the reference", values),
        "layer": [
            {
                "mark": {"type": "point", "filled": True, "size": 70},
                "params": [_provider_picker()],
                "encoding": {
                    "y": y,
                    "x": x,
                    "color": {"field": "provider", "type": "nominal"},
                    "opacity": {"condition": {"param": "pick", "value": 0.9}, "value": 0.15},
                    "tooltip": [
                        {"field": "provider"},
                        {"field": "prompt"},
                        {"field": "tv", "format": ".3f", "title": "total variation"},
                        {"field": "top", "title": "likeliest first token"},
                        {"field": "reference_top", "title": "at the reference"},
                        {"field": "stop", "title": "stop"},
                        {"field": "reference_stop", "title": "reference's stop"},
                    ],
                },
            },
            {
                "data": {"values": [{"tolerance": tolerance}]},
                "mark": {"type": "rule", "color": "#cf222e", "strokeDash": [6, 4], "size": 2},
                "encoding": {"x": {"field": "tolerance", "type": "quantitative"}},
            },
        ],
    }
    return Chart(
        "same_model",
        "Same model? Next-token distributions against the reference",
        spec,
        "One dot per fixed prompt: how far the provider's first-token distribution at "
        f"temperature 0 is from the reference's (total variation, 0 = identical). Red dashes: "
        f"the tolerance ({tolerance:g}) two servers of one model may differ by. Each row names "
        "the verdict and its confidence; a tokenizer or stop-behaviour verdict rests on the "
        "token counts and stop reasons in the answer.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [
        same_model_chart(lab)
        or "same_model: no provider returned logprobs beside the reference's to draw."
    ]


register_report(KindReport("same_model", pictures=_pictures))
