"""The picture of each lab question, as one Vega-Lite spec that serves both outputs.

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

from labkit.figures.attribution import AttributionFigures, AttributionKey
from labkit.figures.determinism import DeterminismFigures
from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.figures.single import SingleFigures
from labkit.figures.token_ratio import TokenRatioFigures
from labkit.records import LabAnswer, LabResults
from labkit.report.native import for_native_renderer
from labkit.report.next_token_chart import next_token_charts
from labkit.wording import CLIENT_BOUND_MARK

__all__ = [
    "Chart",
    "TokenSpans",
    "anatomy_chart",
    "chars_per_token_chart",
    "determinism_chart",
    "javascript_bundle",
    "prefill_chart",
    "question_charts",
    "token_spans",
    "whose_time_chart",
]

_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
_WIDTH = 760
_MAX_TOKENS_SHOWN = 48


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


# --- 1. a request's anatomy ------------------------------------------------------------------


def anatomy_chart(lab: LabResults | None) -> Chart | None:
    """Per provider, the median request's timeline: the client's milestones and every token,
    with the server's own prefill and decode drawn on a lane beside it."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, SingleFigures):
        t = fig.timeline
        if t is None:
            continue
        client, server = f"{ans.provider} · client", f"{ans.provider} · server"
        for i, offset in enumerate(t.event_offsets_ms):
            values.append(
                {"provider": ans.provider, "lane": client, "what": f"token {i}", "t": offset}
            )
        for what, at in (
            ("headers", t.headers_ms),
            ("first token", t.ttft_ms),
            ("last token", t.last_token_ms),
            ("end of stream", t.e2e_ms),
        ):
            if at is not None:
                values.append({"provider": ans.provider, "lane": client, "what": what, "t": at})
        if t.ttft_ms is not None and t.provider_prefill_ms is not None:
            start = max(0.0, t.ttft_ms - t.provider_prefill_ms)
            values.append(
                {
                    "provider": ans.provider,
                    "lane": server,
                    "what": "server prefill",
                    "t": start,
                    "t2": t.ttft_ms,
                    "ms": t.provider_prefill_ms,
                }
            )
            if t.provider_decode_ms is not None:
                values.append(
                    {
                        "provider": ans.provider,
                        "lane": server,
                        "what": "server decode",
                        "t": t.ttft_ms,
                        "t2": t.ttft_ms + t.provider_decode_ms,
                        "ms": t.provider_decode_ms,
                    }
                )
    if not values:
        return None
    x = {"field": "t", "type": "quantitative", "title": "ms since the request was sent"}
    y = {"field": "lane", "type": "nominal", "title": None}
    spec = _base("A request's anatomy", values)
    spec["height"] = {"step": 34}
    spec["layer"] = [
        {
            "transform": [{"filter": "datum.t2 != null"}],
            "mark": {"type": "bar", "height": 14},
            "params": [_zoom(), _provider_menu(values)],
            "encoding": {
                "x": x,
                "x2": {"field": "t2"},
                "y": y,
                "opacity": _FADE,
                "color": {"field": "what", "type": "nominal", "title": "server's own clock"},
                "tooltip": [
                    {"field": "provider"},
                    {"field": "what"},
                    {"field": "ms", "format": ".2f", "title": "ms"},
                ],
            },
        },
        {
            "transform": [{"filter": "datum.t2 == null && indexof(datum.what, 'token ') == 0"}],
            "mark": {"type": "tick", "thickness": 1, "color": "#57606a"},
            "encoding": {
                "x": x,
                "y": y,
                "opacity": _FADE,
                "tooltip": [{"field": "what"}, {"field": "t", "format": ".2f", "title": "ms"}],
            },
        },
        {
            "transform": [{"filter": "datum.t2 == null && indexof(datum.what, 'token ') != 0"}],
            "mark": {"type": "point", "filled": True, "size": 90},
            "encoding": {
                "x": x,
                "y": y,
                "opacity": _FADE,
                "shape": {"field": "what", "type": "nominal", "title": "client milestone"},
                "tooltip": [{"field": "what"}, {"field": "t", "format": ".2f", "title": "ms"}],
            },
        },
    ]
    spec["resolve"] = {"scale": {"color": "independent", "shape": "independent"}}
    return Chart(
        "q1_anatomy",
        "1. A request's anatomy: client milestones, every token, the server's own clock",
        spec,
        "The median-TTFT request of the single experiment per provider. Grey ticks: each "
        "token's arrival; points: headers, first token, last token, end of stream. The server "
        "lane draws its own prefill and decode times, placed so prefill ends at the client's "
        "first token (the two clocks are not synchronised).",
    )


# --- 2. characters per token -----------------------------------------------------------------


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


