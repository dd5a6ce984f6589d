"""`write_report`: one run folder → report.md, report.html, summary.csv, summary.parquet.

Section order: the lab's answers first (from ``lab.json``), each with its chart, then what
is missing from the run, the run and its providers, each experiment kind's own section
(`labkit.report.kinds`), the statistics, errors and the provider/client split, each
section with its own picture. Every gap is said in words: a provider that failed every
request, a provider that reports no usage or no timings of its own, a truncated
``records.jsonl``, a picture that could not be drawn.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from labkit.analysis.cost import CostTally
from labkit.analysis.requests import FIELDS as REQUEST_FIELDS
from labkit.analysis.selfcheck import client_bound_advice
from labkit.errors import RunError
from labkit.figures import Percentiles, Quantile, RequestStats
from labkit.figures.observatory import CostFigures
from labkit.manifest import ReadPathManifest
from labkit.provider_stats import read_later_stats
from labkit.records import LabAnswer
from labkit.report.charts import Chart, TokenSpans
from labkit.report.columnar import Sidecar, sidecar
from labkit.report.cost import COST_REPORT_COLUMNS, cost_section, cost_tally, tally_figures
from labkit.report.kinds import kind_sections, lab_questions, question_charts
from labkit.report.later import later_stats_frame, later_stats_section
from labkit.report.load import (
    RunData,
    ensure_columns,
    load_run,
    repeated_note,
    run_folder,
    run_meta,
    skipped_note,
)
from labkit.report.render import (
    Block,
    Bullets,
    ChartBlock,
    Heading,
    Para,
    Table,
    TokenSpansBlock,
    html_page,
    render_markdown,
)
from labkit.report.run_charts import (
    ServerPoints,
    client_vs_server_chart,
    client_vs_server_points,
    request_distribution_values,
    request_distributions,
    server_queue_chart,
)
from labkit.report.split import NOT_REPORTED, split_section
from labkit.report.stats import run_stats, stats_frame, where
from labkit.safefiles import write_new_file
from labkit.scrub import for_people, scrub_frame
from labkit.server_metrics import ServerMetricsSample, read_server_metrics
from labkit.wording import CLIENT_BOUND_MARK, cell, client_bound_line

__all__ = [
    "REPORT_COLUMNS",
    "Parts",
    "ProviderFacts",
    "ReportPaths",
    "asked_experiments",
    "build_blocks",
    "load_report_run",
    "missing_notes",
    "notes_of_facts",
    "provider_facts",
    "provider_notes",
    "read_parts",
    "write_report",
]


#: The records frame's columns the report reads (with each record's identity and tags): a
#: large run is read with these only. The request statistics' own fields come from
#: `labkit.analysis.requests.FIELDS`, less those of per-event arrays: read back for the
#: few records that need them (`labkit.report.stats`), not parsed for every record.
REPORT_COLUMNS: frozenset[str] = frozenset(
    {
        "experiment",
        "provider",
        "model",
        *(f"error.{name}" for name in ("kind", "message", "status")),
    }
    | {*REQUEST_FIELDS} - {"client.n_events", "client.stamp_lateness_ms"}  # read back
    | {
        "usage.output_tokens_source",
        "usage.input_tokens_local_diff",
        "client.decode_ms_per_token",
        "client.e2e_ms",
        "client.output_tokens_per_s",
    }
    | COST_REPORT_COLUMNS
)


@dataclass(frozen=True)
class ReportPaths:
    """Where `write_report` wrote its outputs."""

    md: Path
    html: Path
    csv: Path
    parquet: Path
    files: Path


# --- What is missing ---------------------------------------------------------------------


#: The columns `missing_notes` reads.
_NOTE_COLUMNS = (
    "provider",
    "ok",
    "warmup",
    "error.kind",
    "error.message",
    "usage.output_tokens",
    "usage.output_tokens_source",
    "usage.input_tokens",
    "usage.input_tokens_local_diff",
    "provider_timings.prefill_ms",
    "provider_timings.decode_ms_per_token",
)

#: The columns the request charts read.
_CHART_COLUMNS = (
    "provider",
    "experiment",
    "ok",
    "warmup",
    "client.ttft_ms",
    "client.decode_ms_per_token",
    "client.e2e_ms",
    "provider_timings.prefill_ms",
    "provider_timings.decode_ms_per_token",
)


#: The columns the errors section reads.
_ERROR_COLUMNS = (
    "provider",
    "experiment",
    "ok",
    "warmup",
    "error.kind",
    "error.status",
    "error.message",
)


def _only(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """The frame's `columns` (those it has): what a section filters and groups, not the
    whole frame, which a large run cannot afford to copy."""
    return df[[c for c in columns if c in df.columns]]


def missing_notes(run: RunData, stats: list[RequestStats]) -> list[str]:
    """Plain sentences on everything the run lacks (empty when nothing is missing), the
    groups the self-check flagged client-bound (`stats`, with its reason) among them, and
    one line of advice for them (`client_bound_advice`)."""
    notes = _run_notes(run, stats)
    if not len(run.records):
        notes.append("records.jsonl holds no records: there is nothing to measure.")
        return notes
    return notes + provider_notes(run.records, run.manifest)


def _run_notes(run: RunData, stats: list[RequestStats]) -> list[str]:
    """`missing_notes` of the run as a whole: its problems, the client-bound groups, the
    manifest's word on each provider."""
    notes = list(run.problems)
    notes += [client_bound_line(g) for g in stats if g.client_bound]
    advice = client_bound_advice(stats, run.manifest)
    notes += [f"Client-bound advice: {advice}"] if advice is not None else []
    status = run.manifest.get("status")
    if status and status != "completed":
        notes.append(f"The run's status is '{status}': results may be partial.")
    unfinished = run.manifest.get("unfinished")
    for pid, why in unfinished.items() if isinstance(unfinished, dict) else []:
        notes.append(f"Provider {pid} did not finish its plan: {why}.")
    providers = run.manifest.get("providers")
    if isinstance(providers, dict):
        for pid, info in providers.items():
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
    return notes


