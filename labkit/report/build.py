"""`write_report`: one run folder → report.md, report.html, summary.csv, summary.parquet.

Section order: the lab's answers first (from ``lab.json``), each with its chart, then what
is missing from the run, the run and its providers, the statistics, errors and the
provider/client split, each section with its own picture. Every gap is said in words: a
provider that failed every request, a provider that reports no usage or no timings of its
own, a truncated ``records.jsonl``, a picture that could not be drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from labkit.clocksync import clock_note
from labkit.errors import RunError
from labkit.figures import LoadLevel, ServerLevelMetrics
from labkit.records import LabAnswer
from labkit.report.charts import Chart, TokenSpans, question_charts
from labkit.report.later import later_stats_section
from labkit.report.load import RunData, ensure_columns, load_client_array, load_run
from labkit.report.render import (
    Block,
    Bullets,
    ChartBlock,
    Heading,
    Para,
    Table,
    TokenSpansBlock,
    fmt_num,
    html_page,
    render_markdown,
)
from labkit.report.run_charts import (
    client_vs_server_chart,
    load_curves_chart,
    load_rows,
    request_distributions,
    server_queue_chart,
)
from labkit.report.split import NOT_REPORTED, SPLIT_COLUMNS, provider_client_split
from labkit.report.stats import summarize
from labkit.report.sweep import sweep_section
from labkit.report.workloads import cache_hits_chart, conversation_section
from labkit.scrub import for_people, scrub_frame
from labkit.selfcheck import RecordLateness, client_bound_note, lateness_of, summarize_lag
from labkit.server_metrics import ServerMetricsSample, read_server_metrics

__all__ = ["LAB_EXPERIMENTS", "ReportPaths", "build_blocks", "missing_notes", "write_report"]

# The lab's five questions, in the order the report answers them.
LAB_EXPERIMENTS: list[str] = [
    "single",
    "token_ratio",
    "determinism",
    "prefill_decode",
    "attribution",
]


@dataclass(frozen=True)
class ReportPaths:
    """Where `write_report` wrote its outputs."""

    md: Path
    html: Path
    csv: Path
    parquet: Path
    files: Path


# --- What is missing ---------------------------------------------------------------------


def missing_notes(run: RunData, summary: pd.DataFrame) -> list[str]:
    """Plain sentences on everything the run lacks (empty when nothing is missing)."""
    notes = list(run.problems)
    df = ensure_columns(
        run.records,
        [
            "usage.output_tokens",
            "usage.input_tokens",
            "provider_timings.prefill_ms",
            "provider_timings.decode_ms_per_token",
        ],
    )
    if "usage.output_tokens_source" not in df.columns:
        df = df.assign(**{"usage.output_tokens_source": None})
    notes += _client_bound_notes(run.records)
    status = run.manifest.get("status")
    if status and status != "completed":
        notes.append(f"The run's status is '{status}': results may be partial.")
    providers = run.manifest.get("providers")
    timings_promised: set[str] = set()
    if isinstance(providers, dict):
        for pid, info in providers.items():
            if isinstance(info, dict) and info.get("reports_server_timings") is True:
                timings_promised.add(str(pid))
            later = info.get("stats_later") if isinstance(info, dict) else None
            if isinstance(later, dict) and later.get("missing"):
                notes.append(
                    f"Provider {pid}: its stats after the run did not come for "
                    f"{later['missing']} responses (first: {later.get('first_error')})."
                )
            scraped = info.get("server_metrics") if isinstance(info, dict) else None
            if isinstance(scraped, dict) and scraped.get("failed"):
                notes.append(
                    f"Provider {pid}: {scraped['failed']} scrapes of its server's metrics "
                    f"({scraped.get('url')}) failed, first: {scraped.get('first_error')}; "
                    "its per-level server figures miss those moments."
                )
            if not isinstance(info, dict) or info.get("status") in (None, "ok"):
                continue
            why = info.get("reason") or info.get("first_error") or "no reason given"
            notes.append(f"Provider {pid} was {info.get('status')}: {why}.")
    if df.empty:
        notes.append("records.jsonl holds no records: there is nothing to measure.")
        return notes
    for provider, rows in df.groupby("provider", sort=True, dropna=False):
        measured = rows[~rows["warmup"].astype(bool)]
        ok = measured[measured["ok"].astype(bool)]
        if len(measured) == 0:
            notes.append(f"{provider}: only warm-up requests were recorded; no statistics.")
            continue
        if ok.empty:
            kinds = measured["error.kind"].fillna("unknown").value_counts()
            kind_text = ", ".join(f"{k} × {int(v)}" for k, v in kinds.items())
            first = measured["error.message"].dropna()
            example = f" First error: {first.iloc[0]}" if len(first) else ""
            notes.append(
                f"{provider}: every request failed ({len(measured)} of {len(measured)}: "
                f"{kind_text}); no latency statistics.{example}"
            )
            continue
        if len(ok) == 1:
            notes.append(
                f"{provider}: only 1 successful request; every percentile is that one value."
            )
        elif len(ok) < 10:
            notes.append(f"{provider}: only {len(ok)} successful requests; percentiles are rough.")
        if ok["usage.output_tokens"].isna().all():
            notes.append(
                f"{provider}: reported no token usage: output tokens, decode ms/token and "
                "tokens/s are not available."
            )
        elif (ok["usage.output_tokens_source"] == "local").any():
            n_local = int((ok["usage.output_tokens_source"] == "local").sum())
            notes.append(
                f"{provider}: sent no usage in {n_local} of {len(ok)} requests; their output "
                "tokens were counted locally by labkit, not by the provider."
            )
        if ok["usage.input_tokens"].isna().all() and not ok["usage.output_tokens"].isna().all():
            notes.append(f"{provider}: reported no input token count.")
        notes += _local_count_note(str(provider), ok)
        if (
            ok["provider_timings.prefill_ms"].isna().all()
            and ok["provider_timings.decode_ms_per_token"].isna().all()
        ):
            if str(provider) in timings_promised:
                notes.append(
                    f"{provider}: its kind reports prefill/decode timings of its own, but none "
                    f"arrived in this run (an older or differently built server?); the split "
                    f"below says '{NOT_REPORTED}'."
                )
            else:
                notes.append(
                    f"{provider}: reports no prefill/decode timings of its own; the split below "
                    f"says '{NOT_REPORTED}' and attributes only what the client observed."
                )
    return notes


def _median(group: pd.DataFrame, column: str) -> float | None:
    if column not in group.columns:
        return None
    values = group[column].dropna()
    return float(values.median()) if len(values) else None


def _lateness(group: pd.DataFrame) -> list[RecordLateness]:
    """Each record's stamp lateness (`labkit.selfcheck.record_lateness`), from the frame;
    each event's estimate (``client.stamp_lateness_ms``, not a frame column) is read back
    from records.jsonl, so the group's p99 is pooled as the run's own figures pool it."""
    p50, p99 = "client.stamp_lateness_ms_p50", "client.stamp_lateness_ms_p99"
    if p50 not in group.columns or p99 not in group.columns:
        return []
    out = []
    cols = list(group.columns)
    located = {"run_dir", "file_offset", "record_id"} <= set(cols)
    per_event = load_client_array(group, "stamp_lateness_ms") if located else {}

    def get(rec: tuple[object, ...], name: str) -> float | None:
        if name not in cols:
            return None
        v = rec[cols.index(name)]
        return float(v) if isinstance(v, int | float) and v == v else None

    for rec in group.itertuples(index=False, name=None):
        lo, hi = get(rec, p50), get(rec, p99)
        if lo is None or hi is None:
            continue
        n = get(rec, "client.n_events")
        each = per_event.get(str(rec[cols.index("record_id")])) if located else None
        out.append(
            lateness_of(
                max(1, int(n or 1)),
                lo,
                hi,
                get(rec, "client.ttft_lateness_ms"),
                get(rec, "client.stamp_lateness_ms_max"),
                each,
            )
        )
    return out


def _client_bound_notes(df: pd.DataFrame) -> list[str]:
    """`labkit.selfcheck.client_bound_notes`, from the records frame."""
    if "client.loop_lag_ms" not in df.columns or df.empty:
        return []
    sub = df[~df["warmup"].astype(bool)] if "warmup" in df.columns else df
    keys = ["provider", "experiment"] + (["tags.level"] if "tags.level" in df.columns else [])
    sub = sub.assign(**{k: sub[k].astype(object).fillna("") for k in keys})
    has_cpu = {"app.cpu_ms", "client.e2e_ms"} <= set(sub.columns)
    notes = []
    for key, group in sub.groupby(keys, sort=True):
        shares: list[float] = []
        if has_cpu:
            e2e = group["client.e2e_ms"]
            shares = (group["app.cpu_ms"] / e2e[e2e > 0]).dropna().tolist()
        lag = summarize_lag(
            group["client.loop_lag_ms"].dropna(),
            shares,
            _lateness(group),
            itl_ms_p50=_median(group, "client.itl_ms_p50"),
            ttft_ms_p50=_median(group, "client.ttft_ms"),
        )
        if lag.client_bound:
            notes.append(client_bound_note(" · ".join(str(k) for k in key if str(k)), lag))
    return notes


# --- Sections ----------------------------------------------------------------------------


def _answer_line(ans: LabAnswer) -> str:
    who = ans.provider + (f" ({ans.model})" if ans.model else "")
    flag = "" if ans.status == "ok" else f" [{ans.status}]"
    return f"{who}{flag}: {ans.answer}"


def _lab_section(run: RunData) -> list[Block]:
    blocks: list[Block] = [Heading("Lab answers")]
    if run.lab is None:
        blocks.append(
            Para(
                "lab.json is absent: the lab's answers were not computed for this run. The "
                "statistics and figures below come from the records alone.",
                "warn",
            )
        )
        return blocks
    by_exp: dict[str, list[LabAnswer]] = {}
    for ans in run.lab.answers:
        by_exp.setdefault(ans.experiment, []).append(ans)
    order = LAB_EXPERIMENTS + sorted(set(by_exp) - set(LAB_EXPERIMENTS))
    pictures = question_charts(run.lab)
    for i, exp in enumerate(order, start=1):
        answers = by_exp.get(exp)
        if not answers:
            blocks.append(Heading(f"{i}. {exp}", 3))
            blocks.append(Para(f"The {exp} experiment was not run or produced no answer.", "note"))
            continue
        blocks.append(Heading(f"{i}. {exp}: {answers[0].question}", 3))
        blocks.append(Bullets([_answer_line(a) for a in answers]))
        gaps: list[str] = []
        for picture in pictures.get(exp, []):
            if isinstance(picture, Chart):
                blocks.append(ChartBlock(picture))
            elif isinstance(picture, TokenSpans):
                blocks.append(TokenSpansBlock(picture))
            else:
                gaps.append(picture)
        if gaps:
            blocks.append(Bullets(gaps, "note"))
    return blocks


_LOAD_VIEW: list[tuple[Callable[[LoadLevel], float | None], str, int | None]] = [
    (lambda r: r.workers, "procs", 0),
    (lambda r: r.ok, "ok", 0),
    (lambda r: r.failed, "failed", 0),
    (lambda r: r.achieved_rate_rps, "req/s", 2),
    (lambda r: r.mean_in_flight, "in flight", 1),
    (lambda r: r.output_tokens_per_s, "out tok/s", 0),
    (lambda r: r.ttft_ms_p50, "TTFT p50", None),
    (lambda r: r.ttft_ms_p90, "TTFT p90", None),
    (lambda r: r.ttft_ms_p99, "TTFT p99", None),
    (lambda r: r.decode_ms_per_token_p50, "decode ms/tok p50", None),
    (lambda r: r.decode_ms_per_token_p99, "decode ms/tok p99", None),
    (lambda r: r.queue_ms_p99, "queue p99", None),
    (lambda r: r.loop_lag_ms_p50, "loop lag p50", None),
    (lambda r: r.stamp_lateness_ms_p99, "stamps late p99", None),
]


# Where the experiment has SLOs: goodput beside the completed rate, and the share that met.
_SLO_VIEW: list[tuple[Callable[[LoadLevel], float | None], str, int | None]] = [
    (lambda r: r.completed_rps, "completed req/s", 2),
    (lambda r: r.slo.goodput_rps if r.slo else None, "goodput req/s", 2),
    (
        lambda r: 100 * r.slo.good / r.slo.requests if r.slo and r.slo.requests else None,
        "% good",
        0,
    ),
]


# Where a level ran across hosts (Ray): how many, and how far their clocks may be off.
_HOSTS_VIEW: list[tuple[Callable[[LoadLevel], float | None], str, int | None]] = [
    (lambda r: r.hosts, "hosts", 0),
    (lambda r: r.clock_uncertainty_ms, "clock ± ms", 3),
]


_SERVER_VIEW: list[tuple[Callable[[ServerLevelMetrics], float | None], str, int | None]] = [
    (lambda m: m.scrapes, "scrapes", 0),
    (lambda m: m.running_p50, "running p50", 1),
    (lambda m: m.running_max, "running max", 0),
    (lambda m: m.waiting_p50, "waiting p50", 1),
    (lambda m: m.waiting_max, "waiting max", 0),
    (lambda m: None if m.kv_cache_use_max is None else 100 * m.kv_cache_use_max, "KV use max %", 1),
    (lambda m: m.ttft_ms_p50, "server TTFT p50", None),
    (lambda m: m.ttft_ms_p90, "server TTFT p90", None),
    (lambda m: m.itl_ms_p50, "server ITL p50", None),
    (lambda m: m.itl_ms_p90, "server ITL p90", None),
]


def _server_table(rows: list[LoadLevel]) -> list[Block]:
    """The server's own metrics per level, beside labkit's TTFT and ITL (none: empty)."""
    measured = [(row, row.server) for row in rows if row.server is not None]
    if not measured:
        return []
    sources = sorted({f"{k}: {v}" for _, m in measured for k, v in m.sources.items()})
    # A server that exports no such metric (llama-server: no histograms) gets no column.
    view = [col for col in _SERVER_VIEW if any(col[0](m) is not None for _, m in measured)]
    cells = [
        [row.display_title, fmt_num(row.ttft_ms_p50), fmt_num(row.decode_ms_per_token_p50)]
        + [fmt_num(get(m), digits) for get, _label, digits in view]
        for row, m in measured
    ]
    labels = ["level", "labkit TTFT p50", "labkit ms/tok p50"]
    labels += [label for _, label, _ in view]
    return [
        Para(
            "The server's own metrics over each level (scraped from its /metrics, stored in "
            "server-metrics-<provider>.jsonl): requests running and waiting in the server, "
            "its KV-cache use, and its TTFT and inter-token latency from histogram bucket "
            "deltas across the level, beside labkit's client-side figures. Read from "
            + (", ".join(sources) or "no known metric")
            + ".",
            "note",
        ),
        Table(labels, cells, set(range(1, len(labels)))),
    ]


def _load_section(run: RunData) -> list[Block]:
    """One table per provider × load experiment: a row per level."""
    found = load_rows(run.lab)
    if not found:
        return []
    blocks: list[Block] = [
        Heading("Load levels"),
        Para(
            "Per level: requests ok and failed, the achieved request rate (starts per second; "
            "compare with the target of a rate level), mean requests in flight, output "
            "tokens/s of all streams together, client TTFT and decode percentiles (ms), the "
            "wait inside labkit before sending (queue, never part of TTFT) and labkit's "
            "event-loop lag. A level marked client-bound has timings that include labkit's "
            "own delay.",
            "note",
        ),
    ]
    for provider, experiment, rows in found:
        blocks.append(Heading(f"{provider} · {experiment}", 3))
        view = _LOAD_VIEW + (_SLO_VIEW if any(row.slo for row in rows) else [])
        view = view + (_HOSTS_VIEW if any(row.hosts for row in rows) else [])
        cells = [
            [row.display_title + (" — client-bound" if row.client_bound else "")]
            + [fmt_num(get(row), digits) for get, _label, digits in view]
            for row in rows
        ]
        numeric = set(range(1, len(view) + 1))
        blocks.append(Table(["level"] + [label for _, label, _ in view], cells, numeric))
        clock = "".join(clock_note(r.title, r.clock_uncertainty_ms, r.ttft_ms_p50) for r in rows)
        if clock:
            blocks.append(Para(clock.strip(), "note"))
        blocks += _server_table(rows)
    charts = (load_curves_chart(run.lab), cache_hits_chart(run.lab))
    return blocks + [ChartBlock(c) for c in charts if c is not None]


def _run_section(run: RunData) -> list[Block]:
    m = run.manifest
    df = run.records
    facts = [
        ("run id", m.get("run_id") or (df["run_id"].iloc[0] if len(df) else run.run_dir.name)),
        ("name", m.get("name")),
        ("status", m.get("status")),
        ("started", m.get("started_at")),
        ("ended", m.get("ended_at")),
        ("records", len(df)),
        ("labkit", m.get("labkit_version")),
        ("config", m.get("config_path")),
    ]
    host = m.get("host")
    if isinstance(host, dict):
        facts.append(("host", ", ".join(f"{k}={v}" for k, v in host.items() if v is not None)))
    blocks: list[Block] = [
        Heading("Run"),
        Table(["", ""], [[k, str(v)] for k, v in facts if v not in (None, "")]),
    ]
    providers = m.get("providers")
    if isinstance(providers, dict) and providers:
        rows = []
        for pid, info in providers.items():
            info = info if isinstance(info, dict) else {}
            server = info.get("server")
            server_text = (
                ", ".join(f"{k}={v}" for k, v in server.items() if isinstance(v, str | int | float))
                if isinstance(server, dict)
                else ""
            )
            rows.append(
                [
                    str(pid),
                    str(info.get("kind") or ""),
                    str(info.get("model") or ""),
                    str(info.get("status") or ""),
                    str(info.get("reason") or info.get("first_error") or ""),
                    server_text[:200],
                ]
            )
        blocks.append(Table(["provider", "kind", "model", "status", "reason", "server"], rows))
    return blocks


_SUMMARY_VIEW: list[tuple[str, str]] = [
    ("provider", "provider"),
    ("experiment", "experiment"),
    ("model", "model"),
    ("records", "records"),
    ("warmup_excluded", "warm-up excl."),
    ("errors", "errors"),
    ("n", "n"),
    ("ttft_ms.p50", "TTFT p50"),
    ("ttft_ms.p90", "TTFT p90"),
    ("ttft_ms.p99", "TTFT p99"),
    ("decode_ms_per_token.p50", "decode ms/tok p50"),
    ("decode_ms_per_token.p90", "decode ms/tok p90"),
    ("e2e_ms.p50", "e2e p50"),
    ("e2e_ms.p90", "e2e p90"),
    ("output_tokens_per_s.p50", "tok/s p50"),
]


_COUNT_COLUMNS = {"records", "warmup_excluded", "errors", "n"}


def _summary_section(summary: pd.DataFrame) -> list[Block]:
    blocks: list[Block] = [
        Heading("Statistics per provider × experiment × model"),
        Para(
            "Milliseconds unless stated. Warm-up and failed requests are excluded from the "
            "percentiles and counted in their own columns; n is what remains. Mean, min, max "
            "and p99 of every metric are in summary.csv / summary.parquet.",
            "note",
        ),
    ]
    if summary.empty:
        blocks.append(Para("No records: no statistics.", "warn"))
        return blocks
    rows = []
    for _, r in summary.iterrows():
        cells = []
        for col, _label in _SUMMARY_VIEW:
            v = r[col]
            if col in ("provider", "experiment", "model"):
                cells.append(str(v))
            else:
                cells.append(fmt_num(v, 0 if col in _COUNT_COLUMNS else None))
        rows.append(cells)
    numeric = set(range(3, len(_SUMMARY_VIEW)))
    blocks.append(Table([label for _, label in _SUMMARY_VIEW], rows, numeric))
    return blocks


def _errors_section(df: pd.DataFrame) -> list[Block]:
    blocks: list[Block] = [Heading("Errors")]
    failed = df[~df["ok"].astype(bool)] if len(df) else df
    if failed.empty:
        blocks.append(Para("No request failed."))
        return blocks
    failed = failed.assign(
        _kind=failed["error.kind"].fillna("unknown"),
        _status=failed["error.status"].map(lambda s: "" if pd.isna(s) else str(int(s))),
    )
    rows = []
    for (provider, exp, kind, status), grp in failed.groupby(
        ["provider", "experiment", "_kind", "_status"], sort=True, dropna=False
    ):
        messages = grp["error.message"].dropna()
        example = str(messages.iloc[0])[:160] if len(messages) else ""
        warm = int(grp["warmup"].astype(bool).sum())
        rows.append(
            [str(provider), str(exp), str(kind), str(status), str(len(grp)), str(warm), example]
        )
    blocks.append(
        Table(
            [
                "provider",
                "experiment",
                "kind",
                "status",
                "count",
                "of which warm-up",
                "first message",
            ],
            rows,
            {4, 5},
        )
    )
    return blocks


_SPLIT_LABELS: dict[str, str] = {
    "provider": "provider",
    "experiment": "experiment",
    "provider_kind": "kind",
    "model": "model",
    "n": "n",
    "provider.prefill_ms": "provider prefill",
    "provider.decode_ms_per_token": "provider decode ms/tok",
    "provider.processing_ms": "provider processing",
    "client.ttft_ms": "client TTFT",
    "client.decode_ms_per_token": "client decode ms/tok",
    "network.ttft_minus_prefill_ms": "network + front end (TTFT − prefill)",
    "network.decode_diff_ms_per_token": "network + front end decode ms/tok",
    "client.connect_ms": "connect",
    "client.tls_ms": "TLS",
    "app.prepare_ms": "app prepare",
    "app.parse_cpu_ms": "app parse CPU",
    "app.client_path": "client path",
    "app.sdk_minus_wire_e2e_ms": "SDK − wire e2e (paired)",
}


_SPLIT_TEXT = ("provider", "experiment", "provider_kind", "model", "app.client_path")


def _split_section(split: pd.DataFrame) -> list[Block]:
    blocks: list[Block] = [
        Heading("Provider vs client: whose time is it?"),
        Para(
            "Medians over successful, non-warm-up requests, in ms, one row per experiment and "
            "client path (so each row compares like with like). Provider columns are what "
            "the provider reported about itself (provider_timings.*); client columns what "
            "labkit observed (client.*); network + front end is the per-request difference "
            "client.ttft_ms − provider_timings.prefill_ms (and the same for decode). "
            "Application time (app.prepare_ms, app.parse_cpu_ms, SDK − wire) is off the wire "
            "and not part of TTFT; SDK − wire is the median of paired differences (the same "
            "planned request, same experiment and trial, sent both ways). 'not reported' means "
            "the provider sends nothing about itself; 'not derivable' that the difference "
            "needs it; 'not observed' that the client saw no value (e.g. connect on a reused "
            "connection).",
            "note",
        ),
    ]
    if split.empty:
        blocks.append(Para("No records: no split.", "warn"))
        return blocks
    # Two tables of one row each per provider × experiment × path, so each fits the page.
    for title, columns in _SPLIT_TABLES:
        cells = [
            [
                str(r[c]) if c in _SPLIT_TEXT else fmt_num(r[c], 0 if c == "n" else None)
                for c in columns
            ]
            for _, r in split.iterrows()
        ]
        numeric = {i for i, c in enumerate(columns) if c not in _SPLIT_TEXT}
        blocks += [Heading(title, 3), Table([_SPLIT_LABELS[c] for c in columns], cells, numeric)]
    return blocks


_SPLIT_KEYS = ["provider", "experiment", "app.client_path", "n"]
_SPLIT_TABLES: list[tuple[str, list[str]]] = [
    (
        "What the provider reported and what the client observed",
        [
            *_SPLIT_KEYS,
            "provider.prefill_ms",
            "client.ttft_ms",
            "provider.decode_ms_per_token",
            "client.decode_ms_per_token",
            "provider.processing_ms",
        ],
    ),
    (
        "The network's and front end's share, and labkit's own time",
        [
            *_SPLIT_KEYS,
            "network.ttft_minus_prefill_ms",
            "network.decode_diff_ms_per_token",
            "client.connect_ms",
            "client.tls_ms",
            "app.prepare_ms",
            "app.parse_cpu_ms",
            "app.sdk_minus_wire_e2e_ms",
        ],
    ),
]


def _scraped(run: RunData) -> dict[str, list[ServerMetricsSample]]:
    """Each provider's scrapes of its server's /metrics, from the run folder."""
    df = run.records
    providers = {str(p) for p in df["provider"].dropna().unique()} if len(df) else set()
    found = {p: read_server_metrics(run.run_dir, p) for p in sorted(providers)}
    return {p: samples for p, samples in found.items() if samples}


def _local_count_note(provider: str, ok: pd.DataFrame) -> list[str]:
    """The flag for labkit's prompt count disagreeing with usage beyond the chat framing."""
    if "usage.input_tokens_local_diff" not in ok.columns:
        return []
    diffs = ok["usage.input_tokens_local_diff"].dropna()
    off = diffs[diffs != 0]
    if off.empty:
        return []
    return [
        f"{provider}: labkit's local prompt count and the provider's usage disagree beyond the "
        f"chat framing in {len(off)} of {len(diffs)} requests (by {int(off.min()):+d} to "
        f"{int(off.max()):+d} tokens, usage.input_tokens_local_diff): the model → encoding "
        "map or the framing is off for this model."
    ]


