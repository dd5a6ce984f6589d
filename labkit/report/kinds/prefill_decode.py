"""`prefill_decode` in the report: TTFT and decode against prompt length, with the model
the answer states."""

from __future__ import annotations

from typing import Any

from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, _WIDTH, Chart, _by_kind, _provider_picker, _zoom
from labkit.report.kinds import KindReport, Picture, register_report
from labkit.report.load import RunData
from labkit.report.render import Block, Heading, Para, Table
from labkit.wording.prefill_decode import prompt_cost_lead, prompt_cost_model_sentence

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
                    "decode_median": p.decode_ms_per_token,
                    "what": "cold prompt (median)",
                }
            )
            # every request, so a median of two with an outlier shows as what it is
            points += [
                {"provider": ans.provider, "tokens": p.input_tokens, "decode": d, "what": "request"}
                for d in p.decode_values
            ]
            points += [
                {
                    "provider": ans.provider,
                    "tokens": p.input_tokens,
                    "ttft_ms": t,
                    "what": "request",
                }
                for t in p.ttft_values
            ]
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
    decode_y = {"type": "quantitative", "title": "decode (ms/token)"}
    decode = {
        "width": _WIDTH // 2 - 20,
        "title": "decode ms/token vs prompt tokens",
        "layer": [
            {
                "transform": [{"filter": "datum.decode != null"}],
                "mark": {"type": "point", "opacity": 0.6},
                "encoding": {
                    "x": x,
                    "y": {"field": "decode", **decode_y},
                    "color": color,
                    "tooltip": tip,
                },
            },
            {
                "transform": [{"filter": "datum.decode_median != null"}],
                "mark": {"type": "line", "point": {"filled": True, "size": 60}},
                "encoding": {
                    "x": x,
                    "y": {"field": "decode_median", **decode_y},
                    "color": color,
                    "tooltip": [
                        {"field": "provider"},
                        {"field": "tokens", "format": ".0f"},
                        {"field": "decode_median", "format": ".2f", "title": "median ms/token"},
                    ],
                },
            },
        ],
    }
    spec = {"$schema": _SCHEMA, "data": {"values": points}, "hconcat": [ttft, decode]}
    return Chart(
        "q4_prefill_decode",
        "4. Prefill and decode against prompt length",
        spec,
        "Left: every cold request's TTFT and the median at each prompt length, the model fitted "
        "on them (a line, or a curve where the data chose one) and the cache-hit point. Right: "
        "every cold request's decode ms per output token (points) and the median at each "
        "length (line): a lone high point is one request, not the length.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [prefill_chart(lab) or "prefill vs decode: no sweep points."]


def model_section(run: RunData) -> list[Block]:
    """The statistics behind question 4's answer: which model of TTFT against prompt tokens
    the data chose (and the test that chose it), its fixed part, and the marginal cost at
    the shortest and the longest prompt, per provider; the answer keeps to the lesson."""
    rows = []
    for ans, fig in _by_kind(run.lab, PrefillDecodeFigures):
        for what, m in (
            ("client TTFT", fig.ttft_model),
            ("server prefill", fig.server_prefill_model),
        ):
            if m is not None:
                rows.append(
                    [ans.provider, what, prompt_cost_lead(m), prompt_cost_model_sentence(m)]
                )
    if not rows:
        return []
    return [
        Heading("Prefill: the model behind question 4", 3),
        Para(
            "Ordinary least squares of each cold request's latency against its prompt tokens: "
            "a straight line, or a line with a quadratic term where an F-test of that term "
            "gives p < 0.05; every interval 95%.",
            "note",
        ),
        Table(["provider", "latency", "marginal cost", "model"], rows),
    ]


register_report(
    KindReport(
        "prefill_decode",
        question=4,
        pictures=_pictures,
        section=model_section,
        place="after_split",
        rank=20,
    )
)
