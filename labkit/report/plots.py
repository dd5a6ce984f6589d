"""The report's figures, drawn with matplotlib's Agg backend into PNG bytes.

Each function takes the records frame (and the lab answers where they hold the figures)
and returns a `Plot`, or ``None`` when the run has no data for it; the report then says
what is missing instead of drawing an empty chart. No pyplot state is used: every figure is
a standalone `matplotlib.figure.Figure`, so plotting is safe to call repeatedly.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from labkit.figures import (
    LinearFit,
    LoadFigures,
    LoadLevel,
    PrefillDecodeFigures,
    TokenRatioFigures,
)
from labkit.records import LabResults
from labkit.report.load import ensure_columns, load_event_offsets
from labkit.report.stats import included
from labkit.server_metrics import ServerMetricsSample

__all__ = [
    "Plot",
    "all_plots",
    "chars_per_token",
    "client_vs_server",
    "decode_per_provider",
    "fit_line",
    "load_curves",
    "load_rows",
    "prefill_points",
    "server_queue_timeline",
    "token_timeline",
    "ttft_distribution",
    "ttft_vs_prompt",
]

_DPI = 96
_MAX_PROVIDERS = 8
_MAX_TIMELINES = 6


@dataclass(frozen=True)
class Plot:
    """One figure: a file stem, a title, PNG bytes and a one-line caption."""

    name: str
    title: str
    png: bytes
    caption: str


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _fig(width: float = 7.0, height: float = 3.8) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig


def _ok(df: pd.DataFrame, col: str) -> pd.DataFrame:
    df = ensure_columns(df, [col])
    sub = df[included(df)]
    return sub[sub[col].notna()]


def _providers(sub: pd.DataFrame) -> list[str]:
    return [str(p) for p in sorted(sub["provider"].dropna().unique())][:_MAX_PROVIDERS]


def ttft_distribution(df: pd.DataFrame) -> Plot | None:
    """Empirical CDF of client TTFT, one line per provider."""
    sub = _ok(df, "client.ttft_ms")
    if sub.empty:
        return None
    fig = _fig()
    ax = fig.add_subplot()
    grid = np.linspace(0.0, 1.0, 401)
    for provider in _providers(sub):
        values = sub.loc[sub["provider"] == provider, "client.ttft_ms"].to_numpy(dtype=float)
        # Quantiles on a fixed grid: the same picture as the raw ECDF, at any sample size.
        xs = np.quantile(values, grid) if len(values) > len(grid) else np.sort(values)
        ys = grid if len(values) > len(grid) else np.arange(1, len(xs) + 1) / len(xs)
        ax.step(xs, ys, where="post", label=f"{provider} (n={len(values)})")
    ax.set_xlabel("client TTFT (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return Plot(
        "ttft_distribution",
        "TTFT distribution per provider",
        _png(fig),
        "Cumulative distribution of client-observed time to first token (successful, "
        "non-warm-up requests).",
    )


def _representatives(df: pd.DataFrame) -> pd.DataFrame:
    """Per provider, the successful request whose TTFT is closest to the provider's median."""
    df = ensure_columns(df, ["client.n_events", "client.ttft_ms"])
    sub = df[included(df) & (df["client.n_events"] >= 2) & df["client.ttft_ms"].notna()]
    picks: list[Any] = []
    for provider in _providers(sub)[:_MAX_TIMELINES]:
        rows = sub[sub["provider"] == provider]
        ttft = rows["client.ttft_ms"]
        picks.append((ttft - ttft.median()).abs().idxmin())
    return sub.loc[picks]


