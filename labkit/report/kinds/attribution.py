"""`attribution` in the report: whose time TTFT is (one stacked bar per provider), and
every measurement of each answer in a table."""

from __future__ import annotations

from typing import Any

from labkit.figures import Mean, Quantile
from labkit.figures.attribution import AttributionFigures
from labkit.records import LabResults
from labkit.report.charts import _FADE, Chart, _base, _by_kind, _provider_menu, _zoom
from labkit.report.kinds import KindReport, Picture, register_report
from labkit.report.render import Block, Heading, Para, Table
from labkit.wording import CLIENT_BOUND_MARK, marked

__all__ = ["attribution_section", "whose_time_chart"]

_LABKIT = "labkit: its own time inside the clock (send)"
_QUEUE = "provider: queue"
_PREFILL = "provider: prefill"
_NETWORK = "network and serving front end"
_UNSPLIT = "provider + network, not separable"
_PREPARE = "labkit: preparing the request (before the clock)"
_PARSE = "labkit: parsing the stream (the whole stream)"
_ORDER = [_LABKIT, _QUEUE, _PREFILL, _NETWORK, _UNSPLIT, _PREPARE, _PARSE]


def _value(q: Mean | Quantile | None) -> float | None:
    return None if q is None else q.value


def whose_time_chart(lab: LabResults | None) -> tuple[Chart | None, list[str]]:
    """Per provider, the mean TTFT as one stacked bar of parts that add up to it, and beside
    it labkit's work outside the clock; a sentence per part that could not be derived."""
    values: list[dict[str, Any]] = []
    missing: list[str] = []
    for ans, fig in _by_kind(lab, AttributionFigures):
        split = fig.ttft_split
        if split is None or split.ttft_ms is None:
            missing.append(f"{ans.provider}: no TTFT to split.")
            continue
        # The bar of a split the self-check flagged says so (its reason: "What is missing").
        mark = f" {CLIENT_BOUND_MARK}" if split.client_bound else ""
        inside = f"{ans.provider}: TTFT{mark}"
        outside = f"{ans.provider}: outside the clock"
        parts = [
            (inside, _LABKIT, _value(split.labkit_ms)),
            (inside, _QUEUE, _value(split.provider_queue_ms)),
            (inside, _PREFILL, _value(split.provider_prefill_ms)),
            (inside, _NETWORK, _value(split.network_front_end_ms)),
            (inside, _UNSPLIT, _value(split.unsplit_ms)),
            (outside, _PREPARE, _value(fig.prepare_ms)),
            (outside, _PARSE, _value(fig.parse_ms)),
        ]
        for bar, label, value in parts:
            if value is None:
                continue
            values.append(
                {
                    "provider": ans.provider,
                    "bar": bar,
                    "part": label,
                    "ms": max(value, 0.0),
                    "order": _ORDER.index(label),
                }
            )
        missing += [f"{ans.provider}: not derived: {why}." for why in split.not_derived]
    if not values:
        return None, missing
    spec = _base("Whose time is it?", values)
    spec["mark"] = "bar"
    spec["params"] = [_zoom(), _provider_menu(values)]
    spec["encoding"] = {
        "opacity": _FADE,
        "y": {"field": "bar", "type": "nominal", "title": None, "sort": None},
        "x": {"field": "ms", "type": "quantitative", "title": "ms (means)", "stack": True},
        "color": {
            "field": "part",
            "type": "nominal",
            "sort": _ORDER,
            "legend": {"orient": "bottom", "columns": 2, "labelLimit": 360},
        },
        "order": {"field": "order"},
        "tooltip": [{"field": "bar"}, {"field": "part"}, {"field": "ms", "format": ".2f"}],
    }
    return (
        Chart(
            "q5_whose_time",
            "5. Whose time is it? The mean TTFT, part by part",
            spec,
            "Per provider, the top bar is the mean time to the first token of the attribution "
            "requests, split into parts that add up to it: labkit's own time inside the clock "
            "(sending the request), the provider's queue and prefill, and the network and "
            "serving front end (the rest). A provider that reports no prefill has one part for "
            "itself and the network together. The bar below is labkit's work outside the "
            "clock, not part of the TTFT: preparing the request before the clock starts, and "
            "parsing the whole stream (medians).",
        ),
        missing,
    )


def attribution_section(lab: LabResults | None) -> list[Block]:
    """Every measurement of each attribution answer: owner, median, source, or why there is
    none (the answer's words name only the largest; the rest lives here)."""
    blocks: list[Block] = []
    for ans in lab.answers if lab is not None else []:
        f = ans.figures
        if not isinstance(f, AttributionFigures) or not f.rows:
            continue
        if not blocks:
            blocks.append(Heading("Attribution: every measurement", 3))
        rows = [
            [
                r.measurement,
                r.owner,
                marked("—" if r.value_ms is None else f"{r.value_ms:.3f}", r.client_bound),
                r.source,
                r.note or "",
            ]
            for r in f.rows
        ]
        blocks += [
            Para(f"{ans.provider} · {ans.experiment}: medians over {f.n} requests, in ms.", "note"),
            Table(["measurement", "owner", "median ms", "source", "note"], rows, {2}),
        ]
    return blocks


def _pictures(lab: LabResults | None) -> list[Picture]:
    whose, missing = whose_time_chart(lab)
    return [whose or "whose time: no attribution figures.", *missing]


register_report(
    KindReport(
        "attribution",
        question=5,
        pictures=_pictures,
        section=lambda run: attribution_section(run.lab),
        place="after_split",
    )
)
