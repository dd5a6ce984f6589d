"""Runs side by side, for before/after comparisons.

The first run is the baseline. For each provider × experiment × model and each metric, every
run gets its sample count and p50/p90, and every later run the change from the baseline
(absolute and in percent). A group missing from the baseline has no deltas.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from labkit.errors import RunError
from labkit.report.load import RunData, load_run
from labkit.report.render import Block, Heading, Para, Table, fmt_num, render_html
from labkit.report.render import render_markdown as _render_md
from labkit.report.stats import GROUP_KEYS, METRICS, summarize
from labkit.scrub import for_people, scrub_frame

__all__ = ["COMPARE_COLUMNS", "compare_frames", "compare_runs", "write_comparison"]

COMPARE_COLUMNS: list[str] = [
    *GROUP_KEYS,
    "metric",
    "run",
    "run_dir",
    "n",
    "p50",
    "p90",
    "delta_p50",
    "delta_p90",
    "delta_p50_pct",
    "delta_p90_pct",
]


def _labels(runs: Sequence[RunData]) -> list[str]:
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):
        labels = [r.run_dir.name for r in runs]
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}:{lab}" for i, lab in enumerate(labels)]
    return labels


def compare_frames(frames: Sequence[tuple[str, str, pd.DataFrame]]) -> pd.DataFrame:
    """Compare already-loaded record frames, given as (label, run_dir, frame); first = base."""
    rows: list[dict[str, object]] = []
    base: dict[tuple[object, ...], tuple[float, float]] = {}
    for i, (label, run_dir, df) in enumerate(frames):
        summary = summarize(df)
        for _, s in summary.iterrows():
            key_vals = tuple(s[k] for k in GROUP_KEYS)
            for metric in METRICS:
                p50 = float(s[f"{metric}.p50"])
                p90 = float(s[f"{metric}.p90"])
                row: dict[str, object] = dict(zip(GROUP_KEYS, key_vals, strict=True))
                row.update(
                    metric=metric,
                    run=label,
                    run_dir=run_dir,
                    n=int(s[f"{metric}.n"]),
                    p50=p50,
                    p90=p90,
                )
                key = (*key_vals, metric)
                if i == 0:
                    base[key] = (p50, p90)
                    row.update(
                        delta_p50=np.nan,
                        delta_p90=np.nan,
                        delta_p50_pct=np.nan,
                        delta_p90_pct=np.nan,
                    )
                else:
                    b50, b90 = base.get(key, (np.nan, np.nan))
                    row.update(
                        delta_p50=p50 - b50,
                        delta_p90=p90 - b90,
                        delta_p50_pct=100.0 * (p50 - b50) / b50 if b50 else np.nan,
                        delta_p90_pct=100.0 * (p90 - b90) / b90 if b90 else np.nan,
                    )
                rows.append(row)
    out = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    if out.empty:
        return out
    order = {label: i for i, (label, _, _) in enumerate(frames)}
    metric_order = {m: i for i, m in enumerate(METRICS)}
    out = out.assign(_r=out["run"].map(order), _m=out["metric"].map(metric_order))
    out = out.sort_values([*GROUP_KEYS, "_m", "_r"], na_position="last", kind="stable")
    return out.drop(columns=["_r", "_m"]).reset_index(drop=True)


def compare_runs(run_dirs: Sequence[Path | str]) -> pd.DataFrame:
    """Long table: one row per provider × experiment × model × metric × run (first = base).

    Columns: `COMPARE_COLUMNS`. ``n`` is the number of requests in that metric's statistics;
    ``delta_*`` are this run minus the first run (NaN for the first run itself).
    """
    if len(run_dirs) < 2:
        raise RunError("compare needs at least two run folders")
    runs = [load_run(p) for p in run_dirs]
    labels = _labels(runs)
    return compare_frames(
        [(lab, str(r.run_dir), r.records) for lab, r in zip(labels, runs, strict=True)]
    )


def _signed(v: object, digits: int | None = None, suffix: str = "") -> str:
    text = fmt_num(v, digits)
    if text == "—":
        return text
    return ("+" + text if not text.startswith("-") else text) + suffix


def comparison_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Column labels and formatted cells of a comparison table (shared by md, html, CLI)."""
    cols = ["provider", "experiment", "model", "metric", "run", "n", "p50", "p90", "Δp50", "Δp90"]
    rows = []
    for _, r in table.iterrows():
        d50 = _signed(r["delta_p50"])
        d90 = _signed(r["delta_p90"])
        if d50 != "—" and not np.isnan(r["delta_p50_pct"]):
            d50 += f" ({_signed(r['delta_p50_pct'], 1, '%')})"
        if d90 != "—" and not np.isnan(r["delta_p90_pct"]):
            d90 += f" ({_signed(r['delta_p90_pct'], 1, '%')})"
        rows.append(
            [
                str(r["provider"]),
                str(r["experiment"]),
                str(r["model"]),
                str(r["metric"]),
                str(r["run"]),
                str(int(r["n"])),
                fmt_num(r["p50"]),
                fmt_num(r["p90"]),
                d50,
                d90,
            ]
        )
    return cols, rows


def write_comparison(run_dirs: Sequence[Path | str], out: Path | None = None) -> Path:
    """Write compare.md, compare.html and compare.csv; returns the folder holding them.

    The default folder is ``compare-<first>-vs-<last>`` next to the first run folder.
    """
    if len(run_dirs) < 2:
        raise RunError("compare needs at least two run folders")
    runs = [load_run(p) for p in run_dirs]
    labels = _labels(runs)
    table = compare_frames(
        [(lab, str(r.run_dir), r.records) for lab, r in zip(labels, runs, strict=True)]
    )
    folder = out or runs[0].run_dir.parent / (
        f"compare-{runs[0].run_dir.name}-vs-{runs[-1].run_dir.name}"
    )
    title = "labkit comparison: " + " vs ".join(labels)
    cols, rows = comparison_rows(table)
    blocks: list[Block] = [
        Heading(title, 1),
        Para(
            f"Baseline: {labels[0]} ({runs[0].run_dir}). Later runs: "
            + ", ".join(f"{lab} ({r.run_dir})" for lab, r in zip(labels[1:], runs[1:], strict=True))
            + ". Δ is the run minus the baseline, in ms (tokens/s for output_tokens_per_s); "
            "n is the number of successful, non-warm-up requests behind each figure.",
            "note",
        ),
    ]
    if table.empty:
        blocks.append(Para("None of these runs holds records: nothing to compare.", "warn"))
    else:
        blocks.append(Table(cols, rows, {5, 6, 7, 8, 9}))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "compare.md").write_text(for_people(_render_md(blocks, folder)), encoding="utf-8")
        (folder / "compare.html").write_text(
            for_people(render_html(blocks, title)), encoding="utf-8"
        )
        scrub_frame(table).to_csv(folder / "compare.csv", index=False)
    except OSError as exc:
        raise RunError(f"cannot write the comparison into {folder}: {exc}") from exc
    return folder