def token_timeline(df: pd.DataFrame) -> Plot | None:
    """Arrival offset vs event index for one representative request per provider."""
    if "file_offset" not in df.columns or "run_dir" not in df.columns:
        return None
    reps = _representatives(df)
    if reps.empty:
        return None
    offsets = load_event_offsets(reps)
    fig = _fig()
    ax = fig.add_subplot()
    drawn = 0
    for _, row in reps.iterrows():
        ys = offsets.get(str(row["record_id"]))
        if not ys:
            continue
        xs = np.arange(len(ys))
        decode = row.get("client.decode_ms_per_token")
        label = f"{row['provider']}: TTFT {row['client.ttft_ms']:.0f} ms"
        if isinstance(decode, float) and not np.isnan(decode):
            label += f", {decode:.1f} ms/token"
        (line,) = ax.plot(xs, ys, marker=".", markersize=3, linewidth=1, label=label)
        ax.plot([0], [ys[0]], marker="o", color=line.get_color(), markersize=7)
        drawn += 1
    if not drawn:
        return None
    ax.set_xlabel("output event index")
    ax.set_ylabel("arrival offset from t_start (ms)")
    ax.set_xlim(left=-0.5)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return Plot(
        "token_timeline",
        "Token arrival timeline",
        _png(fig),
        "One representative request per provider (median TTFT): the first point is the "
        "TTFT, the slope after it is the decode time per event.",
    )


def prefill_points(df: pd.DataFrame, lab: LabResults | None) -> dict[str, pd.DataFrame]:
    """TTFT vs prompt-token points per provider, from lab.json or else from the records."""
    out: dict[str, pd.DataFrame] = {}
    if lab is not None:
        for ans in lab.answers:
            figures = ans.figures
            if not isinstance(figures, PrefillDecodeFigures) or ans.provider in out:
                continue
            frame = pd.DataFrame(
                [(p.input_tokens, p.ttft_ms) for p in figures.points],
                columns=["input_tokens", "ttft_ms"],
            )
            frame = frame.astype(float).dropna()
            if not frame.empty:
                out[ans.provider] = frame
    if out:
        return out
    df = ensure_columns(df, ["usage.input_tokens", "client.ttft_ms"])
    sub = df[included(df) & (df["experiment"] == "prefill_decode")]
    sub = sub[sub["usage.input_tokens"].notna() & sub["client.ttft_ms"].notna()]
    for provider in _providers(sub):
        rows = sub[sub["provider"] == provider]
        out[provider] = pd.DataFrame(
            {
                "input_tokens": rows["usage.input_tokens"].to_numpy(dtype=float),
                "ttft_ms": rows["client.ttft_ms"].to_numpy(dtype=float),
            }
        )
    return out


def fit_line(points: pd.DataFrame) -> LinearFit | None:
    """Least-squares TTFT = intercept + ms_per_token × input_tokens (None under 2 sizes):
    the experiments' own fit (`LinearFit.least_squares`), for a run whose lab.json has none."""
    return LinearFit.least_squares(
        points["input_tokens"].astype(float).tolist(), points["ttft_ms"].astype(float).tolist()
    )


def _lab_fit(lab: LabResults | None, provider: str) -> LinearFit | None:
    """The prefill_decode experiment's own fit for `provider`, as `lab.json` holds it."""
    for ans in lab.answers if lab is not None else []:
        if isinstance(ans.figures, PrefillDecodeFigures) and ans.provider == provider:
            return ans.figures.fit
    return None


