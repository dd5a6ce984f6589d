"""A report picture: one Vega-Lite spec that serves both outputs (each kind draws its own
in `labkit.report.kinds`, from the spec helpers here).

report.html embeds each spec and draws it with Vega (its JavaScript inlined from
vl-convert's bundle, so nothing is fetched): hover for exact values, drag to pan and wheel
to zoom, a provider picker (or a click on the legend) to show one provider. report.md gets
the same spec rendered to PNG by vl-convert, without a browser.

Every chart reads only the typed figures in ``lab.json`` (`labkit.figures`): the report
works on a run folder alone. A chart with nothing to draw is None, and the report says so.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import vl_convert

from labkit.records import LabAnswer, LabResults
from labkit.report.native import for_native_renderer

__all__ = [
    "Chart",
    "TokenSpans",
    "javascript_bundle",
]

_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
_WIDTH = 760


@dataclass(frozen=True)
class Chart:
    """One figure: a file stem, a title, its Vega-Lite spec and a one-line caption."""

    name: str
    title: str
    spec: dict[str, Any]
    caption: str

    @cached_property
    def png(self) -> bytes:
        """The spec drawn to PNG (for report.md), without a browser."""
        png: bytes = vl_convert.vegalite_to_png(for_native_renderer(self.spec), scale=1)
        return png


@dataclass(frozen=True)
class TokenSpans:
    """Texts cut into tokens, drawn as coloured spans: (tokenizer, text id, pieces, tokens
    per piece) rows; a piece of more than one token is a character split across tokens."""

    title: str
    rows: list[tuple[str, str, list[str], list[int]]] = field(default_factory=list)


def javascript_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script, for an HTML page with no network.

    Bundling takes seconds, and the script is the same for every report of one vl-convert
    version: it is kept in labkit's cache under that version and read from there.
    """
    from labkit.local._common import cache_dir

    version = getattr(vl_convert, "__version__", "unknown")
    kept = cache_dir() / f"vega-bundle-{version}.js"
    try:
        return kept.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    bundle: str = vl_convert.javascript_bundle()  # type: ignore[call-arg]
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=kept.parent, suffix=".part", delete=False
        ) as fh:
            fh.write(bundle)
        os.replace(fh.name, kept)  # whole or absent, for a report written alongside
    except OSError:
        pass  # no cache to write to: bundled again next time
    return bundle


def _by_kind(lab: LabResults | None, kind: type[Any]) -> list[tuple[LabAnswer, Any]]:
    if lab is None:
        return []
    return [(a, a.figures) for a in lab.answers if isinstance(a.figures, kind)]


def _provider_picker() -> dict[str, Any]:
    """A point selection on `provider`, bound to the legend (click to show one)."""
    return {"name": "pick", "select": {"type": "point", "fields": ["provider"]}, "bind": "legend"}


def _provider_menu(values: list[dict[str, Any]]) -> dict[str, Any]:
    """A point selection on `provider`, bound to a menu under the chart (every provider,
    or one alone); marks outside it fade (`_FADE`)."""
    providers = sorted({str(v["provider"]) for v in values if "provider" in v})
    return {
        "name": "only",
        "select": {"type": "point", "fields": ["provider"]},
        "bind": {
            "input": "select",
            "options": [None, *providers],
            "labels": ["every provider", *providers],
            "name": "show ",
        },
    }


_FADE = {"condition": {"param": "only", "empty": True, "value": 1}, "value": 0.12}


def _zoom() -> dict[str, Any]:
    return {"name": "zoom", "select": "interval", "bind": "scales"}


def _base(title: str, values: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$schema": _SCHEMA, "title": title, "data": {"values": values}, "width": _WIDTH}


#: The statuses of an aligned reply's tokens, as `aligned_replies` colours them.
SAME, FIRST_DIFFERENT, AFTER = "same as the first reply", "first different token", "after it"


def aligned_cells(
    provider: str, rows: list[tuple[str, list[str]]], shown: int
) -> list[dict[str, Any]]:
    """Replies as rows of token cells (the first `shown` tokens, numbered from 1), each
    token marked the same as the first row's, the first that differs, or after it."""
    if not rows:
        return []
    first = rows[0][1]
    values: list[dict[str, Any]] = []
    for row, out in rows:
        diverged = False
        for i, piece in enumerate(out[:shown]):
            same = not diverged and i < len(first) and first[i] == piece
            status = SAME if same else AFTER
            if not same and not diverged:
                status, diverged = FIRST_DIFFERENT, True
            values.append(
                {
                    "provider": provider,
                    "row": row,
                    "i": i + 1,
                    "token": piece,
                    "label": piece[:5],
                    "status": status,
                }
            )
    return values


def aligned_replies(
    name: str, heading: str, title: str, subtitle: str, values: list[dict[str, Any]], caption: str
) -> Chart:
    """Replies aligned token by token (`aligned_cells`) under `heading`: the first token that
    differs from the first reply red, everything after it orange; hover a cell for its token."""
    spec = _base(title, values)
    spec["height"] = {"step": 22}
    spec["title"] = {"text": title, "subtitle": subtitle}
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
                        "domain": [SAME, FIRST_DIFFERENT, AFTER],
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
    return Chart(name, heading, spec, caption)
