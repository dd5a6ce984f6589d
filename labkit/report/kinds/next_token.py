"""The next token, seen: the replies as tokens shaded by probability, and the divergence point.

Two Vega-Lite specs from the typed figures of `next_token` answers and of `determinism`
answers run with `top_logprobs` (`NextTokenFigures`): each reply as a row of tokens, each
shaded by the probability the model gave it and labelled under its text with the step's
entropy in bits (hover for the candidates), the step where repeats first diverged
outlined; and, per variant that diverged, the candidates at that step with the branches
the replies took. Token positions are said 1-based (token 1 is the first).
"""

from __future__ import annotations

from typing import Any

from labkit.figures.determinism import DeterminismFigures
from labkit.figures.next_token import NextTokenFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, _WIDTH, Chart
from labkit.report.kinds import KindReport, Picture, register_report
from labkit.wording.next_token import divergence_sentence

__all__ = ["divergence_chart", "next_token_charts", "tokens_chart"]


_MAX_STEPS_SHOWN = 48


def _seen(lab: LabResults | None) -> list[tuple[str, NextTokenFigures]]:
    """(provider, figures) for every answer that inspected the candidates."""
    out: list[tuple[str, NextTokenFigures]] = []
    for ans in lab.answers if lab is not None else []:
        fig = ans.figures
        if isinstance(fig, DeterminismFigures):
            fig = fig.next_token
        if isinstance(fig, NextTokenFigures) and fig.inspected:
            out.append((ans.provider, fig))
    return out


def _candidates_text(cands: list[Any]) -> str:
    return " · ".join(f"{c.token!r} {c.p:.2f}" for c in cands)


def tokens_chart(lab: LabResults | None) -> Chart | None:
    """Every reply as tokens shaded by their probability, each labelled with its step's
    entropy; the divergence step outlined."""
    values: list[dict[str, Any]] = []
    for provider, fig in _seen(lab):
        for v in fig.variants:
            split = v.divergence.step if v.divergence is not None else None
            for k, reply in enumerate(v.replies):
                for i, step in enumerate(reply[:_MAX_STEPS_SHOWN]):
                    values.append(
                        {
                            "provider": provider,
                            "row": f"{provider} · {v.variant} · repeat {k + 1}",
                            "i": i + 1,
                            "token": step.token,
                            "label": step.token[:6],
                            "p": step.p,
                            "entropy_bits": step.entropy_bits,
                            "candidates": _candidates_text(step.candidates),
                            "diverged": i == split,
                        }
                    )
    if not values:
        return None
    enc_x = {"field": "i", "type": "ordinal", "title": "output token", "axis": {"labelAngle": 0}}
    enc_y = {"field": "row", "type": "nominal", "title": None, "sort": None}
    tooltip = [
        {"field": "row", "title": "reply"},
        {"field": "i", "title": "token #"},
        {"field": "token"},
        {"field": "p", "format": ".3f"},
        {"field": "entropy_bits", "title": "entropy (bits)", "format": ".2f"},
        {"field": "candidates"},
    ]
    ink = {"condition": {"test": "datum.p > 0.6", "value": "#ffffff"}, "value": "#000000"}
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "title": {
            "text": "The next token, seen",
            "subtitle": "each token shaded by the probability the model gave it; under it, "
            "the step's entropy in bits",
        },
        "data": {"values": values},
        "width": _WIDTH,
        "height": {"step": 30},
        "layer": [
            {
                "mark": {"type": "rect", "stroke": "#ffffff"},
                "encoding": {
                    "x": enc_x,
                    "y": enc_y,
                    "color": {
                        "field": "p",
                        "type": "quantitative",
                        "title": "p",
                        "scale": {"domain": [0, 1], "scheme": "blues"},
                    },
                    "tooltip": tooltip,
                },
            },
            {
                "transform": [{"filter": "datum.diverged"}],
                "mark": {"type": "rect", "fill": None, "stroke": "#cf222e", "strokeWidth": 2},
                "encoding": {"x": enc_x, "y": enc_y},
            },
            {
                "mark": {"type": "text", "fontSize": 8, "limit": 30, "dy": -5},
                "encoding": {
                    "x": enc_x,
                    "y": enc_y,
                    "text": {"field": "label"},
                    "tooltip": tooltip,
                    "color": ink,
                },
            },
            {  # the step's entropy, under the token's text
                "mark": {"type": "text", "fontSize": 7, "dy": 7},
                "encoding": {
                    "x": enc_x,
                    "y": enc_y,
                    "text": {"field": "entropy_bits", "format": ".1f"},
                    "tooltip": tooltip,
                    "color": ink,
                },
            },
        ],
    }
    return Chart(
        "q3_next_token",
        "3. The next token: each reply's tokens shaded by their probability, with each "
        "step's entropy",
        spec,
        f"One row per repeat of each variant, a cell per output token (the first "
        f"{_MAX_STEPS_SHOWN}, token 1 the first), darker where the model was surer; the "
        "small number under each token is the step's entropy in bits (at least: the "
        "candidates beyond the top ones count as one outcome; 0 is certain), higher where "
        "the model spread its probability; outlined in red: where the repeats first took "
        "different tokens. Hover a cell for its candidates.",
    )


def divergence_chart(lab: LabResults | None) -> Chart | None:
    """At each variant's divergence step: the candidates and the branches the replies took."""
    values: list[dict[str, Any]] = []
    sentences: list[str] = []
    for provider, fig in _seen(lab):
        sentences.append(f"{provider}: {divergence_sentence(fig)}")
        for v in fig.variants:
            d = v.divergence
            if d is None:
                continue
            panel = f"{provider} · {v.variant} · token {d.step + 1}"
            taken = {c.token: n for n, c in enumerate(d.taken, start=1)}
            shown = {c.token for c in d.candidates}
            bars = list(d.candidates) + [c for c in d.taken if c.token not in shown]
            for c in bars:
                n = taken.get(c.token)
                values.append(
                    {
                        "provider": provider,
                        "panel": panel,
                        "token": repr(c.token),
                        "p": c.p,
                        "branch": f"taken by branch {n}" if n else "not taken",
                    }
                )
    if not values:
        return None
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "title": {"text": "Where the replies diverged", "subtitle": "the candidates at that step"},
        "data": {"values": values},
        "facet": {"row": {"field": "panel", "type": "nominal", "title": None}},
        "resolve": {"scale": {"y": "independent"}},
        "spec": {
            "width": _WIDTH - 200,
            "mark": "bar",
            "encoding": {
                "y": {"field": "token", "type": "nominal", "sort": "-x", "title": None},
                "x": {"field": "p", "type": "quantitative", "title": "probability"},
                "color": {
                    "field": "branch",
                    "type": "nominal",
                    "scale": {
                        "domain": ["taken by branch 1", "taken by branch 2", "not taken"],
                        "range": ["#0969da", "#cf222e", "#b0b7bf"],
                    },
                },
                "tooltip": [
                    {"field": "panel", "title": "where"},
                    {"field": "token"},
                    {"field": "p", "format": ".3f"},
                    {"field": "branch"},
                ],
            },
        },
    }
    return Chart(
        "q3_divergence",
        "3. Where the replies diverged: the candidates at that step",
        spec,
        " ".join(sentences),
    )


def next_token_charts(lab: LabResults | None) -> list[Chart]:
    """The two pictures, where any answer inspected the candidates."""
    return [c for c in (tokens_chart(lab), divergence_chart(lab)) if c is not None]


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [*next_token_charts(lab)] or ["next token: no candidates were returned."]


register_report(KindReport("next_token", pictures=_pictures))