def ttft_vs_prompt(df: pd.DataFrame, lab: LabResults | None) -> Plot | None:
    """Scatter of TTFT against prompt tokens, with the fitted line per provider."""
    points = prefill_points(df, lab)
    if not points:
        return None
    fig = _fig()
    ax = fig.add_subplot()
    for provider, pts in list(points.items())[:_MAX_PROVIDERS]:
        coll = ax.scatter(pts["input_tokens"], pts["ttft_ms"], s=12, alpha=0.7)
        fit = _lab_fit(lab, provider) or fit_line(pts)
        label = f"{provider}"
        if fit is not None:
            xs = np.linspace(0, float(pts["input_tokens"].max()), 50)
            label += f": {fit.ms_per_token:.3f} ms/token + {fit.intercept_ms:.0f} ms"
            label += f" (R² {fit.r2:.2f})"
            ax.plot(
                xs,
                fit.intercept_ms + fit.ms_per_token * xs,
                color=coll.get_facecolor()[0],
                label=label,
            )
        else:
            coll.set_label(label + " (one prompt size: no fit)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("prompt tokens (provider count)")
    ax.set_ylabel("client TTFT (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return Plot(
        "ttft_vs_prompt",
        "TTFT vs prompt tokens (prefill_decode)",
        _png(fig),
        "Each point is one request; the line is the least-squares fit, its slope the "
        "prefill cost per prompt token.",
    )


def decode_per_provider(df: pd.DataFrame) -> Plot | None:
    """Box plot of client decode ms/token per provider (fliers hidden)."""
    sub = _ok(df, "client.decode_ms_per_token")
    if sub.empty:
        return None
    providers = _providers(sub)
    data = [
        sub.loc[sub["provider"] == p, "client.decode_ms_per_token"].to_numpy(dtype=float)
        for p in providers
    ]
    fig = _fig(width=max(4.0, 1.3 * len(providers) + 2))
    ax = fig.add_subplot()
    ax.boxplot(data, tick_labels=providers, showfliers=False)
    ax.set_ylabel("client decode (ms/token)")
    ax.grid(alpha=0.3, axis="y")
    return Plot(
        "decode_per_provider",
        "Decode ms/token per provider",
        _png(fig),
        "Client-observed (last token − first token) / (output tokens − 1); box = p25–p75, "
        "whiskers 1.5 IQR, outliers hidden.",
    )


def _ratio_rows(df: pd.DataFrame, lab: LabResults | None) -> pd.DataFrame:
    """Characters per token by text and series: each tokenizer when the answers hold the
    side-by-side table (the same table in every provider's answer, kept once), else each
    provider's own count, else the records' usage."""
    rows: list[dict[str, Any]] = []
    if lab is not None:
        side = {
            (c.tokenizer, c.text_id): c.chars_per_token
            for ans in lab.answers
            if isinstance(ans.figures, TokenRatioFigures)
            for c in ans.figures.side_by_side
            if c.chars_per_token is not None
        }
        if side:
            return pd.DataFrame(
                [
                    {"provider": name, "text_id": text, "cpt": cpt}
                    for (name, text), cpt in side.items()
                ]
            )
        for ans in lab.answers:
            if not isinstance(ans.figures, TokenRatioFigures):
                continue
            for r in ans.figures.rows:
                if r.chars_per_token is not None:
                    rows.append(
                        {"provider": ans.provider, "text_id": r.text_id, "cpt": r.chars_per_token}
                    )
    if rows:
        return pd.DataFrame(rows)
    df = ensure_columns(df, ["usage.input_tokens", "prompt_chars"])
    sub = df[included(df) & (df["experiment"] == "token_ratio")]
    sub = sub[(sub["usage.input_tokens"] > 0) & sub["prompt_chars"].notna()]
    if sub.empty:
        return pd.DataFrame(columns=["provider", "text_id", "cpt"])
    cpt = sub["prompt_chars"] / sub["usage.input_tokens"]
    frame = pd.DataFrame(
        {"provider": sub["provider"], "text_id": sub["prompt_id"], "cpt": cpt.astype(float)}
    )
    return frame.groupby(["provider", "text_id"])["cpt"].median().reset_index()


def chars_per_token(df: pd.DataFrame, lab: LabResults | None) -> Plot | None:
    """Grouped bars: characters per token for each text type, per provider."""
    rows = _ratio_rows(df, lab)
    if rows.empty:
        return None
    table = rows.pivot_table(index="text_id", columns="provider", values="cpt", aggfunc="median")
    texts = [str(t) for t in table.index]
    providers = [str(p) for p in table.columns][:_MAX_PROVIDERS]
    fig = _fig(width=max(5.0, 0.9 * len(texts) * max(1, len(providers)) / 2 + 3))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(providers))
    x = np.arange(len(texts))
    for i, provider in enumerate(providers):
        ax.bar(x + i * width, table[provider].to_numpy(dtype=float), width, label=provider)
    ax.axhline(4.0, color="grey", linestyle="--", linewidth=1, label="rule of thumb: 4")
    ax.set_xticks(x + width * (len(providers) - 1) / 2, texts, rotation=20, ha="right")
    ax.set_ylabel("characters per token")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return Plot(
        "chars_per_token",
        "Characters per token per text type (token_ratio)",
        _png(fig),
        "Characters divided by tokens: per tokenizer where the run cut every text side by side "
        "(the offline OpenAI encodings and each provider's own), else by each provider's "
        "input token count; the dashed line is the 4-characters-per-token rule of thumb.",
    )


