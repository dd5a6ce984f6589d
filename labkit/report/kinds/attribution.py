"""`attribution` in the report: whose time TTFT is (one stacked bar per provider), and
every measurement of each answer in a table."""

from __future__ import annotations

from typing import Any

from labkit.figures.attribution import AttributionFigures, AttributionKey
from labkit.records import LabResults
from labkit.report.charts import _FADE, Chart, _base, _by_kind, _provider_menu, _zoom
from labkit.report.kinds import KindReport, Picture, register_report
from labkit.report.render import Block, Heading, Para, Table
from labkit.wording import CLIENT_BOUND_MARK, marked

__all__ = ["attribution_section", "whose_time_chart"]

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