# --- 3. determinism --------------------------------------------------------------------------


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
                            "i": i,
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


# --- 4. prefill vs decode --------------------------------------------------------------------


def _model_line(fig: PrefillDecodeFigures) -> list[dict[str, Any]]:
    """The TTFT model the answer states (`ttft_model`: a line, or a curve drawn through 24
    points), over the prompt lengths it was fitted on; an older run's straight `fit`."""
    m = fig.ttft_model
    if m is not None:
        quad = m.ms_per_token_squared.value if m.ms_per_token_squared is not None else 0.0
        steps = 24 if m.model == "quadratic" else 1
        xs = [m.min_tokens + (m.max_tokens - m.min_tokens) * k / steps for k in range(steps + 1)]
        what = f"{m.model} model"
        return [
            {
                "tokens": x,
                "fit_ms": m.intercept_ms.value + m.ms_per_token.value * x + quad * x * x,
                "what": what,
            }
            for x in xs
        ]
    xs = [p.input_tokens for p in fig.points if p.input_tokens is not None]
    if fig.fit is None or not xs:
        return []
    line = fig.fit
    return [
        {"tokens": x, "fit_ms": line.intercept_ms + line.ms_per_token * x, "what": "line"}
        for x in (min(xs), max(xs))
    ]


def prefill_chart(lab: LabResults | None) -> Chart | None:
    """TTFT against prompt tokens with the fitted line, the cache-hit point, and decode
    ms/token against prompt length."""
    points: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, PrefillDecodeFigures):
        for p in fig.points:
            if p.input_tokens is None:
                continue
            points.append(
                {
                    "provider": ans.provider,
                    "tokens": p.input_tokens,
                    "ttft_ms": p.ttft_ms,
                    "decode": p.decode_ms_per_token,
                    "what": "cold prompt (median)",
                }
            )
        points += [{"provider": ans.provider, **p} for p in _model_line(fig)]
        cache = fig.cache
        if cache is not None and cache.hit_ttft_ms is not None:
            points.append(
                {
                    "provider": ans.provider,
                    "tokens": cache.hit_input_tokens or cache.prefix_tokens,
                    "ttft_ms": cache.hit_ttft_ms,
                    "what": "cached prefix (hit)",
                }
            )
    if not points:
        return None
    x = {"field": "tokens", "type": "quantitative", "title": "prompt tokens"}
    color = {"field": "provider", "type": "nominal"}
    opacity = {"condition": {"param": "pick", "value": 1}, "value": 0.15}
    tip = [
        {"field": "provider"},
        {"field": "what"},
        {"field": "tokens", "format": ".0f"},
        {"field": "ttft_ms", "format": ".1f", "title": "TTFT ms"},
        {"field": "decode", "format": ".2f", "title": "decode ms/token"},
    ]
    ttft = {
        "width": _WIDTH // 2 - 20,
        "title": "TTFT vs prompt tokens",
        "layer": [
            {
                "transform": [{"filter": "datum.fit_ms != null"}],
                "mark": {"type": "line", "strokeDash": [4, 3]},
                "encoding": {
                    "x": x,
                    "y": {"field": "fit_ms", "type": "quantitative", "title": "TTFT (ms)"},
                    "color": color,
                    "detail": {"field": "what"},
                    "opacity": opacity,
                    "tooltip": [{"field": "provider"}, {"field": "what"}],
                },
            },
            {
                "transform": [{"filter": "datum.ttft_ms != null"}],
                "mark": {"type": "point", "filled": True, "size": 70},
                "params": [_provider_picker(), _zoom()],
                "encoding": {
                    "x": x,
                    "y": {"field": "ttft_ms", "type": "quantitative", "title": "TTFT (ms)"},
                    "color": color,
                    "shape": {"field": "what", "type": "nominal", "title": "point"},
                    "opacity": opacity,
                    "tooltip": tip,
                },
            },
        ],
    }
    decode = {
        "width": _WIDTH // 2 - 20,
        "title": "decode ms/token vs prompt tokens",
        "transform": [{"filter": "datum.decode != null"}],
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": x,
            "y": {"field": "decode", "type": "quantitative", "title": "decode (ms/token)"},
            "color": color,
            "tooltip": tip,
        },
    }
    spec = {"$schema": _SCHEMA, "data": {"values": points}, "hconcat": [ttft, decode]}
    return Chart(
        "q4_prefill_decode",
        "4. Prefill and decode against prompt length",
        spec,
        "Left: median TTFT at each prompt length, the model the answer states (a line, or a "
        "curve where the data chose one; fitted on every cold request) and the cache-hit point. "
        "Right: decode ms per output token at each prompt length.",
    )


# --- 5. whose time is it ---------------------------------------------------------------------