def client_vs_server(df: pd.DataFrame) -> Plot | None:
    """Bars of provider-reported vs client-observed prefill/TTFT and decode (local runs)."""
    df = ensure_columns(
        df,
        [
            "provider_timings.prefill_ms",
            "provider_timings.decode_ms_per_token",
            "client.ttft_ms",
            "client.decode_ms_per_token",
        ],
    )
    sub = df[included(df)]
    reporting = sub[
        sub["provider_timings.prefill_ms"].notna()
        | sub["provider_timings.decode_ms_per_token"].notna()
    ]
    providers = _providers(reporting)
    if not providers:
        return None
    med = (
        sub[sub["provider"].isin(providers)]
        .groupby("provider")[
            [
                "provider_timings.prefill_ms",
                "client.ttft_ms",
                "provider_timings.decode_ms_per_token",
                "client.decode_ms_per_token",
            ]
        ]
        .median()
    )
    fig = _fig(width=8.0)
    axes = fig.subplots(1, 2)
    x = np.arange(len(providers))
    pairs = [
        ("provider_timings.prefill_ms", "client.ttft_ms", "ms", "prefill vs TTFT"),
        (
            "provider_timings.decode_ms_per_token",
            "client.decode_ms_per_token",
            "ms/token",
            "decode per token",
        ),
    ]
    for ax, (server_col, client_col, unit, title) in zip(axes, pairs, strict=True):
        ax.bar(
            x - 0.2,
            med.loc[providers, server_col].to_numpy(dtype=float),
            0.4,
            label="provider-reported",
        )
        ax.bar(
            x + 0.2,
            med.loc[providers, client_col].to_numpy(dtype=float),
            0.4,
            label="client-observed",
        )
        ax.set_xticks(x, providers)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    return Plot(
        "client_vs_server",
        "Client vs server (providers that report their own timings)",
        _png(fig),
        "Medians. The gap between the bars is network, serving front end and client overhead.",
    )


def load_rows(lab: LabResults | None) -> list[tuple[str, str, list[LoadLevel]]]:
    """(provider, experiment, level rows) of every load answer in `lab.json`."""
    return [
        (ans.provider, ans.experiment, ans.figures.levels)
        for ans in (lab.answers if lab is not None else [])
        if isinstance(ans.figures, LoadFigures) and ans.figures.levels
    ]


