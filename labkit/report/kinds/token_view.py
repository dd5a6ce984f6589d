"""One token, everything at once: each reply's tokens on one time axis, and the table.

The picture (from `token_view` answers' `TokenViewFigures`): per provider and send, a row of
the client's arrivals, each token a dot shaded by its probability (grey where the API
reports none) with its text above, and beside it a row of the server's own times at the
same tokens (llama.cpp `timings_per_token`), where the API reports them; hover for the
candidates. The section is the table: per token its text, probability, candidates,
arrival, server time, and the prompt's cache, every column the API does not give marked
"not reported by this API".
"""

from __future__ import annotations

from typing import Any

from labkit.figures.token_view import NOT_REPORTED, TokenRow, TokenViewFigures, TokenViewReply
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, _WIDTH, Chart
from labkit.report.kinds import KindReport, Picture, register_report
from labkit.report.load import RunData
from labkit.report.render import Block, Heading, Para, Table

__all__ = ["token_table", "token_timeline_chart"]

_MAX_ROWS_SHOWN = 64


def _views(lab: LabResults | None) -> list[tuple[str, TokenViewFigures]]:
    out: list[tuple[str, TokenViewFigures]] = []
    for ans in lab.answers if lab is not None else []:
        if isinstance(ans.figures, TokenViewFigures) and ans.figures.replies:
            out.append((ans.provider, ans.figures))
    return out


def _candidates(row: TokenRow) -> str:
    return " · ".join(f"{c.token!r} {c.p:.2f}" for c in row.candidates)


def token_timeline_chart(lab: LabResults | None) -> Chart | None:
    """Each send's tokens on one time axis: arrivals on the client, the server's times."""
    values: list[dict[str, Any]] = []
    for provider, f in _views(lab):
        for reply in f.replies:
            where = f"{provider} · send {reply.send}"
            for row in reply.rows[:_MAX_ROWS_SHOWN]:
                common = {
                    "token": row.text,
                    "label": row.text.strip()[:8] or "·",
                    "i": row.i,
                    "p": row.p,
                    "p_text": NOT_REPORTED if row.p is None else f"{row.p:.3f}",
                    "candidates": _candidates(row) or NOT_REPORTED,
                    "server": NOT_REPORTED if row.server_ms is None else f"{row.server_ms:.2f} ms",
                    "arrival": "n/a" if row.arrival_ms is None else f"{row.arrival_ms:.2f} ms",
                    "note": False,
                }
                if row.arrival_ms is not None:
                    values.append(
                        {**common, "row": f"{where} · client arrival", "ms": row.arrival_ms}
                    )
                if row.server_ms is not None:
                    values.append(
                        {**common, "row": f"{where} · server's own time", "ms": row.server_ms}
                    )
            if reply.rows and all(row.server_ms is None for row in reply.rows):
                values.append(
                    {
                        "row": f"{where} · server's own time",
                        "ms": 0.0,
                        "label": f"server's own time: {NOT_REPORTED}",
                        "note": True,
                    }
                )
    if not values:
        return None
    x = {"field": "ms", "type": "quantitative", "title": "ms (client: from the request's start; "
         "server: from the start of its prompt processing)"}  # fmt: skip
    order = list(dict.fromkeys(v["row"] for v in values))  # each row as it first came
    y = {
        "field": "row",
        "type": "nominal",
        "title": None,
        "sort": order,
        "axis": {"labelLimit": 320},
    }
    tooltip = [
        {"field": "row", "title": "where"},
        {"field": "i", "title": "token #"},
        {"field": "token"},
        {"field": "p_text", "title": "p"},
        {"field": "candidates"},
        {"field": "arrival", "title": "client arrival"},
        {"field": "server", "title": "server time"},
    ]
    spec: dict[str, Any] = {
        "$schema": _SCHEMA,
        "title": {
            "text": "One token, everything at once",
            "subtitle": "each token where it arrived and where the server's clock put it, "
            "shaded by its probability (grey: not reported by this API)",
        },
        "data": {"values": values},
        "width": _WIDTH,
        "height": {"step": 44},
        "layer": [
            {  # tokens with a probability: shaded by it
                "transform": [{"filter": "!datum.note && isValid(datum.p)"}],
                "mark": {"type": "circle", "size": 120, "stroke": "#57606a", "strokeWidth": 0.5},
                "encoding": {
                    "x": x,
                    "y": y,
                    "color": {
                        "field": "p",
                        "type": "quantitative",
                        "title": "p",
                        "scale": {"domain": [0, 1], "scheme": "blues"},
                    },
                    "tooltip": tooltip,
                },
            },
            {  # tokens the API gives no probability for: grey
                "transform": [{"filter": "!datum.note && !isValid(datum.p)"}],
                "mark": {
                    "type": "circle",
                    "size": 120,
                    "color": "#d0d7de",
                    "opacity": 1,
                    "stroke": "#57606a",
                    "strokeWidth": 0.5,
                },
                "encoding": {"x": x, "y": y, "tooltip": tooltip},
            },
            {
                "transform": [{"filter": "!datum.note"}],
                "mark": {"type": "text", "fontSize": 8, "dy": -12, "limit": 40},
                "encoding": {"x": x, "y": y, "text": {"field": "label"}, "tooltip": tooltip},
            },
            {  # a row the API gives nothing for, said so
                "transform": [{"filter": "datum.note"}],
                "mark": {"type": "text", "fontSize": 10, "align": "left", "color": "#57606a"},
                "encoding": {"x": x, "y": y, "text": {"field": "label"}},
            },
        ],
    }
    return Chart(
        "token_view",
        "One token, everything at once: each token's arrival and the server's own time",
        spec,
        "One row per send of each provider: a dot per token where it reached the client, and, "
        "where the server reports it, a row of the same tokens at its own time; darker where "
        "the model was surer, grey where the API reports no probability. The gap between the "
        "two rows is the network, the front end and labkit. Hover a dot for its candidates.",
    )


