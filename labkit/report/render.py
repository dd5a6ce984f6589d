"""A tiny document model (headings, paragraphs, lists, tables, images) and its two renderers.

Markdown is written for a terminal and a code host: tables are padded so their columns line
up in plain text, images are PNG files in ``report_files/`` linked relatively. HTML is one
self-contained file: inline CSS, images as ``data:`` URIs, no script, nothing fetched at
view time.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.report.plots import Plot

__all__ = [
    "Block",
    "Bullets",
    "Heading",
    "Image",
    "Para",
    "Table",
    "fmt_num",
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
class Image:
    """A figure."""

    plot: Plot


Block = Heading | Para | Bullets | Table | Image


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
    return f"{v:,.{digits}f}"


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


def render_markdown(blocks: list[Block], run_dir: Path, files_dir: str = "report_files") -> str:
    """Render to Markdown; figures are written as PNG files under ``run_dir/files_dir``."""
    out: list[str] = []
    images = [b for b in blocks if isinstance(b, Image)]
    folder = run_dir / files_dir
    if folder.is_dir():
        for old in folder.glob("*.png"):
            old.unlink()
    if images:
        folder.mkdir(parents=True, exist_ok=True)
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Para):
            out.append(f"> {block.text}" if block.style == "warn" else block.text)
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            out.append(_md_table(block))
        else:
            path = folder / f"{block.plot.name}.png"
            path.write_bytes(block.plot.png)
            out.append(
                f"![{block.plot.title}]({files_dir}/{block.plot.name}.png)\n\n"
                f"*{block.plot.caption}*"
            )
    return "\n\n".join(out) + "\n"


# --- HTML --------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
margin:2rem auto;max-width:1200px;padding:0 1rem;color:#1f2328;background:#fff;line-height:1.5}
h1{border-bottom:2px solid #d0d7de;padding-bottom:.3rem}
h2{border-bottom:1px solid #d0d7de;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:.85rem;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.25rem .5rem;vertical-align:top}
th{background:#f6f8fa;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fbfcfd}
p.note{color:#59636e;font-size:.9rem}
p.warn,ul.warn{background:#fff8c5;border-left:4px solid #d4a72c;padding:.4rem .8rem}
ul.warn{padding-left:2rem}
figure{margin:1rem 0}
figure img{max-width:100%;height:auto;border:1px solid #d0d7de}
figcaption{color:#59636e;font-size:.85rem}
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
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(blocks: list[Block], title: str) -> str:
    """Render to one self-contained HTML page (inline CSS, images as data: URIs, no JS)."""
    parts: list[str] = []
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
        else:
            data = base64.b64encode(block.plot.png).decode("ascii")
            parts.append(
                f'<figure><img alt="{html.escape(block.plot.title)}" '
                f'src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(block.plot.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # An empty icon: the browser has nothing to fetch for the tab icon.
        '<link rel="icon" href="data:,">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
