"""The report's part for workloads: conversations (TTFT and cache reuse per turn) and the
cache hits of shared-prefix and trace levels beside the TTFT they bought.

Drawn from the typed figures in `lab.json` only; a run without such answers adds nothing.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure

from labkit.figures import ConversationFigures, LoadFigures, LoadLevel, TraceFigures
from labkit.records import LabResults
from labkit.report.plots import Plot
from labkit.report.render import Block, Heading, Para, Table, fmt_num

__all__ = ["cache_hits_plot", "conversation_plot", "conversation_section", "workload_plots"]

_MAX_SERIES = 8
_DPI = 96


def _fig(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _conversations(lab: LabResults | None) -> list[tuple[str, str, ConversationFigures]]:
    return [
        (a.provider, a.experiment, a.figures)
        for a in (lab.answers if lab is not None else [])
        if isinstance(a.figures, ConversationFigures) and a.figures.turns
    ]


def _cached_levels(lab: LabResults | None) -> list[tuple[str, str, LoadLevel]]:
    """(provider, experiment, level) of every load level and trace replay with cache counts."""
    found: list[tuple[str, str, LoadLevel]] = []
    for a in lab.answers if lab is not None else []:
        if isinstance(a.figures, LoadFigures):
            rows = a.figures.levels
        elif isinstance(a.figures, TraceFigures):
            rows = [a.figures.replay]
        else:
            continue
        found += [
            (a.provider, a.experiment, row)
            for row in rows
            if row.cache is not None and row.cache.cached_share is not None and row.ok
        ]
    return found


def conversation_plot(lab: LabResults | None) -> Plot | None:
    """TTFT per turn (left) and prompt vs cached tokens per turn (right), per provider and
    cache variant."""
    found = _conversations(lab)
    if not found:
        return None
    fig = _fig(width=10.0, height=3.8)
    ax_ttft, ax_tokens = fig.subplots(1, 2)
    several = len(found) > 1
    for provider, experiment, figures in found[:_MAX_SERIES]:
        for cache in ("on", "off"):
            rows = [t for t in figures.turns if t.cache == cache and t.ok]
            if not rows:
                continue
            name = f"{provider} · {experiment} · " if several else ""
            x = [t.turn + 1 for t in rows]
            style = "-" if cache == "on" else "--"
            line = ax_ttft.plot(
                x,
                [t.ttft_ms_p50 or np.nan for t in rows],
                style,
                marker="o",
                label=f"{name}cache {cache}",
            )[0]
            ax_tokens.plot(
                x,
                [t.input_tokens_p50 or np.nan for t in rows],
                style,
                color=line.get_color(),
                label=f"{name}cache {cache}: prompt",
            )
            ax_tokens.plot(
                x,
                [t.cached_tokens_p50 if t.cached_tokens_p50 is not None else np.nan for t in rows],
                style,
                marker="s",
                color=line.get_color(),
                alpha=0.6,
                label=f"{name}cache {cache}: cached",
            )
    for ax in (ax_ttft, ax_tokens):
        ax.set_xlabel("turn")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    ax_ttft.set_ylabel("TTFT p50 (ms)")
    ax_tokens.set_ylabel("tokens (p50)")
    return Plot(
        "conversation_turns",
        "TTFT per conversation turn",
        _png(fig),
        "Left: client TTFT per turn with the provider's prompt cache on (solid) and off "
        "(dashed). Right: the prompt each turn sent (the whole history) and the part the "
        "provider said it served from its cache.",
    )


def cache_hits_plot(lab: LabResults | None) -> Plot | None:
    """Per load level with cache counts: the cached share of prompt tokens against TTFT,
    with the TTFT of hits and misses."""
    found = _cached_levels(lab)
    if not found:
        return None
    fig = _fig(width=7.0, height=3.8)
    ax = fig.subplots()
    for provider, experiment, row in found[: _MAX_SERIES * 4]:
        share = 100 * (row.cache.cached_share if row.cache and row.cache.cached_share else 0.0)
        label = f"{provider} · {experiment} · {row.display_title}"
        dot = ax.scatter([share], [row.ttft_ms_p50 or np.nan], s=60, label=label)
        cache = row.cache
        if cache is not None:
            for value, marker in ((cache.ttft_ms_p50_hit, "v"), (cache.ttft_ms_p50_miss, "^")):
                if value is not None:
                    ax.scatter([share], [value], marker=marker, color=dot.get_facecolor(), s=30)
    ax.set_xlabel("prompt tokens served from the provider's cache (%)")
    ax.set_ylabel("TTFT p50 (ms)")
    ax.set_xlim(-5, 105)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return Plot(
        "cache_hits",
        "Cache hits vs TTFT per level",
        _png(fig),
        "Each load or trace level whose provider counted cached prompt tokens: the share it "
        "served from its cache against the level's TTFT p50 (dot); ▼ the TTFT p50 of its "
        "hits (at least half the prompt cached), ▲ of the rest.",
    )


def workload_plots(lab: LabResults | None) -> list[Plot]:
    """The workload figures this run's answers allow (none: an empty list)."""
    return [p for p in (conversation_plot(lab), cache_hits_plot(lab)) if p is not None]


def conversation_section(lab: LabResults | None) -> list[Block]:
    """A table per provider × conversation experiment: a row per cache variant and turn."""
    found = _conversations(lab)
    if not found:
        return []
    blocks: list[Block] = [
        Heading("Conversation turns"),
        Para(
            "Per cache variant and turn: sessions ok, the prompt (the whole history) and the "
            "tokens the provider served from its cache, the reuse that implies (cached / "
            "prompt) beside what a perfect prefix cache could reuse (the previous turn's "
            "prompt and answer), client TTFT and the provider's own prefill time (ms).",
            "note",
        ),
    ]
    labels = ["cache", "turn", "ok", "prompt", "cached", "reuse %", "reusable %"]
    labels += ["TTFT p50", "TTFT p90", "server prefill"]
    for provider, experiment, figures in found:
        blocks.append(Heading(f"{provider} · {experiment}", 3))
        cells = [
            [
                t.cache,
                str(t.turn + 1),
                fmt_num(t.ok, 0),
                fmt_num(t.input_tokens_p50, 0),
                fmt_num(t.cached_tokens_p50, 0),
                fmt_num(None if t.reuse_p50 is None else 100 * t.reuse_p50, 0),
                fmt_num(None if t.reusable_p50 is None else 100 * t.reusable_p50, 0),
                fmt_num(t.ttft_ms_p50),
                fmt_num(t.ttft_ms_p90),
                fmt_num(t.prefill_ms_p50),
            ]
            for t in figures.turns
        ]
        blocks.append(Table(labels, cells, set(range(1, len(labels)))))
    return blocks