@dataclass
class ProviderFacts:
    """What the notes on one provider read off its records, counted so that the facts of
    parts of its records join into those of all of them (`add`)."""

    measured: int = 0
    ok: int = 0
    error_kinds: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Each error kind of the measured requests (missing: "unknown"): (count, first place)."""
    first_error: tuple[int, str] | None = None
    """The first measured request's error message that there is: (its place, the message)."""
    output_tokens: int = 0
    local_output: int = 0
    input_tokens: int = 0
    diffs: int = 0
    off: int = 0
    off_min: float = math.inf
    off_max: float = -math.inf
    own_timings: int = 0

    def add(self, other: ProviderFacts) -> None:
        """Join the facts of another part of the provider's records."""
        self.measured += other.measured
        self.ok += other.ok
        for kind, (n, at) in other.error_kinds.items():
            was = self.error_kinds.get(kind)
            self.error_kinds[kind] = (n, at) if was is None else (was[0] + n, min(was[1], at))
        if other.first_error is not None and (
            self.first_error is None or other.first_error[0] < self.first_error[0]
        ):
            self.first_error = other.first_error
        self.output_tokens += other.output_tokens
        self.local_output += other.local_output
        self.input_tokens += other.input_tokens
        self.diffs += other.diffs
        self.off += other.off
        self.off_min = min(self.off_min, other.off_min)
        self.off_max = max(self.off_max, other.off_max)
        self.own_timings += other.own_timings


