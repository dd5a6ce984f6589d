"""`prompt_cache` in the report: each probed setting's hit rate with its interval, and the gap
probes against the lifetime bracket they found."""

from __future__ import annotations

from typing import Any

from labkit.figures.prompt_cache import PromptCacheFigures
from labkit.records import LabResults
from labkit.report.charts import _WIDTH, Chart, _base, _by_kind, _provider_picker
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["prompt_cache_gap_chart", "prompt_cache_hits_chart"]


def prompt_cache_hits_chart(lab: LabResults | None) -> Chart | None:
    """Per provider and setting, the share of repeats that hit, with its 95% interval."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, PromptCacheFigures):
        for k, row in enumerate(fig.rows):
            if not row.repeats:
                continue
            values.append(
                {
                    "provider": ans.provider,
                    "setting": f"{row.phase} · {row.label}",
                    "order": k,
                    "hit_rate": row.hit_rate.value,
                    "lo": row.hit_rate.lo,
                    "hi": row.hit_rate.hi,
                    "hits": f"{row.hits} of {row.repeats}",
                    "cached": row.cached_tokens_p50,
                }
            )
    if not values:
        return None
    y = {
        "field": "setting",
        "type": "nominal",
        "title": None,
        "sort": {"field": "order", "op": "min"},
    }
    color = {"field": "provider", "type": "nominal"}
    opacity = {"condition": {"param": "pick", "value": 1}, "value": 0.15}
    tip = [
        {"field": "provider"},
        {"field": "setting"},
        {"field": "hits", "title": "repeats that hit"},
        {"field": "hit_rate", "format": ".0%", "title": "hit rate"},
        {"field": "lo", "format": ".0%", "title": "95% CI low"},
        {"field": "hi", "format": ".0%", "title": "95% CI high"},
        {"field": "cached", "format": ".0f", "title": "cached tokens (median)"},
    ]
    x = {"type": "quantitative", "scale": {"domain": [0, 1]}, "axis": {"format": "%"}}
    spec = {
        **_base("Prompt cache: the share of repeats served from the cache", values),
        "layer": [
            {
                "mark": {"type": "rule", "strokeWidth": 2},
                "encoding": {
                    "y": y,
                    "x": {**x, "field": "lo", "title": "repeats that hit (95% CI)"},
                    "x2": {"field": "hi"},
                    "yOffset": {"field": "provider"},
                    "color": color,
                    "opacity": opacity,
                    "tooltip": tip,
                },
            },
            {
                "mark": {"type": "point", "filled": True, "size": 80},
                "params": [_provider_picker()],
                "encoding": {
                    "y": y,
                    "x": {**x, "field": "hit_rate"},
                    "yOffset": {"field": "provider"},
                    "color": color,
                    "opacity": opacity,
                    "tooltip": tip,
                },
            },
        ],
    }
    return Chart(
        "prompt_cache_hits",
        "Prompt cache: hit rate per probed setting",
        spec,
        "Each probe primes a prompt that opens with a fresh nonce, then repeats it; a repeat "
        "hits when the provider reports at least half its prompt as cached. Dot: the share "
        "of repeats that hit; line: its exact 95% interval.",
    )


def prompt_cache_gap_chart(lab: LabResults | None) -> Chart | None:
    """Each gap probe's measured idle gap and whether its repeat hit, with the lifetime
    bracket the probes found."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, PromptCacheFigures):
        for row in fig.rows:
            for gap, hit in zip(row.gaps_s, row.gap_hits, strict=True):
                values.append(
                    {"provider": ans.provider, "gap_s": gap, "hit": "hit" if hit else "miss"}
                )
        life = fig.lifetime
        if life is not None:
            for bound, name in ((life.lo_s, "longest gap that hit"), (life.hi_s, "shortest miss")):
                if bound is not None:
                    values.append({"provider": ans.provider, "bound_s": bound, "bound": name})
    if not any("gap_s" in v for v in values):
        return None
    x = {"type": "quantitative", "title": "idle gap, prime start to repeat start (s)"}
    spec = {
        **_base("Prompt cache: the idle gap before a repeat, and whether it hit", values),
        "height": 160,
        "layer": [
            {
                "transform": [{"filter": "datum.bound_s != null"}],
                "mark": {"type": "rule", "strokeDash": [4, 3]},
                "encoding": {
                    "x": {**x, "field": "bound_s"},
                    "color": {"field": "provider", "type": "nominal"},
                    "tooltip": [
                        {"field": "provider"},
                        {"field": "bound", "title": "lifetime bound"},
                        {"field": "bound_s", "format": ".3f", "title": "s"},
                    ],
                },
            },
            {
                "transform": [{"filter": "datum.gap_s != null"}],
                "mark": {"type": "point", "filled": True, "size": 70},
                "encoding": {
                    "x": {**x, "field": "gap_s"},
                    "y": {"field": "hit", "type": "nominal", "title": None},
                    "color": {"field": "provider", "type": "nominal"},
                    "tooltip": [
                        {"field": "provider"},
                        {"field": "gap_s", "format": ".3f", "title": "gap (s)"},
                        {"field": "hit"},
                    ],
                },
            },
        ],
        "width": _WIDTH,
    }
    return Chart(
        "prompt_cache_gaps",
        "Prompt cache: the lifetime, bracketed by idle gaps",
        spec,
        "Each dot a gap probe: its measured idle gap and whether the repeat still hit. Dashed: "
        "the longest gap that hit and the shortest that missed — the cache's lifetime lies "
        "between them.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    pictures: list[Picture] = [
        prompt_cache_hits_chart(lab) or "prompt_cache: no repeat reported cached tokens."
    ]
    gaps = prompt_cache_gap_chart(lab)
    if gaps is not None:
        pictures.append(gaps)
    return pictures


register_report(KindReport("prompt_cache", pictures=_pictures))
