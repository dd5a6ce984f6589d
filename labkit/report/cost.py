"""The report's and the comparison's cost section: shown only where the run's config gave
a price table (``prices:``, docs/pricing.md), from the one cost definition
(`labkit.analysis.cost`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from labkit.analysis.cost import COST_COLUMNS, CostTally, cost_figures
from labkit.figures.observatory import CostFigures
from labkit.pricing import PriceTable, price_table
from labkit.report.charts import Chart, _base, _provider_picker
from labkit.report.load import RunData
from labkit.report.render import Block, ChartBlock, Heading, Para, Table
from labkit.wording.cost import money, per_money

if TYPE_CHECKING:
    from labkit.report.columnar import Sidecar

__all__ = [
    "COST_REPORT_COLUMNS",
    "comparison_cost_section",
    "cost_chart",
    "cost_section",
    "cost_tally",
    "run_costs",
    "run_prices",
    "sidecar_costs",
    "tally_figures",
]

#: The record columns the cost section reads (tags come with every frame).
COST_REPORT_COLUMNS = frozenset(c for c in COST_COLUMNS if not c.startswith("tags."))


def run_prices(manifest: Mapping[str, Any]) -> PriceTable:
    """The price table the run's config gave (empty where none, or unreadable)."""
    config = manifest.get("config")
    raw = config.get("prices") if isinstance(config, Mapping) else None
    if not isinstance(raw, list) or not raw:
        return PriceTable()
    try:
        return price_table(raw)
    except ValueError:  # a manifest edited by hand: no prices rather than a wrong cost
        return PriceTable()


def run_costs(run: RunData) -> list[CostFigures]:
    """The run's cost figures under its own price table (none without one)."""
    table = run_prices(run.manifest)
    if not table:
        return []
    figures = cost_figures(run.records, table)
    _give_back()  # the figures' copies of a large run's columns, before the next run's
    return figures


def sidecar_costs(run: RunData, side: Sidecar) -> list[CostFigures]:
    """The run's cost figures (none without prices) from its columnar sidecar, a Parquet
    row group of the cost columns at a time (`CostTally`): the figures `run_costs` states
    over the run read whole, without its rows or their cost columns ever held at once."""
    table = run_prices(run.manifest)
    if not table:
        return []
    tally = CostTally(table)
    # tags typed as the whole run types them (a session's tags read alike in every batch)
    for frame in side.chunks(side.text_tags(), COST_COLUMNS):
        tally.add(frame, frame["file_offset"].to_numpy())
        del frame
    figures = tally.figures()
    del tally
    _give_back()
    return figures


def cost_tally(run: RunData) -> CostTally | None:
    """A `CostTally` under the run's price table for its parts to be added to as they are
    read (None without prices)."""
    table = run_prices(run.manifest)
    return CostTally(table) if table else None


def tally_figures(tally: CostTally | None, run: RunData, side: Sidecar) -> list[CostFigures]:
    """The figures of a tally the run's sidecar parts were added to (`cost_tally`). Where
    the run has agent sessions, their turns are read again by `sidecar_costs`: a part
    types a tag by its own rows, the whole run by all of them, and a session's figures
    read its tags as the whole run types them."""
    if tally is None:
        return []
    if tally.sessions:
        tally.close()
        return sidecar_costs(run, side)
    figures = tally.figures()
    del tally
    _give_back()
    return figures


def _give_back() -> None:
    """Hand freed memory back to the system (Arrow's pool, the C heap)."""
    import pyarrow as pa

    from labkit.report import load

    pa.default_memory_pool().release_unused()
    load._give_back()


_NOTE = (
    "Under the config's dated price table (per 1M tokens; labkit ships no prices): each "
    "request's uncached prompt at the input price, cached reads and cache writes at theirs, "
    "output (reasoning included) at the output price, by the entry in force when it was "
    "sent. Per request and per session: the mean, with its 95% t-interval; per successful "
    "answer: all the cost over the requests (or sessions) that ended with an answer, with a "
    "95% bootstrap interval; answers per unit of money is its reciprocal. Warm-ups are left "
    "out; failed requests whose tokens the provider counted are in (they are billed). "
    "docs/pricing.md says how each figure is computed."
)


def _rows(figures: Sequence[CostFigures], label: str | None = None) -> list[list[str]]:
    return [
        ([label] if label is not None else [])
        + [
            f.provider,
            f.model,
            str(f.requests),
            money(f.per_request, f.currency),
            money(f.per_session, f.currency),
            money(f.per_successful_answer, f.currency),
            per_money(f.goodput_per_dollar, f.currency),
            f"{f.total:.4g} {f.currency}",
            f.price_date,
        ]
        for f in figures
    ]