def provider_facts(records: pd.DataFrame) -> dict[str, ProviderFacts]:
    """Each provider's `ProviderFacts` over `records` (a run's, or a part of them)."""
    df = ensure_columns(
        _only(records, (*_NOTE_COLUMNS, "file_offset")),
        [
            "usage.output_tokens",
            "usage.input_tokens",
            "usage.input_tokens_local_diff",
            "provider_timings.prefill_ms",
            "provider_timings.decode_ms_per_token",
        ],
    )
    if "usage.output_tokens_source" not in df.columns:
        df = df.assign(**{"usage.output_tokens_source": None})
    if "file_offset" not in df.columns:  # a frame built by hand: its rows' order
        df = df.assign(file_offset=np.arange(len(df)))
    out: dict[str, ProviderFacts] = {}
    for provider, rows in df.groupby("provider", sort=True, dropna=False):
        measured = rows[~rows["warmup"].astype(bool)]
        ok = measured[measured["ok"].astype(bool)]
        facts = ProviderFacts(measured=len(measured), ok=len(ok))
        places = measured["file_offset"].to_numpy()
        kinds = measured["error.kind"].fillna("unknown").to_numpy(dtype=object)
        for kind in dict.fromkeys(kinds.tolist()):
            here = kinds == kind
            facts.error_kinds[str(kind)] = (int(here.sum()), int(places[here].min()))
        messages = measured["error.message"].notna().to_numpy()
        if messages.any():
            at = int(np.flatnonzero(messages)[np.argmin(places[messages])])
            facts.first_error = (int(places[at]), str(measured["error.message"].iloc[at]))
        facts.output_tokens = int(ok["usage.output_tokens"].notna().sum())
        facts.local_output = int((ok["usage.output_tokens_source"] == "local").sum())
        facts.input_tokens = int(ok["usage.input_tokens"].notna().sum())
        diffs = ok["usage.input_tokens_local_diff"].dropna()
        off = diffs[diffs != 0]
        facts.diffs, facts.off = len(diffs), len(off)
        if len(off):
            facts.off_min, facts.off_max = float(off.min()), float(off.max())
        facts.own_timings = int(
            ok["provider_timings.prefill_ms"].notna().sum()
            + ok["provider_timings.decode_ms_per_token"].notna().sum()
        )
        out[str(provider)] = facts
    return out


def provider_notes(records: pd.DataFrame, manifest: Mapping[str, Any]) -> list[str]:
    """`missing_notes` of each provider's records (`notes_of_facts` of `provider_facts`)."""
    return notes_of_facts(provider_facts(records), manifest)


def notes_of_facts(facts: Mapping[str, ProviderFacts], manifest: Mapping[str, Any]) -> list[str]:
    """`missing_notes` of each provider, from its records' facts (by provider, sorted)."""
    timings_promised: set[str] = set()
    providers = manifest.get("providers")
    for pid, info in providers.items() if isinstance(providers, dict) else []:
        if isinstance(info, dict) and info.get("reports_server_timings") is True:
            timings_promised.add(str(pid))
    notes: list[str] = []
    for provider in sorted(facts):
        f = facts[provider]
        if f.measured == 0:
            notes.append(f"{provider}: only warm-up requests were recorded; no statistics.")
            continue
        if f.ok == 0:
            kinds = sorted(f.error_kinds.items(), key=lambda item: (-item[1][0], item[1][1]))
            kind_text = ", ".join(f"{k} × {n}" for k, (n, _) in kinds)
            example = f" First error: {f.first_error[1]}" if f.first_error else ""
            notes.append(
                f"{provider}: every request failed ({f.measured} of {f.measured}: "
                f"{kind_text}); no latency statistics.{example}"
            )
            continue
        if f.ok == 1:
            notes.append(
                f"{provider}: only 1 successful request; every percentile is that one value."
            )
        elif f.ok < 10:
            notes.append(f"{provider}: only {f.ok} successful requests; percentiles are rough.")
        if f.output_tokens == 0:
            notes.append(
                f"{provider}: reported no token usage: output tokens, decode ms/token and "
                "tokens/s are not available."
            )
        elif f.local_output:
            notes.append(
                f"{provider}: sent no usage in {f.local_output} of {f.ok} requests; their "
                "output tokens were counted locally by labkit, not by the provider."
            )
        if f.input_tokens == 0 and f.output_tokens:
            notes.append(f"{provider}: reported no input token count.")
        if f.off:
            notes.append(
                f"{provider}: labkit's local prompt count and the provider's usage disagree "
                f"beyond the chat framing in {f.off} of {f.diffs} requests (by "
                f"{int(f.off_min):+d} to {int(f.off_max):+d} tokens, "
                "usage.input_tokens_local_diff): the model → encoding map or the framing is "
                "off for this model."
            )
        if f.own_timings == 0:
            if provider in timings_promised:
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


# --- Sections ----------------------------------------------------------------------------