def _ms(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:.2f}"


def _cache(reply: TokenViewReply) -> str:
    if reply.from_cache is None:
        return NOT_REPORTED
    said = f"{reply.cached_tokens} of {reply.input_tokens} prompt tokens cached"
    return said + (": from cache" if reply.from_cache else "")


def token_table(lab: LabResults | None) -> list[Block]:
    """Per provider and send, the table of its tokens (the first 64)."""
    blocks: list[Block] = []
    for provider, f in _views(lab):
        if not blocks:
            blocks.append(Heading("One token, everything at once", 3))
        for reply in f.replies:
            rows = [
                [
                    str(row.i),
                    repr(row.text),
                    NOT_REPORTED if row.p is None else f"{row.p:.3f}",
                    _candidates(row) or NOT_REPORTED,
                    "n/a" if row.arrival_ms is None else f"{row.arrival_ms:.2f}",
                    _ms(row.server_ms),
                ]
                for row in reply.rows[:_MAX_ROWS_SHOWN]
            ]
            unit = "token" if reply.rows_are == "tokens" else "streamed event (no token marks)"
            blocks += [
                Para(
                    f"{provider} · send {reply.send}: a row per {unit}; prompt cache: "
                    f"{_cache(reply)}. Times in ms: arrival from the request's start, server "
                    "from the start of its prompt processing.",
                    "note",
                ),
                Table(
                    ["#", "text", "p", "candidates", "arrival ms", "server ms"], rows, {0, 2, 4, 5}
                ),
            ]
    return blocks


def _pictures(lab: LabResults | None) -> list[Picture]:
    chart = token_timeline_chart(lab)
    return [chart] if chart is not None else ["token view: no reply streamed a token."]


register_report(KindReport("token_view", pictures=_pictures, section=lambda run: _section(run)))


def _section(run: RunData) -> list[Block]:
    return token_table(run.lab)