_COLUMNS = [
    "provider",
    "model",
    "priced requests",
    "per request",
    "per session",
    "per successful answer",
    "answers per unit",
    "total",
    "prices of",
]


def cost_chart(figures: Sequence[tuple[str, CostFigures]], name: str = "cost") -> Chart | None:
    """Cost per request (dot) with its 95% interval (line), one row per provider · model
    (and run, in a comparison)."""
    values = [
        {
            "row": f"{label + ' · ' if label else ''}{f.provider} · {f.model}",
            "provider": f.provider,
            "cost": f.per_request.value,
            "lo": f.per_request.lo if f.per_request.lo is not None else f.per_request.value,
            "hi": f.per_request.hi if f.per_request.hi is not None else f.per_request.value,
            "currency": f.currency,
            "answer": f.per_successful_answer.value if f.per_successful_answer else None,
            "requests": f.requests,
        }
        for label, f in figures
    ]
    if not values:
        return None
    currency = figures[0][1].currency
    y = {"field": "row", "type": "nominal", "title": None}
    color = {"field": "provider", "type": "nominal"}
    opacity = {"condition": {"param": "pick", "value": 1}, "value": 0.15}
    tip = [
        {"field": "row", "title": "provider · model"},
        {"field": "cost", "format": ".3~g", "title": f"per request ({currency})"},
        {"field": "lo", "format": ".3~g", "title": "95% CI low"},
        {"field": "hi", "format": ".3~g", "title": "95% CI high"},
        {"field": "answer", "format": ".3~g", "title": "per successful answer"},
        {"field": "requests", "title": "priced requests"},
    ]
    x = {"type": "quantitative", "scale": {"zero": True}}
    spec = {
        **_base("Cost per request under the config's price table", values),
        "layer": [
            {
                "mark": {"type": "rule", "strokeWidth": 2},
                "encoding": {
                    "y": y,
                    "x": {**x, "field": "lo", "title": f"{currency} per request (95% CI)"},
                    "x2": {"field": "hi"},
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
                    "x": {**x, "field": "cost"},
                    "color": color,
                    "opacity": opacity,
                    "tooltip": tip,
                },
            },
        ],
    }
    return Chart(
        name,
        "Cost per request",
        spec,
        "Dot: the mean cost of a priced request; line: its 95% interval. The price table is "
        "the run's own (its config's prices).",
    )


def cost_section(run: RunData, figures: Sequence[CostFigures] | None = None) -> list[Block]:
    """The report's cost section: nothing where the run's config gave no prices.

    `figures`: already computed (a large run's, from its columnar sidecar); else from
    `run.records`.
    """
    table = run_prices(run.manifest)
    if not table:
        return []
    if figures is None:
        figures = cost_figures(run.records, table)
    blocks: list[Block] = [Heading("Cost"), Para(_NOTE, "note")]
    if not figures:
        blocks.append(
            Para(
                "The price table prices none of this run's requests (no entry for their "
                "provider and model in force when they were sent, or no token counts).",
                "warn",
            )
        )
        return blocks
    blocks.append(Table(_COLUMNS, _rows(figures), set(range(2, 8))))
    chart = cost_chart([("", f) for f in figures])
    blocks += [ChartBlock(chart)] if chart else []
    return blocks


def comparison_cost_section(
    runs: Sequence[RunData],
    labels: Sequence[str],
    costs: Sequence[Sequence[CostFigures] | None] | None = None,
) -> list[Block]:
    """The comparison's cost table: each run under its own price table; nothing where no
    run has one. `costs`: each run's figures where already computed (a large run's, priced
    as its sidecar was read), None for a run whose figures come from its frame."""
    known = list(costs) if costs is not None else [None] * len(runs)
    per_run = [
        (label, f)
        for label, run, figures in zip(labels, runs, known, strict=True)
        for f in (run_costs(run) if figures is None else figures)
    ]
    if not per_run:
        return []
    rows = [row for label, f in per_run for row in _rows([f], label)]
    blocks: list[Block] = [
        Heading("Cost", 2),
        Para(_NOTE + " Each run is priced by its own config's table.", "note"),
        Table(["run", *_COLUMNS], rows, set(range(3, 9))),
    ]
    chart = cost_chart(per_run, "compare_cost")
    blocks += [ChartBlock(chart)] if chart else []
    return blocks