def _answer_line(ans: LabAnswer) -> str:
    who = ans.provider + (f" ({ans.model})" if ans.model else "")
    flag = "" if ans.status == "ok" else f" [{ans.status}]"
    return f"{who}{flag}: {ans.answer}"


def asked_experiments(manifest: Mapping[str, Any]) -> list[str]:
    """The experiments the run's config asked for, by name (`kind`, `kind#1` where a kind
    repeats, as the runner names them), in config order; empty where the manifest holds no
    config (a folder from before it was recorded): then only answers are shown."""
    config = manifest.get("config")
    entries = config.get("experiments") if isinstance(config, dict) else None
    names: list[str] = []
    seen: dict[str, int] = {}
    for entry in entries if isinstance(entries, list) else []:
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if not isinstance(kind, str):
            continue
        n = seen.get(kind, 0)
        seen[kind] = n + 1
        names.append(kind if n == 0 else f"{kind}#{n}")
    return names


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
    asked = asked_experiments(run.manifest)
    shown = set(by_exp) | set(asked)
    questions = [q for q in lab_questions() if q in shown]
    order = questions + sorted(shown - set(questions))
    pictures = question_charts(run.lab)
    for i, exp in enumerate(order, start=1):
        answers = by_exp.get(exp)
        if not answers:  # asked for by the config, and no answer came
            blocks.append(Heading(f"{i}. {exp}", 3))
            blocks.append(
                Para(f"The config asked for {exp}, but the run produced no answer for it.", "note")
            )
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


def _read_path_text(raw: object) -> str | None:
    """The manifest's read path in a few words (`ReadPathManifest.describe`); None where
    the manifest has none (written before it was recorded), as it is where unreadable."""
    if raw is None:
        return None
    try:
        return ReadPathManifest.model_validate(raw).describe()
    except ValueError:
        return f"unreadable: {str(raw)[:80]}"