def _title(run: RunData) -> str:
    m = run.manifest
    name = m.get("name") or run.run_dir.name
    rid = m.get("run_id")
    return f"labkit report: {name}" + (f" ({rid})" if rid and rid != name else "")


def build_blocks(run: RunData) -> tuple[str, list[Block], pd.DataFrame]:
    """The report as a title, a list of blocks, and the summary frame it shows."""
    df = run.records
    summary = summarize(df)
    split = provider_client_split(df) if len(df) else pd.DataFrame(columns=SPLIT_COLUMNS)
    title = _title(run)
    blocks: list[Block] = [Heading(title, 1)]
    blocks += _lab_section(run)
    notes = missing_notes(run, summary)
    blocks.append(Heading("What is missing"))
    if notes:
        blocks.append(Bullets(notes, "warn"))
    else:
        blocks.append(Para("Nothing: every provider answered and reported what it can."))
    blocks += _run_section(run)
    queue = server_queue_chart(_scraped(run))  # only where a server's /metrics was scraped
    blocks += [Heading("The server's queue", 3), ChartBlock(queue)] if queue else []
    blocks += _load_section(run)
    blocks += conversation_section(run.lab)
    blocks += sweep_section(run)
    blocks += later_stats_section(run)
    blocks += _summary_section(summary)
    blocks += [ChartBlock(c) for c in (request_distributions(df),) if c is not None]
    if len(df):
        blocks += _errors_section(df)
    blocks += _split_section(split)
    blocks += [ChartBlock(c) for c in (client_vs_server_chart(df),) if c is not None]
    return title, blocks, summary


def _summary_for_files(summary: pd.DataFrame) -> pd.DataFrame:
    out = summary.copy()
    for col in ("provider", "experiment", "model", "error_kinds"):
        out[col] = out[col].astype(object).where(out[col].notna(), None)
    return out


def write_report(run_dir: Path | str) -> ReportPaths:
    """Regenerate the report of one run folder; returns where the files were written."""
    run = load_run(run_dir)
    title, blocks, summary = build_blocks(run)
    folder = run.run_dir
    paths = ReportPaths(
        md=folder / "report.md",
        html=folder / "report.html",
        csv=folder / "summary.csv",
        parquet=folder / "summary.parquet",
        files=folder / "report_files",
    )
    try:
        paths.md.write_text(
            for_people(render_markdown(blocks, folder, paths.files.name)), encoding="utf-8"
        )
        paths.html.write_text(html_page(blocks, title), encoding="utf-8")
        table = scrub_frame(_summary_for_files(summary))
        table.to_csv(paths.csv, index=False)
        table.to_parquet(paths.parquet, index=False)
    except OSError as exc:
        raise RunError(f"cannot write the report into {folder}: {exc}") from exc
    return paths
