"""A tiny document model (headings, paragraphs, lists, tables, charts) and its two renderers.

Markdown is written for a terminal and a code host: tables are padded so their columns line
up in plain text, charts are PNG files (vl-convert) in ``report_files/`` linked relatively.
HTML is one self-contained file: inline CSS, the charts' Vega-Lite specs drawn by Vega
inlined once (`html_page`), nothing fetched at view time.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.report.charts import Chart, TokenSpans, javascript_bundle
from labkit.safefiles import report_subfolder, write_new_file
from labkit.scrub import for_people

__all__ = [
    "VEGA_BUNDLE_MARK",
    "Block",
    "Bullets",
    "ChartBlock",
    "Heading",
    "Para",
    "Table",
    "TokenSpansBlock",
    "fmt_num",
    "html_page",
    "markdown_text",
    "render_html",
    "render_markdown",
]


@dataclass(frozen=True)
class Heading:
    """A section heading (level 1–3)."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    """A paragraph. `style` is ``""``, ``"note"`` (muted) or ``"warn"`` (highlighted)."""

    text: str
    style: str = ""


@dataclass(frozen=True)
class Bullets:
    """A bulleted list of plain-text items."""

    items: list[str]
    style: str = ""


@dataclass(frozen=True)
class Table:
    """A table of already-formatted cells; `numeric` names the right-aligned columns."""

    columns: list[str]
    rows: list[list[str]]
    numeric: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class ChartBlock:
    """An interactive chart (a PNG in Markdown)."""

    chart: Chart


@dataclass(frozen=True)
class TokenSpansBlock:
    """Texts as coloured token spans."""

    spans: TokenSpans


Block = Heading | Para | Bullets | Table | ChartBlock | TokenSpansBlock

#: Where the page's one inlined copy of Vega goes (`html_page` puts it there, after
#: scrubbing the page, so the library itself is never rewritten).
VEGA_BUNDLE_MARK = "<!--labkit:vega-bundle-->"


def fmt_num(value: Any, digits: int | None = None) -> str:
    """Format a number for a table: `—` for missing, strings as they are."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "—"
    if digits is None:
        a = abs(v)
        digits = 0 if a >= 1000 else 1 if a >= 10 else 2
    text = f"{v:,.{digits}f}"
    # A value that rounds to zero has no sign: "-0.00" beside a sentence saying 1 ms misleads.
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