def _run_section(run: RunData, parts: Parts | None = None) -> list[Block]:
    m = run.manifest
    df = run.records
    n = len(df) if parts is None else parts.records
    if parts is not None:
        first_id = parts.run_id if n else run.run_dir.name
    else:
        first_id = df["run_id"].iloc[0] if len(df) else run.run_dir.name
    facts = [
        ("run id", m.get("run_id") or first_id),
        ("name", m.get("name")),
        ("status", m.get("status")),
        ("started", m.get("started_at")),
        ("ended", m.get("ended_at")),
        ("records", n),
        ("labkit", m.get("labkit_version")),
        ("read path", _read_path_text(m.get("read_path"))),
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


_VIEW: list[tuple[str, str]] = [
    ("ttft_ms.p50", "TTFT p50"),
    ("ttft_ms.p90", "TTFT p90"),
    ("ttft_ms.p99", "TTFT p99"),
    ("decode_ms_per_token.p50", "decode ms/tok p50"),
    ("e2e_ms.p50", "e2e p50"),
    ("output_tokens_per_s.p50", "tok/s p50"),
]


def _quantile(s: RequestStats, name: str) -> Quantile:
    metric, q = name.split(".")
    percentiles = getattr(s, metric)
    assert isinstance(percentiles, Percentiles)
    value = getattr(percentiles, q)
    assert isinstance(value, Quantile)
    return value


def _stats_section(stats: list[RequestStats]) -> list[Block]:
    """The statistics table: a row per provider × experiment × model × client path."""
    blocks: list[Block] = [
        Heading("Statistics per provider × experiment × model"),
        Para(
            "Milliseconds unless stated; each percentile with its 95% distribution-free "
            "interval in brackets, or the number of requests it needs. Warm-up and failed requests "
            "are excluded and counted in their own columns; n is what remains. A load "
            "experiment's row pools its levels (each level has its own row under Load "
            f"levels). {CLIENT_BOUND_MARK}: labkit's self-check found its stamps late (see "
            "What is missing). All percentiles are in summary.csv / summary.parquet.",
            "note",
        ),
    ]
    if not stats:
        blocks.append(Para("No records: no statistics.", "warn"))
        return blocks
    labels = ["provider", "experiment", "model", "records", "warm-up excl.", "errors", "n"]
    labels += [label for _, label in _VIEW]
    rows = [
        [s.provider, where(s), s.model or "", str(s.records), str(s.warmup_excluded)]
        + [str(s.errors), str(s.n)]
        + [cell(_quantile(s, name)) for name, _ in _VIEW]
        for s in stats
    ]
    blocks.append(Table(labels, rows, set(range(3, len(labels)))))
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


def _scraped(run: RunData, parts: Parts | None = None) -> dict[str, list[ServerMetricsSample]]:
    """Each provider's scrapes of its server's /metrics, from the run folder."""
    df = run.records
    if parts is not None:
        providers = set(parts.providers)
    else:
        providers = {str(p) for p in df["provider"].dropna().unique()} if len(df) else set()
    found = {p: read_server_metrics(run.run_dir, p) for p in sorted(providers)}
    return {p: samples for p, samples in found.items() if samples}


def _title(run: RunData) -> str:
    m = run.manifest
    name = m.get("name") or run.run_dir.name
    rid = m.get("run_id")
    return f"labkit report: {name}" + (f" ({rid})" if rid and rid != name else "")


@dataclass
class Parts:
    """What the report reads off a run's records, read part by part from its columnar
    sidecar (`labkit.report.columnar`) so that the whole run is never held: each figure is
    computed by the same function as from a whole frame, over a part that holds all of its
    records (a group of the statistics, a provider's notes, a series' points); what spans
    parts (the failed requests, the points of the charts) is joined."""

    records: int
    run_id: Any
    providers: list[str]
    stats: list[RequestStats]
    notes: list[str]
    distributions: list[dict[str, Any]]
    server_points: ServerPoints
    failed: pd.DataFrame
    later: pd.DataFrame
    costs: list[CostFigures]


def read_parts(run: RunData, side: Sidecar) -> Parts:
    """`Parts` of `run` (its records frame left empty) from its sidecar, a provider's
    records at a time (their notes), each provider × experiment's in turn (the rest); a
    priced run's cost figures taken from the same parts (`cost_tally`)."""
    costs = cost_tally(run)
    try:
        parts = _read_parts(run, side, costs)
    except BaseException:
        if costs is not None:
            costs.close()  # its files, now
        raise
    return parts


def _read_parts(run: RunData, side: Sidecar, costs: CostTally | None) -> Parts:
    stats: list[RequestStats] = []
    distributions: list[dict[str, Any]] = []
    points = ServerPoints()
    failed: list[pd.DataFrame] = []
    later: list[pd.DataFrame] = []
    first: tuple[int, Any] | None = None
    records = 0
    providers = sorted({g.provider for g in side.groups})
    has_later = any(read_later_stats(run.run_dir, p) for p in providers)
    facts: dict[str, ProviderFacts] = {}
    for _, frame in side.frames(2, REPORT_COLUMNS):
        records += len(frame)
        if costs is not None:  # priced as each part is read: no second read of the run
            costs.add(frame, frame["file_offset"].to_numpy())
        if len(frame) and (first is None or frame["file_offset"].iloc[0] < first[0]):
            first = (int(frame["file_offset"].iloc[0]), frame["run_id"].iloc[0])
        for provider, found in provider_facts(frame).items():
            facts.setdefault(provider, ProviderFacts()).add(found)
        part = RunData(run.run_dir, frame, run.manifest, None)
        stats += run_stats(None, part)
        charted = _only(frame, _CHART_COLUMNS)
        distributions += request_distribution_values(charted)
        points.add(client_vs_server_points(charted))
        failed.append(_only(frame[~frame["ok"].astype(bool)], _ERROR_COLUMNS))
        if has_later:
            later.append(later_stats_frame(part))
        del frame, part, charted  # before the next part is read
    notes = notes_of_facts(facts, run.manifest)
    run_id = first[1] if first is not None else None
    if run_id is None or pd.isna(run_id):
        run_id = str(run.manifest.get("run_id", run.run_dir.name))
    joined_later = pd.concat(later, ignore_index=True) if later else pd.DataFrame()
    return Parts(
        records,
        run_id,
        providers,
        stats,
        notes,
        distributions,
        points,
        pd.concat(failed, ignore_index=True),
        joined_later,
        tally_figures(costs, run, side),
    )


def build_blocks(
    run: RunData, parts: Parts | None = None
) -> tuple[str, list[Block], list[RequestStats]]:
    """The report as a title, a list of blocks, and the request statistics it shows
    (`parts`: what the report reads off the records, when `run.records` is left empty
    for a large run read part by part)."""
    df = run.records
    if parts is None or (run.lab is not None and run.lab.requests is not None):
        stats = run_stats(run.lab, run)
    else:
        stats = parts.stats
    title = _title(run)
    blocks: list[Block] = [Heading(title, 1)]
    blocks += _lab_section(run)
    if parts is None:
        notes = missing_notes(run, stats)
    else:
        notes = _run_notes(run, stats)
        if not parts.records:
            notes.append("records.jsonl holds no records: there is nothing to measure.")
        notes += parts.notes
    blocks.append(Heading("What is missing"))
    if notes:
        blocks.append(Bullets(notes, "warn"))
    else:
        blocks.append(Para("Nothing: every provider answered and reported what it can."))
    blocks += _run_section(run, parts)
    queue = server_queue_chart(_scraped(run, parts))  # only where a server's /metrics was scraped
    blocks += [Heading("The server's queue", 3), ChartBlock(queue)] if queue else []
    blocks += kind_sections(run, "after_run")
    blocks += later_stats_section(run, None if parts is None else parts.later)
    blocks += _stats_section(stats)
    blocks += cost_section(run, None if parts is None else parts.costs)  # where prices given
    charted = _only(df, _CHART_COLUMNS)
    distributions = request_distributions(charted, None if parts is None else parts.distributions)
    blocks += [ChartBlock(c) for c in (distributions,) if c is not None]
    if parts is None and len(df):
        blocks += _errors_section(df)
    elif parts is not None and parts.records:
        blocks += _errors_section(parts.failed)
    blocks += split_section(stats)
    server = client_vs_server_chart(charted, None if parts is None else parts.server_points)
    blocks += [ChartBlock(c) for c in (server,) if c is not None]
    blocks += kind_sections(run, "after_split")
    return title, blocks, stats


def load_report_run(run_dir: Path | str) -> tuple[RunData, Parts | None]:
    """The run as the report reads it: whole (`load_run` of `REPORT_COLUMNS`), or, a run
    with a columnar sidecar (`labkit.report.columnar.sidecar`: a large one), its manifest
    and answers with an empty records frame, and its `Parts` read from the sidecar."""
    folder = run_folder(run_dir)
    side = sidecar(folder)
    if side is None:
        return load_run(folder, REPORT_COLUMNS), None
    problems = skipped_note(side.skipped)
    if side.repeated:
        problems.append(repeated_note(side.repeated, side.repeated_requests))
    manifest, lab = run_meta(folder, problems)
    empty = side.frame([], REPORT_COLUMNS)
    run = RunData(folder, empty, manifest, lab, len(side.skipped), problems, side.repeated)
    return run, read_parts(run, side)


def write_report(run_dir: Path | str) -> ReportPaths:
    """Regenerate the report of one run folder; returns where the files were written."""
    run, parts = load_report_run(run_dir)
    title, blocks, stats = build_blocks(run, parts)
    folder = run.run_dir
    del run, parts  # the records are in the blocks' figures now: their memory goes to the drawing
    gc.collect()
    paths = ReportPaths(
        md=folder / "report.md",
        html=folder / "report.html",
        csv=folder / "summary.csv",
        parquet=folder / "summary.parquet",
        files=folder / "report_files",
    )
    try:
        # Each file replaced, never written through a link (`write_new_file`).
        write_new_file(paths.md, for_people(render_markdown(blocks, folder, paths.files.name)))
        write_new_file(paths.html, html_page(blocks, title))
        table = scrub_frame(stats_frame(stats))
        write_new_file(paths.csv, table.to_csv(index=False))
        write_new_file(paths.parquet, table.to_parquet(index=False))
    except OSError as exc:
        raise RunError(f"cannot write the report into {folder}: {exc}") from exc
    return paths
