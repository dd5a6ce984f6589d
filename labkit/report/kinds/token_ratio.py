"""`token_ratio` in the report: characters per token, every tokenizer side by side, and
each text cut into its tokens."""

from __future__ import annotations

from typing import Any

from labkit.figures.token_ratio import TokenRatioFigures
from labkit.records import LabResults
from labkit.report.charts import Chart, TokenSpans, _base, _by_kind
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["chars_per_token_chart", "token_spans"]


def chars_per_token_chart(lab: LabResults | None) -> Chart | None:
    """Characters per token by text kind, one bar per tokenizer, with the 4-characters line."""
    values: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for _ans, fig in _by_kind(lab, TokenRatioFigures):
        for row in fig.side_by_side:
            if row.chars_per_token is None or (row.text_id, row.tokenizer) in seen:
                continue
            seen.add((row.text_id, row.tokenizer))
            values.append(
                {
                    "text": row.text_id,
                    "tokenizer": row.tokenizer.removeprefix("tiktoken:"),
                    "chars_per_token": row.chars_per_token,
                    "tokens": row.tokens,
                }
            )
        if not fig.side_by_side:
            for r in fig.rows:
                if r.chars_per_token is not None:
                    values.append(
                        {
                            "text": r.text_id,
                            "tokenizer": _ans.provider,
                            "chars_per_token": r.chars_per_token,
                            "tokens": r.tokens,
                        }
                    )
    if not values:
        return None
    spec = _base("Characters per token", values)
    pick = {
        "name": "pick",
        "select": {"type": "point", "fields": ["tokenizer"]},
        "bind": "legend",
    }
    spec["layer"] = [
        {
            "mark": "bar",
            "params": [pick],
            "encoding": {
                "x": {
                    "field": "text",
                    "type": "nominal",
                    "title": "text kind",
                    "sort": None,
                    "axis": {"labelAngle": 0},
                },
                "xOffset": {"field": "tokenizer"},
                "y": {"field": "chars_per_token", "type": "quantitative", "title": "chars/token"},
                "color": {"field": "tokenizer", "type": "nominal", "legend": {"labelLimit": 360}},
                "opacity": {"condition": {"param": "pick", "value": 1}, "value": 0.15},
                "tooltip": [
                    {"field": "text"},
                    {"field": "tokenizer"},
                    {"field": "chars_per_token", "format": ".2f", "title": "chars/token"},
                    {"field": "tokens"},
                ],
            },
        },
        {
            "data": {"values": [{"rule": 4}]},
            "mark": {"type": "rule", "color": "#cf222e", "strokeDash": [6, 4], "size": 2},
            "encoding": {"y": {"field": "rule", "type": "quantitative"}},
        },
    ]
    return Chart(
        "q2_chars_per_token",
        "2. Characters per token by kind of text, every tokenizer side by side",
        spec,
        "Bars: characters per token of each sample text with each tokenizer (higher: fewer "
        "tokens for the same text). Red dashed line: the '1 token ≈ 4 characters' rule.",
    )


def token_spans(lab: LabResults | None) -> TokenSpans | None:
    """Each sample text cut by each tokenizer that gave its pieces."""
    rows: list[tuple[str, str, list[str], list[int]]] = []
    for _ans, fig in _by_kind(lab, TokenRatioFigures):
        for p in fig.pieces:
            counts = p.tokens_per_piece or [1] * len(p.pieces)
            row = (p.tokenizer.removeprefix("tiktoken:"), p.text_id, p.pieces, counts)
            if row not in rows:
                rows.append(row)
    if not rows:
        return None
    return TokenSpans(
        "Token boundaries of each sample text (one colour per token; a dashed box is one "
        "character whose bytes took several tokens)",
        rows,
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [
        chars_per_token_chart(lab) or "chars per token: no token_ratio figures.",
        token_spans(lab) or "token boundaries: no tokenizer gave its pieces.",
    ]


register_report(KindReport("token_ratio", question=2, pictures=_pictures))
