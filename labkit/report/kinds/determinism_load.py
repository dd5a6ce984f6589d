"""`determinism_load` in the report: each level's distinct replies aligned token by token,
the first token that differs from the level's first reply marked."""

from __future__ import annotations

from typing import Any

from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.records import LabResults
from labkit.report.charts import _FADE, Chart, _base, _by_kind, _provider_menu
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["determinism_load_chart"]

_MAX_TOKENS_SHOWN = 64


def _distinct(outputs: list[list[str]]) -> list[tuple[list[str], int]]:
    """Each distinct reply once, in order of first appearance, with how many gave it."""
    seen: dict[tuple[str, ...], int] = {}
    for out in outputs:
        seen[tuple(out)] = seen.get(tuple(out), 0) + 1
    return [(list(out), n) for out, n in seen.items()]


def determinism_load_chart(lab: LabResults | None) -> Chart | None:
    """Per provider and level, each distinct reply as a row of tokens."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, DeterminismLoadFigures):
        for level in fig.levels:
            replies = _distinct(level.outputs)
            if not replies:
                continue
            first = replies[0][0]
            for k, (out, n) in enumerate(replies):
                row = (
                    f"{ans.provider} · concurrency {level.concurrency} · reply {k + 1} "
                    f"({n} of {level.n})"
                )
                diverged = False
                for i, piece in enumerate(out[:_MAX_TOKENS_SHOWN]):
                    same = i < len(first) and first[i] == piece and not diverged
                    status = "same as the level's first reply" if same else "after divergence"
                    if not same and not diverged:
                        status, diverged = "first different token", True
                    values.append(
                        {
                            "provider": ans.provider,
                            "row": row,
                            "i": i + 1,
                            "token": piece,
                            "label": piece[:5],
                            "status": status,
                        }
                    )
    if not values:
        return None
    rows = len({v["row"] for v in values})
    spec = _base("Determinism under load", values)
    spec["height"] = {"step": 22}
    spec["title"] = {
        "text": "Determinism under load",
        "subtitle": f"{rows} rows: each level's distinct replies",
    }
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
                            "same as the level's first reply",
                            "first different token",
                            "after divergence",
                        ],
                        "range": ["#d8e8f6", "#cf222e", "#f6d5a8"],
                    },
                },
                "tooltip": [
                    {"field": "row", "title": "reply"},
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
        "determinism_load",
        "Determinism under load: each level's distinct replies aligned token by token",
        spec,
        "One row per distinct reply of each concurrency level (how many of the level's "
        f"replies gave it in brackets); a cell per output token (the first {_MAX_TOKENS_SHOWN}). "
        "Red: the first token that differs from the level's first reply; orange: everything "
        "after it. One row for a level: every reply there was the same.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [determinism_load_chart(lab) or "determinism_load: no replies to align."]


register_report(KindReport("determinism_load", pictures=_pictures))
