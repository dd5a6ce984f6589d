"""`determinism` in the report: each repeat's output aligned token by token (and, with
`top_logprobs`, the next-token pictures, `labkit.report.kinds.next_token`)."""

from __future__ import annotations

from typing import Any

from labkit.figures.determinism import DeterminismFigures
from labkit.records import LabResults
from labkit.report.charts import _FADE, Chart, _base, _by_kind, _provider_menu
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["determinism_chart"]

_MAX_TOKENS_SHOWN = 48


def determinism_chart(lab: LabResults | None) -> Chart | None:
    """Each variant's repeats aligned token by token, the first divergent token marked."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, DeterminismFigures):
        for v in fig.variants:
            if not v.outputs:
                continue
            first = v.outputs[0]
            for k, out in enumerate(v.outputs):
                diverged = False
                for i, piece in enumerate(out[:_MAX_TOKENS_SHOWN]):
                    same = i < len(first) and first[i] == piece and not diverged
                    status = "same as repeat 1" if same else "after divergence"
                    if not same and not diverged:
                        status = "first divergent token"
                        diverged = True
                    values.append(
                        {
                            "provider": ans.provider,
                            "row": f"{ans.provider} · {v.variant} · repeat {k + 1}",
                            "i": i + 1,  # 1-based: token 1 is the first
                            "token": piece,
                            "label": piece[:5],
                            "status": status,
                        }
                    )
    if not values:
        return None
    rows = len({v["row"] for v in values})
    spec = _base("Determinism", values)
    spec["height"] = {"step": 22}
    spec["title"] = {"text": "Determinism", "subtitle": f"{rows} outputs"}
    enc_x = {"field": "i", "type": "ordinal", "title": "output token", "axis": {"labelAngle": 0}}
    enc_y = {"field": "row", "type": "nominal", "title": None, "sort": None}
    spec["layer"] = [
        {
            "mark": {"type": "rect", "stroke": "#ffffff"},
            "params": [_provider_menu(values)],
            "encoding": {
                "x": enc_x,
                "y": enc_y,
                "opacity": _FADE,
                "color": {
                    "field": "status",
                    "type": "nominal",
                    "scale": {
                        "domain": [
                            "same as repeat 1",
                            "first divergent token",
                            "after divergence",
                        ],
                        "range": ["#d8e8f6", "#cf222e", "#f6d5a8"],
                    },
                },
                "tooltip": [
                    {"field": "row", "title": "output"},
                    {"field": "i", "title": "token #"},
                    {"field": "token"},
                    {"field": "status"},
                ],
            },
        },
        {
            "mark": {"type": "text", "fontSize": 8, "limit": 30},
            "encoding": {"x": enc_x, "y": enc_y, "text": {"field": "label"}},
        },
    ]
    return Chart(
        "q3_determinism",
        "3. Determinism: each repeat's output aligned token by token",
        spec,
        "One row per repeat of each variant (temperature, seed); a cell per output token "
        f"(the first {_MAX_TOKENS_SHOWN}). Red: the first token that differs from repeat 1; "
        "orange: everything after it. Hover a cell for its token.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [determinism_chart(lab) or "determinism: no outputs to align."]


register_report(
    KindReport("determinism", question=3, pictures=_pictures, shows_charts_of=("next_token",))
)
