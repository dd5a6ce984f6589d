"""The run summary printed at the end of `labkit run`: the run's request statistics
(`RequestStats`, from lab.json) a row per provider × experiment × client path, and each
load answer's levels."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from labkit.figures import LoadLevel, Quantile, RequestStats, RunsLevels
from labkit.records import LabResults
from labkit.wording import CLIENT_BOUND_MARK, cell, group_label

__all__ = ["load_tables", "summary_table"]


def _ms(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _two_lines(q: Quantile | None) -> str:
    """`cell`, its interval on a second line (keeps the terminal table narrow)."""
    return cell(q).replace(" [", "\n[", 1)


def _counts(counts: dict[str, int]) -> str:
    """`length×6, end×2`, or `—`."""
    return ", ".join(f"{k}×{v}" for k, v in sorted(counts.items())) or "—"


def summary_table(lab: LabResults | list[RequestStats], title: str = "labkit run") -> Table:
    """The run's request statistics (lab.json's `requests`): client TTFT next to the
    server's prefill, client decode next to the server's; client-bound groups marked."""
    stats = lab if isinstance(lab, list) else (lab.requests or [])
    table = Table(title=title, title_justify="left")
    for col, justify in [
        ("provider", "left"),
        ("experiment", "left"),
        ("ok/err", "right"),
        ("TTFT ms\np50 [95% CI]", "right"),
        ("TTFT ms\np90 [95% CI]", "right"),
        ("server prefill\nms p50", "right"),
        ("decode\nms/tok p50", "right"),
        ("server\nms/tok p50", "right"),
        ("tokens\nin/out", "right"),
        ("stop · errors", "left"),
    ]:
        quantile = "[95% CI]" in col or "p50" in col
        table.add_column(
            col,
            justify=justify,  # type: ignore[arg-type]
            no_wrap=col in ("provider", "experiment"),
            min_width=12 if quantile else None,
        )
    for s in stats:
        if s.records == s.warmup_excluded:
            continue
        name = group_label(s)
        name += f"\n{CLIENT_BOUND_MARK}" if s.client_bound else ""
        gap_mark = " ⚠" if s.decode_gap_client_bound else ""
        table.add_row(
            s.provider,
            name,
            f"{s.n}/{s.errors}",
            _two_lines(s.ttft_ms.p50),
            _two_lines(s.ttft_ms.p90),
            _two_lines(s.provider_prefill_ms),
            _two_lines(s.decode_ms_per_token.p50) + gap_mark,
            _two_lines(s.provider_decode_ms_per_token),
            f"{_ms(s.input_tokens_p50, 0)}/{_ms(s.output_tokens_p50, 0)}",
            _counts(s.stop_reasons) + (f" · {_counts(s.error_kinds)}" if s.error_kinds else ""),
        )
    return table


_LOAD_COLUMNS: list[tuple[Callable[[LoadLevel], float | None], str, int]] = [
    (lambda r: r.ok, "ok", 0),
    (lambda r: r.failed, "failed", 0),
    (lambda r: r.achieved_rate_rps, "req/s", 2),
    (lambda r: r.output_tokens_per_s, "out\ntok/s", 0),
    (lambda r: r.ttft_ms_p50, "TTFT\np50 ms", 1),
    (lambda r: r.ttft_ms_p99, "TTFT\np99 ms", 1),
    (lambda r: r.decode_ms_per_token_p50, "decode\nms/tok", 2),
    (lambda r: r.queue_ms_p99, "queue\np99 ms", 2),
    (lambda r: r.stamp_lateness_ms_p99, "stamps late\np99 ms", 2),
]

# Goodput beside throughput, where the experiment has SLOs (`LoadLevel.slo`).
_SLO_COLUMNS: list[tuple[Callable[[LoadLevel], float | None], str, int]] = [
    (lambda r: r.completed_rps, "done\nreq/s", 2),
    (lambda r: r.slo.goodput_rps if r.slo else None, "goodput\nreq/s", 2),
]

# The server's own metrics, shown where a level has them (`LoadLevel.server`).
_SERVER_COLUMNS: list[tuple[Callable[[LoadLevel], float | None], str, int]] = [
    (lambda r: r.server.running_max if r.server else None, "server\nrunning max", 0),
    (lambda r: r.server.waiting_max if r.server else None, "server\nwaiting max", 0),
    (
        lambda r: (
            r.server.kv_cache_use_max * 100
            if r.server and r.server.kv_cache_use_max is not None
            else None
        ),
        "server\nKV max %",
        0,
    ),
    (lambda r: r.server.ttft_ms_p50 if r.server else None, "server\nTTFT p50", 1),
]


def _level_cell(
    row: LoadLevel, get: Callable[[LoadLevel], float | None], label: str, digits: int
) -> str:
    """A level's cell: its TTFT percentiles with their intervals where it has them."""
    if label.startswith("TTFT\np") and row.ttft is not None:
        return _two_lines(getattr(row.ttft, label.split("\n")[1].split()[0]))
    return _ms(get(row), digits)


def load_tables(lab: LabResults) -> list[Table]:
    """One table per answer that ran load levels (`RunsLevels`): a row per level,
    client-bound levels marked."""
    tables: list[Table] = []
    for ans in lab.answers:
        if not isinstance(ans.figures, RunsLevels):
            continue
        levels = ans.figures.levels_run()
        title = f"{ans.experiment} · {ans.provider}{ans.figures.levels_title()}"
        table = Table(title=title, title_justify="left")
        table.add_column("level", no_wrap=True)
        table.add_column("procs", justify="right")
        columns = list(_LOAD_COLUMNS)
        if any(row.slo for row in levels):
            columns += _SLO_COLUMNS
        columns += [c for c in _SERVER_COLUMNS if any(c[0](row) is not None for row in levels)]
        for _, label, _ in columns:
            table.add_column(label, justify="right")
        for row in levels:
            name = row.title + (f" {CLIENT_BOUND_MARK}" if row.client_bound else "")
            cells = [name, _ms(row.workers, 0)]
            cells += [_level_cell(row, get, label, digits) for get, label, digits in columns]
            table.add_row(*cells)
        tables.append(table)
    return tables
