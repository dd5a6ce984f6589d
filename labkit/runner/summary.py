"""The run summary printed at the end of `labkit run`: one row per provider × experiment."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from rich.table import Table

from labkit.figures import LoadFigures, LoadLevel, SweepFigures, TraceFigures
from labkit.records import LabResults, RequestRecord
from labkit.timing import percentile

__all__ = ["load_tables", "summary_table"]


def _p(values: list[float], q: float) -> float | None:
    return percentile(sorted(values), q) if values else None


def _ms(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _vals(records: list[RequestRecord], get: object) -> list[float]:
    out = []
    for r in records:
        v = get(r)  # type: ignore[operator]
        if v is not None:
            out.append(float(v))
    return out


def summary_table(records: list[RequestRecord], title: str = "labkit run") -> Table:
    """Client TTFT next to the server's prefill, client decode next to the server's."""
    table = Table(title=title, title_justify="left")
    for col, justify in [
        ("provider", "left"),
        ("experiment", "left"),
        ("ok/err", "right"),
        ("TTFT\np50 ms", "right"),
        ("TTFT\np90 ms", "right"),
        ("server\nprefill ms", "right"),
        ("decode\nms/tok", "right"),
        ("server\nms/tok", "right"),
        ("tokens\nin/out", "right"),
        ("stop", "left"),
        ("errors", "left"),
    ]:
        table.add_column(col, justify=justify, no_wrap=col in ("provider", "experiment"))  # type: ignore[arg-type]
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            groups.setdefault((r.provider, r.experiment), []).append(r)
    for (provider, experiment), recs in groups.items():
        ok = [r for r in recs if r.error is None]
        bad = [r for r in recs if r.error is not None]
        ttft = _vals(ok, lambda r: r.client.ttft_ms)
        tin = _p(_vals(ok, lambda r: r.usage.input_tokens), 50)
        tout = _p(_vals(ok, lambda r: r.usage.output_tokens), 50)
        stops = Counter(str(r.stop_reason) for r in ok if r.stop_reason)
        errors = Counter(str(r.error.kind) for r in bad if r.error)
        table.add_row(
            provider,
            experiment,
            f"{len(ok)}/{len(bad)}",
            _ms(_p(ttft, 50)),
            _ms(_p(ttft, 90)),
            _ms(_p(_vals(ok, lambda r: r.provider_timings.prefill_ms), 50)),
            _ms(_p(_vals(ok, lambda r: r.client.decode_ms_per_token), 50), 2),
            _ms(_p(_vals(ok, lambda r: r.provider_timings.decode_ms_per_token), 50), 2),
            f"{_ms(tin, 0)}/{_ms(tout, 0)}",
            ", ".join(f"{k}×{v}" for k, v in stops.most_common()) or "—",
            ", ".join(f"{k}×{v}" for k, v in errors.most_common()) or "—",
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
    (lambda r: r.loop_lag_ms_p50, "loop lag\np50 ms", 1),
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


def load_tables(lab: LabResults) -> list[Table]:
    """One table per load answer: a row per level, client-bound levels marked."""
    tables = []
    for ans in lab.answers:
        if isinstance(ans.figures, LoadFigures):
            levels = ans.figures.levels
            title = f"{ans.experiment} · {ans.provider}"
        elif isinstance(ans.figures, TraceFigures):
            levels = [ans.figures.replay]  # a trace replay: one level
            title = f"{ans.experiment} · {ans.provider}"
        elif isinstance(ans.figures, SweepFigures):
            f = ans.figures
            levels = [p.level for p in f.probes]
            knee = "no knee" if f.knee is None else f"knee {f.knee:.3g}"
            title = f"{ans.experiment} · {ans.provider} · {knee} (stopped: {f.stopped})"
        else:
            continue
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
            name = row.title + (" [client-bound]" if row.client_bound else "")
            cells = [name, _ms(row.workers, 0)]
            cells += [_ms(get(row), digits) for get, _, digits in columns]
            table.add_row(*cells)
        tables.append(table)
    return tables
