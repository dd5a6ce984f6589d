"""The report's SLO parts: goodput against load (the sweep's knee marked) and the sweep table.

Read from `lab.json` only (`SweepFigures`, and `LoadFigures` levels judged against SLOs).
"""

from __future__ import annotations

from labkit.figures import LoadFigures, LoadLevel, SweepFigures
from labkit.records import LabResults
from labkit.report.load import RunData
from labkit.report.plots import Plot, _fig, _png
from labkit.report.render import Block, Heading, Para, Table, fmt_num

__all__ = ["goodput_curves", "sweep_section"]

_MAX_SERIES = 8


def _axis_value(mode: str, row: LoadLevel) -> float:
    """Where a level sits on its experiment's axis: a rate sweep's closed-loop probes sit at
    the rate they completed."""
    if mode == "rate" and row.mode == "concurrency":
        return row.completed_rps or 0.0
    return row.target


def _series(lab: LabResults | None) -> list[tuple[str, str, list[LoadLevel], SweepFigures | None]]:
    """(label, mode, judged levels, sweep figures) of every answer with goodput."""
    out: list[tuple[str, str, list[LoadLevel], SweepFigures | None]] = []
    mode: str
    for ans in lab.answers if lab is not None else []:
        f = ans.figures
        if isinstance(f, SweepFigures):
            # A rate sweep's throughput probe is a closed loop: drawn as a line, not a point.
            probes = [p for p in f.probes if f.mode == "concurrency" or p.role != "throughput"]
            rows, mode, sweep = [p.level for p in probes], f.mode, f
        elif isinstance(f, LoadFigures):
            rows, mode, sweep = f.levels, f.mode, None
        else:
            continue
        rows = [r for r in rows if r.slo is not None and r.ok]
        if rows:
            out.append((f"{ans.provider} · {ans.experiment}", mode, rows, sweep))
    return out[:_MAX_SERIES]


def goodput_curves(lab: LabResults | None) -> Plot | None:
    """Goodput beside completed throughput against load, the sweeps' knees marked."""
    series = _series(lab)
    if not series:
        return None
    fig = _fig(width=8.0, height=4.0)
    ax = fig.subplots()
    modes = set()
    for label, mode, rows, sweep in series:
        modes.add(mode)
        rows = sorted(rows, key=lambda r: _axis_value(mode, r))
        x = [_axis_value(mode, r) for r in rows]
        good = [r.slo.goodput_rps if r.slo and r.slo.goodput_rps is not None else 0.0 for r in rows]
        done = [r.completed_rps or 0.0 for r in rows]
        line = ax.plot(x, good, marker="o", label=f"{label} goodput")[0]
        color = line.get_color()
        ax.plot(x, done, marker="o", ls=":", mfc="none", color=color, label=f"{label} completed")
        missed = [
            (xi, g) for xi, g, r in zip(x, good, rows, strict=True) if r.slo and not r.slo.passed
        ]
        if missed:
            mx, my = zip(*missed, strict=True)
            ax.scatter(mx, my, marker="x", s=60, color="red", zorder=3)
        if sweep is not None and sweep.mode == "rate" and sweep.throughput_rps is not None:
            ax.axhline(sweep.throughput_rps, color=color, ls="-.", lw=0.8, alpha=0.6)
        if sweep is not None and sweep.knee is not None:
            ax.axvline(sweep.knee, color=color, ls="--", lw=1)
            if sweep.knee_low is not None and sweep.knee_high is not None:
                ax.axvspan(sweep.knee_low, sweep.knee_high, color=color, alpha=0.12)
            ax.annotate(
                f"knee {sweep.knee:.3g}",
                (sweep.knee, ax.get_ylim()[1]),
                xytext=(4, -12),
                textcoords="offset points",
                fontsize=8,
                color=color,
            )
    ax.set_xlabel(
        "concurrency (streams in flight)"
        if modes == {"concurrency"}
        else "offered rate (requests/s)"
        if modes == {"rate"}
        else "level (concurrency or requests/s)"
    )
    ax.set_ylabel("requests/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return Plot(
        "goodput",
        "Goodput against load",
        _png(fig),
        "Goodput (solid: requests/s that met every SLO) beside all completed requests/s "
        "(dotted), per level; a red cross marks a level that missed an SLO. A sweep's knee "
        "(dashed line) is the largest load that met; the shaded band is the interval the "
        "true knee lies in; a rate sweep's throughput probe (closed loop) is the dash-dot "
        "line.",
    )


def sweep_section(run: RunData) -> list[Block]:
    """One table per sweep answer: its probes in order, and the knee in words."""
    sweeps = [
        (a, a.figures)
        for a in (run.lab.answers if run.lab is not None else [])
        if isinstance(a.figures, SweepFigures)
    ]
    if not sweeps:
        return []
    blocks: list[Block] = [
        Heading("Sweeps"),
        Para(
            "Each sweep's levels in the order they ran: the synchronous baseline, the "
            "throughput probe, then the bisection. A level passes when its requests show, at "
            "95%, that every SLO holds for its percentile of requests (a failed request "
            "misses them all) and it did not saturate; fails when they show an SLO does not "
            "hold, or it saturated; is undecided otherwise, after running again twice as long "
            "up to the sweep's bound. Goodput counts the requests that met every SLO, per "
            "second.",
            "note",
        ),
    ]
    for ans, f in sweeps:
        assert isinstance(f, SweepFigures)
        blocks.append(Heading(f"{ans.provider} · {ans.experiment}", 3))
        knee = (
            "no level met the SLOs"
            if f.knee is None
            else f"knee {fmt_num(f.knee, 2)} in [{fmt_num(f.knee_low, 2)}, "
            f"{fmt_num(f.knee_high, 2)}), goodput there {fmt_num(f.knee_goodput_rps, 2)} req/s"
        )
        blocks.append(Para(f"{knee}; stopped: {f.stopped}."))
        cells = [
            [
                str(p.step),
                p.role,
                p.level.display_title,
                fmt_num(p.level.completed_rps, 2),
                fmt_num(p.level.slo.goodput_rps if p.level.slo else None, 2),
                fmt_num(p.level.ttft_ms_p90),
                fmt_num(p.level.decode_ms_per_token_p50),
                p.verdict,
                f"{p.level.requests} ({p.requests_sent} sent)",
                p.why or "—",
            ]
            for p in f.probes
        ]
        labels = ["step", "role", "level", "completed req/s", "goodput req/s"]
        labels += ["TTFT p90", "decode ms/tok p50", "verdict", "requests", "why not"]
        blocks.append(Table(labels, cells, {0, 3, 4, 5, 6}))
    return blocks
