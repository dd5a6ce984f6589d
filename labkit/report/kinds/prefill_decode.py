"""`prefill_decode` in the report: TTFT and decode against prompt length, with the model
the answer states."""

from __future__ import annotations

from typing import Any

from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, _WIDTH, Chart, _by_kind, _provider_picker, _zoom
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["prefill_chart"]


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


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [prefill_chart(lab) or "prefill vs decode: no sweep points."]


register_report(KindReport("prefill_decode", question=4, pictures=_pictures))
