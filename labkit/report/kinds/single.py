"""`single` in the report: the picture beside its answer, a request's anatomy."""

from __future__ import annotations

from typing import Any

from labkit.figures.single import SingleFigures
from labkit.records import LabResults
from labkit.report.charts import _FADE, Chart, _base, _by_kind, _provider_menu, _zoom
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["anatomy_chart"]


def anatomy_chart(lab: LabResults | None) -> Chart | None:
    """Per provider, the timeline of the request with the median TTFT (a cold one, where the
    experiment sent its prompts cold and cached): the client's milestones and every token
    (numbered from 1), with the server's own prefill and decode drawn on a lane beside it."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, SingleFigures):
        t = fig.timeline
        if t is None:
            continue
        client, server = f"{ans.provider} · client", f"{ans.provider} · server"
        for i, offset in enumerate(t.event_offsets_ms):
            values.append(
                {"provider": ans.provider, "lane": client, "what": f"token {i + 1}", "t": offset}
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


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [anatomy_chart(lab) or "anatomy: no single request with a token timeline."]


register_report(KindReport("single", question=1, pictures=_pictures))