# --- Markdown ----------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    header = [_md_cell(c) for c in table.columns]
    rows = [[_md_cell(c) for c in row] for row in table.rows]
    widths = [max(3, len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [
            c.rjust(w) if i in table.numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = [("-" * (w - 1) + ":") if i in table.numeric else "-" * w for i, w in enumerate(widths)]
    return "\n".join([line(header), "| " + " | ".join(rule) + " |", *(line(r) for r in rows)])


def markdown_text(block: Block) -> str | None:
    """A text block (heading, paragraph, bullets, table) as Markdown; None for a figure."""
    if isinstance(block, Heading):
        return "#" * block.level + " " + block.text
    if isinstance(block, Para):
        return f"> {block.text}" if block.style == "warn" else block.text
    if isinstance(block, Bullets):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Table):
        return _md_table(block)
    return None


def render_markdown(blocks: list[Block], run_dir: Path, files_dir: str = "report_files") -> str:
    """Render to Markdown; figures are written as PNG files under ``run_dir/files_dir``."""
    out: list[str] = []
    images = [b for b in blocks if isinstance(b, ChartBlock)]
    folder = report_subfolder(run_dir / files_dir)
    if folder.is_dir():
        for old in folder.glob("*.png"):
            old.unlink()  # a link among them is removed itself, never what it points to
    if images:
        folder.mkdir(parents=True, exist_ok=True)
    for block in blocks:
        text = markdown_text(block)
        if text is not None:
            out.append(text)
        elif isinstance(block, ChartBlock):
            chart = block.chart
            write_new_file(folder / f"{chart.name}.png", chart.png)
            out.append(f"![{chart.title}]({files_dir}/{chart.name}.png)\n\n*{chart.caption}*")
        elif isinstance(block, TokenSpansBlock):
            out.append(
                f"*{block.spans.title}* (tokens separated by ·)\n\n"
                + "\n".join(
                    f"- {tokenizer} · {text_id} ({sum(counts)} tokens): "
                    f"`{'·'.join(pieces)}`".replace("|", "\\|")
                    for tokenizer, text_id, pieces, counts in block.spans.rows
                )
            )
    return "\n\n".join(out) + "\n"


# --- HTML --------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif,
"Noto Sans CJK JP","Noto Color Emoji","Apple Color Emoji","Segoe UI Emoji";
margin:2rem auto;max-width:1200px;padding:0 1rem;color:#1f2328;background:#fff;line-height:1.5}
h1{border-bottom:2px solid #d0d7de;padding-bottom:.3rem}
h2{border-bottom:1px solid #d0d7de;padding-bottom:.2rem;margin-top:2rem}
.tablebox{max-width:100%;overflow-x:auto;margin:.8rem 0}
table{border-collapse:collapse;font-size:.8rem}
th,td{border:1px solid #d0d7de;padding:.2rem .4rem;vertical-align:top;overflow-wrap:break-word}
th{background:#f6f8fa;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fbfcfd}
p.note{color:#59636e;font-size:.9rem}
p.warn,ul.warn{background:#fff8c5;border-left:4px solid #d4a72c;padding:.4rem .8rem}
ul.warn{padding-left:2rem}
figure{margin:1rem 0}
figcaption{color:#59636e;font-size:.85rem}
.chart{max-width:100%;overflow-x:auto}
.spans{font-family:ui-monospace,"DejaVu Sans Mono",monospace,"Noto Sans Mono CJK JP",
"Noto Color Emoji","Apple Color Emoji","Segoe UI Emoji";font-size:.8rem;margin:.3rem 0;
max-width:100%;overflow-wrap:anywhere}
.spans .who{color:#59636e;display:block}
.spans span.t{padding:0 1px;border-radius:2px;white-space:pre-wrap}
.t0{background:#ddf4ff}.t1{background:#fff1c2}.t2{background:#dafbe1}.t3{background:#ffe2e0}
.t4{background:#eddeff}
.spans span.multi{outline:1px dashed #cf222e}
.vega-bind{font-size:.8rem}
"""


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.rows:
        cells = "".join(
            f'<td class="num">{html.escape(c)}</td>'
            if i in table.numeric
            else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="tablebox"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _html_chart(chart: Chart, index: int) -> str:
    spec = json.dumps(chart.spec, ensure_ascii=False).replace("</", "<\\/")
    return (
        f'<figure><div class="chart" id="chart{index}" data-chart="{html.escape(chart.name)}">'
        f"</div><figcaption>{html.escape(chart.caption)}</figcaption></figure>"
        f'<script type="application/json" id="chart{index}-spec">{spec}</script>'
    )


def _html_spans(spans: TokenSpans) -> str:
    parts = [f"<p><strong>{html.escape(spans.title)}</strong></p>"]
    for tokenizer, text_id, pieces, counts in spans.rows:
        cells = []
        for i, (piece, n) in enumerate(zip(pieces, counts, strict=True)):
            many = " multi" if n > 1 else ""
            what = f"{n} tokens for this character" if n > 1 else "1 token"
            cells.append(
                f'<span class="t t{i % 5}{many}" title="{what}">{html.escape(piece)}</span>'
            )
        parts.append(
            f'<div class="spans"><span class="who">{html.escape(tokenizer)} · '
            f"{html.escape(text_id)} ({sum(counts)} tokens)</span>{''.join(cells)}</div>"
        )
    return "".join(parts)


_DRAW_CHARTS = """
<script>
for (const el of document.querySelectorAll('div.chart')) {
  const spec = JSON.parse(document.getElementById(el.id + '-spec').textContent);
  vegaEmbed(el, spec, {actions: false, renderer: 'svg'}).catch(err => {
    el.textContent = 'chart failed: ' + err; console.error(err);
  });
}
</script>
"""


def render_html(blocks: list[Block], title: str) -> str:
    """Render to one self-contained HTML page (inline CSS, charts drawn by the Vega bundle
    that `html_page` puts at `VEGA_BUNDLE_MARK`)."""
    parts: list[str] = []
    charts = 0
    for block in blocks:
        if isinstance(block, Heading):
            level = min(max(block.level, 1), 6)
            parts.append(f"<h{level}>{html.escape(block.text)}</h{level}>")
        elif isinstance(block, Para):
            cls = f' class="{block.style}"' if block.style else ""
            parts.append(f"<p{cls}>{html.escape(block.text)}</p>")
        elif isinstance(block, Bullets):
            cls = f' class="{block.style}"' if block.style else ""
            items = "".join(f"<li>{html.escape(i)}</li>" for i in block.items)
            parts.append(f"<ul{cls}>{items}</ul>")
        elif isinstance(block, Table):
            parts.append(_html_table(block))
        elif isinstance(block, ChartBlock):
            parts.append(_html_chart(block.chart, charts))
            charts += 1
        else:
            parts.append(_html_spans(block.spans))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # An empty icon: the browser has nothing to fetch for the tab icon.
        '<link rel="icon" href="data:,">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + (f"\n{VEGA_BUNDLE_MARK}{_DRAW_CHARTS}" if charts else "")
        + "\n</body></html>\n"
    )


def html_page(blocks: list[Block], title: str) -> str:
    """The page people read: `render_html`, scrubbed (`labkit.scrub.for_people`), with the
    Vega bundle inlined where charts need it."""
    page = for_people(render_html(blocks, title))
    if VEGA_BUNDLE_MARK in page:
        page = page.replace(VEGA_BUNDLE_MARK, f"<script>{javascript_bundle()}</script>", 1)
    return page