_QUEUE = "provider: queue"
_PREFILL = "provider: prefill"
_NETWORK = "network and serving front end"
_PREPARE = "labkit: preparing the request"
_PARSE = "labkit: parsing the stream"
_UNSPLIT = "provider + network, not separable (client TTFT)"
_ORDER = [_QUEUE, _PREFILL, _NETWORK, _UNSPLIT, _PREPARE, _PARSE]


def whose_time_chart(lab: LabResults | None) -> tuple[Chart | None, list[str]]:
    """One stacked bar per provider, and a sentence per part that could not be derived."""
    values: list[dict[str, Any]] = []
    missing: list[str] = []
    for ans, fig in _by_kind(lab, AttributionFigures):
        split = fig.ttft_split
        # The bar of a split the self-check flagged says so (its reason: "What is missing").
        who = ans.provider + (f" {CLIENT_BOUND_MARK}" if split and split.client_bound else "")
        # The answer's own TTFTSplit (labkit.analysis.split): the medians it states.
        parts: list[tuple[str, float | None]] = [
            (_QUEUE, split.provider_queue_ms.value if split and split.provider_queue_ms else None),
            (
                _PREFILL,
                (split.provider_prefill_ms.value if split.provider_prefill_ms else None)
                if split
                else fig.value(AttributionKey.PREFILL),
            ),
            (
                _NETWORK,
                (split.network_front_end_ms.value if split.network_front_end_ms else None)
                if split
                else fig.value(AttributionKey.TTFT_MINUS_PREFILL),
            ),
        ]
        if all(v is None for _, v in parts) and fig.ttft_ms_p50 is not None:
            parts.append((_UNSPLIT, fig.ttft_ms_p50))
        for key, label in (
            (AttributionKey.REQUEST_PREPARATION, _PREPARE),
            (AttributionKey.STREAM_PARSING, _PARSE),
        ):
            try:
                parts.append((label, fig.value(key)))
            except KeyError:
                parts.append((label, None))
        for label, value in parts:
            if value is None:
                # The split says why its own terms are missing; name the others here.
                if split is None or label not in (_QUEUE, _PREFILL):
                    missing.append(f"{ans.provider}: {label} not derived.")
                continue
            values.append(
                {
                    "provider": who,
                    "part": label,
                    "ms": max(value, 0.0),
                    "order": _ORDER.index(label),
                }
            )
        if split is not None:
            missing += [f"{ans.provider}: not derived: {why}." for why in split.not_derived]
    if not values:
        return None, missing
    spec = _base("Whose time is it?", values)
    spec["mark"] = "bar"
    spec["params"] = [_zoom(), _provider_menu(values)]
    spec["encoding"] = {
        "opacity": _FADE,
        "y": {"field": "provider", "type": "nominal", "title": None},
        "x": {"field": "ms", "type": "quantitative", "title": "ms (medians)", "stack": True},
        "color": {
            "field": "part",
            "type": "nominal",
            "sort": _ORDER,
            "legend": {"orient": "bottom", "columns": 2, "labelLimit": 360},
        },
        "order": {"field": "order"},
        "tooltip": [{"field": "provider"}, {"field": "part"}, {"field": "ms", "format": ".2f"}],
    }
    return (
        Chart(
            "q5_whose_time",
            "5. Whose time is it? One stacked bar per provider",
            spec,
            "Medians of the attribution experiment: the provider's queue and prefill, the "
            "network and serving front end (client TTFT − queue − prefill), and labkit's own time "
            "(preparing the request, before the clock starts, and parsing the stream). A "
            "provider that reports no prefill gets one bar of its whole client TTFT: "
            "its parts cannot be separated.",
        ),
        missing,
    )


def question_charts(
    lab: LabResults | None,
) -> dict[str, list[Chart | TokenSpans | str]]:
    """Per lab experiment kind, its pictures in order, and sentences for what is missing."""
    spans = token_spans(lab)
    whose, missing = whose_time_chart(lab)
    seen = [Chart(p.name, p.title, p.spec, p.caption) for p in next_token_charts(lab)]
    out: dict[str, list[Chart | TokenSpans | str]] = {
        "single": [anatomy_chart(lab) or "anatomy: no single request with a token timeline."],
        "token_ratio": [
            chars_per_token_chart(lab) or "chars per token: no token_ratio figures.",
            spans or "token boundaries: no tokenizer gave its pieces.",
        ],
        "determinism": [
            determinism_chart(lab) or "determinism: no outputs to align.",
            *seen,
        ],
        "next_token": [*seen] or ["next token: no candidates were returned."],
        "prefill_decode": [prefill_chart(lab) or "prefill vs decode: no sweep points."],
        "attribution": [whose or "whose time: no attribution figures.", *missing],
    }
    return out