def load_curves(lab: LabResults | None) -> Plot | None:
    """Aggregate output tokens/s and TTFT p50/p99 against each load level, per provider."""
    series = [(p, e, [r for r in rows if r.ok]) for p, e, rows in load_rows(lab)]
    series = [s for s in series if s[2]][:_MAX_PROVIDERS]
    if not series:
        return None
    fig = _fig(width=10.0, height=3.8)
    ax_tps, ax_ttft = fig.subplots(1, 2)
    modes = set()
    for provider, exp, rows in series:
        label = provider if len({e for _, e, _ in series}) == 1 else f"{provider} · {exp}"
        x = [r.target for r in rows]
        modes.add(rows[0].mode)
        tps = [r.output_tokens_per_s or np.nan for r in rows]
        line = ax_tps.plot(x, tps, marker="o", label=label)[0]
        p50 = [r.ttft_ms_p50 or np.nan for r in rows]
        p99 = [r.ttft_ms_p99 or np.nan for r in rows]
        ax_ttft.plot(x, p50, marker="o", color=line.get_color(), label=f"{label} p50")
        ax_ttft.plot(x, p99, marker="^", ls="--", color=line.get_color(), label=f"{label} p99")
        bound = [(xi, yi) for xi, yi, r in zip(x, p99, rows, strict=True) if r.client_bound]
        if bound:
            ax_ttft.scatter(*zip(*bound, strict=True), s=140, facecolors="none", edgecolors="red")
    xlabel = (
        {
            "concurrency": "concurrency (streams in flight)",
            "rate": "offered rate (requests/s)",
        }.get(modes.pop(), "level")
        if len(modes) == 1
        else "level (concurrency or requests/s)"
    )
    for ax in (ax_tps, ax_ttft):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if max(r.target for _, _, rows in series for r in rows) >= 16:
            ax.set_xscale("log", base=2)
    ax_tps.set_ylabel("aggregate output tokens/s")
    ax_tps.set_ylim(bottom=0)
    ax_ttft.set_ylabel("TTFT (ms)")
    ax_tps.legend(fontsize=8)
    ax_ttft.legend(fontsize=7)
    return Plot(
        "load_curves",
        "Throughput and TTFT per load level",
        _png(fig),
        "Left: output tokens/s of all streams together, per level. Right: client TTFT p50 "
        "(solid) and p99 (dashed); a red ring marks a client-bound level, whose timings "
        "include labkit's own delay.",
    )


def server_queue_timeline(scraped: dict[str, list[ServerMetricsSample]]) -> Plot | None:
    """Requests running and waiting in each server over the run, from its scrapes."""
    series = [(p, s) for p, s in sorted(scraped.items()) if any(x.running is not None for x in s)]
    series = series[:_MAX_PROVIDERS]
    if not series:
        return None
    fig = _fig(width=10.0, height=3.4)
    ax = fig.subplots()
    for provider, samples in series:
        t0 = samples[0].t_mono_ns
        t = [(x.t_mono_ns - t0) / 1e9 for x in samples]
        running = [np.nan if x.running is None else x.running for x in samples]
        waiting = [np.nan if x.waiting is None else x.waiting for x in samples]
        line = ax.step(t, running, where="post", label=f"{provider} running")[0]
        ax.step(
            t, waiting, where="post", ls="--", color=line.get_color(), label=f"{provider} waiting"
        )
    ax.set_xlabel("seconds since the provider's first scrape")
    ax.set_ylabel("requests")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return Plot(
        "server_queue",
        "Requests running and waiting in the server",
        _png(fig),
        "From the server's own /metrics, scraped during the run (server-metrics-<id>.jsonl): "
        "requests it was running (solid) and holding in its queue (dashed).",
    )


def all_plots(df: pd.DataFrame, lab: LabResults | None) -> tuple[list[Plot], list[str]]:
    """Every figure the data allows, and a sentence for each one that could not be drawn."""
    makers: list[tuple[str, Any]] = [
        ("TTFT distribution", lambda: ttft_distribution(df)),
        ("token-arrival timeline", lambda: token_timeline(df)),
        ("TTFT vs prompt tokens", lambda: ttft_vs_prompt(df, lab)),
        ("decode ms/token", lambda: decode_per_provider(df)),
        ("chars per token", lambda: chars_per_token(df, lab)),
        ("client vs server", lambda: client_vs_server(df)),
        ("load curves", lambda: load_curves(lab)),
    ]
    why = {
        "TTFT distribution": "no successful request with a TTFT",
        "token-arrival timeline": "no successful request with at least 2 output events",
        "TTFT vs prompt tokens": "no prefill_decode results (experiment not run or no "
        "successful request with a provider input-token count)",
        "decode ms/token": "no request with a decode ms/token (needs 2+ output tokens and "
        "an output token count)",
        "chars per token": "no token_ratio results",
        "client vs server": "no provider reported its own prefill/decode timings",
        "load curves": "no load results (experiment not run, or no level with a successful "
        "request)",
    }
    plots: list[Plot] = []
    missing: list[str] = []
    for name, make in makers:
        plot = make()
        if plot is None:
            missing.append(f"{name}: not drawn, {why[name]}.")
        else:
            plots.append(plot)
    return plots, missing
