"""Every quantity shown in more than one place has one value: the report's tables (report.md
and report.html), the run summary, lab.json, the answers and the charts' data agree, for a
provider that reports its queue and prefill and one that reports only its own TTFT."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.requests import request_stats
from labkit.analysis.stats import describe
from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.experiments.single import SingleExperiment, SingleSettings
from labkit.figures import AttributionFigures, Mean, Quantile, RequestStats
from labkit.records import LabResults, RequestRecord
from labkit.report import load_run, write_report
from labkit.report.build import build_blocks
from labkit.report.kinds.attribution import whose_time_chart
from labkit.report.render import Bullets, Table
from labkit.report.split import NOT_DERIVABLE
from labkit.runner.summary import summary_table
from labkit.wording import CLIENT_BOUND_MARK, cell, say
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit

QUEUED = "queued"  # reports provider_timings.queue_ms and prefill_ms
SERVER_TTFT = "server-ttft"  # reports only provider_timings.server_ttft_ms


def _records() -> list[RequestRecord]:
    recs: list[RequestRecord] = []
    for provider in (QUEUED, SERVER_TTFT):
        for experiment in ("attribution", "single"):
            recs.append(make_record(provider=provider, experiment=experiment, warmup=True))
            for i in range(7):
                r = make_record(
                    provider=provider,
                    experiment=experiment,
                    ttft_ms=100.0 + 7 * i,
                    decode_ms_per_token=10.0 + i / 4,
                    tags={"connection": "fresh" if i % 2 == 0 else "reused"},
                )
                r.trial = i
                if provider == QUEUED:
                    r.provider_timings.queue_ms = 3.0 + i
                    r.provider_timings.prefill_ms = 60.0 + 2 * i
                    r.provider_timings.decode_ms_per_token = 9.5
                else:
                    r.provider_timings.server_ttft_ms = 80.0 + i
                recs.append(r)
    return recs


def _lab(recs: list[RequestRecord]) -> LabResults:
    """lab.json as the runner writes it: each answer, and the request statistics."""
    answers = []
    for provider in (QUEUED, SERVER_TTFT):
        mine = [r for r in recs if r.provider == provider]
        attribution = AttributionExperiment(AttributionSettings(paths=["wire"]))
        single = SingleExperiment(SingleSettings(prompts=["hi"]))
        answers.append(
            attribution.analyze(provider, "m", [r for r in mine if r.experiment == "attribution"])
        )
        answers.append(single.analyze(provider, "m", [r for r in mine if r.experiment == "single"]))
    return LabResults(run_id="run-1", answers=answers, requests=request_stats(recs))


def _table(blocks: list[Any], column: str) -> Table:
    (table,) = [b for b in blocks if isinstance(b, Table) and column in b.columns]
    return table


def _row(table: Table, provider: str, experiment: str) -> dict[str, str]:
    for row in table.rows:
        cells = dict(zip(table.columns, row, strict=True))
        if cells["provider"] == provider and cells["experiment"].startswith(experiment):
            return cells
    raise KeyError((provider, experiment))


def _summary_rows(lab: LabResults) -> dict[tuple[str, str], dict[str, str]]:
    table = summary_table(lab)
    columns = [str(c.header) for c in table.columns]
    # the terminal puts an interval on its own line: one cell, two lines
    cells = [[str(v).replace("\n", " ") for v in c._cells] for c in table.columns]
    rows = {}
    for i in range(len(cells[0])):
        row = {name: cells[j][i] for j, name in enumerate(columns)}
        rows[(row["provider"], row["experiment"])] = row
    return rows


def _cell(q: Quantile | Mean | None) -> str:
    return NOT_DERIVABLE if q is None else cell(q)


def test_report_summary_lab_json_answers_and_charts_agree(tmp_path: Path) -> None:
    recs = _records()
    folder = write_run(tmp_path / "run", recs, lab=_lab(recs))
    run = load_run(folder)
    lab = run.lab
    assert lab is not None and lab.requests is not None  # lab.json, read back
    _, blocks, stats = build_blocks(run)
    assert stats == lab.requests  # the report renders lab.json's figures
    paths = write_report(folder)
    md = paths.md.read_text(encoding="utf-8")
    page = paths.html.read_text(encoding="utf-8")
    split_table = _table(blocks, "+ network + front end")
    stats_table = _table(blocks, "TTFT p50")
    summary = _summary_rows(lab)
    chart, _missing = whose_time_chart(lab)
    assert chart is not None
    bars = {(v["provider"], v["part"]): v["ms"] for v in chart.spec["data"]["values"]}
    bar_of = {(v["provider"], v["part"]): v["bar"] for v in chart.spec["data"]["values"]}
    by_key: dict[tuple[str, str], RequestStats] = {(s.provider, s.experiment): s for s in stats}

    for provider in (QUEUED, SERVER_TTFT):
        answer = next(
            a for a in lab.answers if a.provider == provider and a.experiment == "attribution"
        )
        assert isinstance(answer.figures, AttributionFigures)
        split = answer.figures.ttft_split
        group = by_key[(provider, "attribution")]
        # The answer's split and the statistics' split are one figure.
        assert split == group.ttft_split
        # The report's split table renders it, in report.md and report.html alike.
        row = _row(split_table, provider, "attribution")
        assert row["client TTFT (mean)"] == _cell(split.ttft_ms)
        if split.network_front_end_ms is not None:
            assert row["+ network + front end"] == _cell(split.network_front_end_ms)
        else:
            assert row["+ network + front end"].startswith(_cell(split.unsplit_ms))
        assert row["+ provider prefill"].startswith(_cell(split.provider_prefill_ms))
        for text in row.values():
            assert text in md and html.escape(text) in page
        # The chart draws the same means, on the TTFT's bar.
        assert split.provider_prefill_ms is not None
        assert bars[(provider, "provider: prefill")] == split.provider_prefill_ms.value
        assert bar_of[(provider, "provider: prefill")] == f"{provider}: TTFT"
        if split.network_front_end_ms is not None:
            assert bars[(provider, "network and serving front end")] == (
                split.network_front_end_ms.value
            )
        else:
            assert (provider, "network and serving front end") not in bars
        # The answer says the same mean TTFT.
        assert split.ttft_ms is not None and say(split.ttft_ms) in answer.answer
        # The statistics table, the summary and lab.json agree on every group's percentiles.
        for experiment in ("attribution", "single"):
            s = by_key[(provider, experiment)]
            stats_row = _row(stats_table, provider, experiment)
            term = summary[(provider, experiment)]
            assert stats_row["TTFT p50"] == term["TTFT ms\np50 [95% CI]"] == cell(s.ttft_ms.p50)
            assert term["TTFT ms\np90 [95% CI]"] == cell(s.ttft_ms.p90) == "needs ≥ 29"
            assert stats_row["decode ms/tok p50"] == term["decode\nms/tok p50"]
            assert stats_row["n"] == term["ok/err"].split("/")[0] == "7"
            assert term["server prefill\nms p50"] == cell(s.provider_prefill_ms)
            for text in stats_row.values():
                assert text in md
        single = next(a for a in lab.answers if a.provider == provider and a.experiment == "single")
        assert describe(by_key[(provider, "single")].ttft_ms.p50) in single.answer

    queued = by_key[(QUEUED, "attribution")].ttft_split
    assert queued.queue_source == "reported" and queued.network_front_end_ms is not None
    # TTFT − queue − prefill per request: 100+7i − (3+i) − (60+2i) = 37+4i, mean 49
    assert queued.network_front_end_ms.value == 49.0
    only_ttft = by_key[(SERVER_TTFT, "attribution")].ttft_split
    assert only_ttft.prefill_source == "provider_timings.server_ttft_ms"
    assert only_ttft.network_front_end_ms is None and only_ttft.not_derived
    # TTFT − server TTFT per request: 100+7i − (80+i) = 20+6i, mean 38: queue and network
    assert only_ttft.unsplit_ms is not None and only_ttft.unsplit_ms.value == 38.0


def test_an_old_run_without_statistics_in_lab_json_gets_them_from_its_records(
    tmp_path: Path,
) -> None:
    recs = _records()
    lab = _lab(recs)
    old = lab.model_copy(update={"requests": None})
    _, _, stats = build_blocks(load_run(write_run(tmp_path / "old", recs, lab=old)))
    assert stats == lab.requests


def test_a_client_bound_group_is_marked_wherever_it_is_shown(tmp_path: Path) -> None:
    recs = _records()
    for r in recs:
        if r.provider == QUEUED and r.experiment == "attribution":
            # every output event's stamp 30 ms late: far above the self-check's limit
            r.client.stamp_lateness_ms_p50 = r.client.stamp_lateness_ms_p99 = 30.0
            r.client.ttft_lateness_ms = 30.0
    lab = _lab(recs)
    assert lab.requests is not None
    flagged = [s for s in lab.requests if s.client_bound]
    assert [(s.provider, s.experiment) for s in flagged] == [(QUEUED, "attribution")]
    reason = flagged[0].client_bound
    assert reason is not None and "client-bound" in reason
    answer = next(a for a in lab.answers if a.provider == QUEUED and a.experiment == "attribution")
    assert isinstance(answer.figures, AttributionFigures)
    assert answer.figures.ttft_split is not None
    assert answer.figures.ttft_split.client_bound == reason  # the answer's figure carries it
    assert CLIENT_BOUND_MARK in answer.answer
    _, blocks, _ = build_blocks(load_run(write_run(tmp_path / "run", recs, lab=lab)))
    for column in ("+ network + front end", "TTFT p50"):
        row = _row(_table(blocks, column), QUEUED, "attribution")
        assert CLIENT_BOUND_MARK in row["experiment"]
        other = _row(_table(blocks, column), SERVER_TTFT, "attribution")
        assert CLIENT_BOUND_MARK not in other["experiment"]
    chart, _ = whose_time_chart(lab)
    assert chart is not None
    bars = {
        v["bar"]
        for v in chart.spec["data"]["values"]
        if v["bar"].endswith("TTFT") or "⚠" in v["bar"]
    }
    assert bars == {f"{QUEUED}: TTFT {CLIENT_BOUND_MARK}", f"{SERVER_TTFT}: TTFT"}  # the chart too
    marked = [key for key in _summary_rows(lab) if CLIENT_BOUND_MARK in key[1]]
    assert marked == [(QUEUED, f"attribution {CLIENT_BOUND_MARK}")]  # the terminal's too
    assert any(
        isinstance(b, Bullets) and any(reason in item for item in b.items) for b in blocks
    )  # the reason, in "What is missing"
