"""The observatory's page from `ObservatoryFigures`: every section, each picture with a table of
its data, intervals in every cell, "not separable" said as such (never a zero), changes with
their sentences, cost only where priced, no secret of the store's URL anywhere; and
`labkit dashboard` writes it (or says in one line why not)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.figures.observatory import ObservatoryFigures
from labkit.report.dashboard import (
    NOT_SEPARABLE,
    changes_chart,
    cost_chart,
    dashboard_blocks,
    dashboard_html,
    hour_of_day_chart,
    public_url,
    split_chart,
)
from labkit.report.render import ChartBlock, Heading, Table
from tests.report.observatory_builders import (
    CHANGE_AT,
    MODEL,
    PROVIDERS,
    observatory_figures,
)

pytestmark = pytest.mark.unit

SECRET_URL = "postgresql://watcher:s3cr3t-Pa55@db.lab.internal:5432/obs?sslmode=require"


def _spec_values(spec: dict[str, object]) -> list[dict[str, object]]:
    data = spec["data"]
    assert isinstance(data, dict)
    values = data["values"]
    assert isinstance(values, list)
    return values


def test_the_page_has_every_section_each_picture_with_its_table() -> None:
    blocks = dashboard_blocks(observatory_figures())
    headings = [b.text for b in blocks if isinstance(b, Heading)]
    assert headings == [
        "labkit observatory",
        "Hour of day",
        "The last 72 hours and 14 days",
        "Where the time went",
        "Changes",
        "Cost",
        "Same model?",
    ]
    charts = [b.chart.name for b in blocks if isinstance(b, ChartBlock)]
    assert charts == ["obs_hour_of_day", "obs_split", "obs_changes", "obs_costs"]
    # Each picture is followed (after at most a note) by a table of its data.
    for i, block in enumerate(blocks):
        if isinstance(block, ChartBlock):
            assert any(isinstance(b, Table) for b in blocks[i + 1 : i + 3]), block.chart.name


def test_hour_of_day_points_carry_their_intervals() -> None:
    figs = observatory_figures()
    chart = hour_of_day_chart(figs.rollups)
    assert chart is not None
    values = _spec_values(chart.spec)
    # 3 providers × 2 metrics × 24 hours × (median, p90)
    assert len(values) == 3 * 2 * 24 * 2
    beta_peak = next(
        v
        for v in values
        if v["provider"] == f"beta · {MODEL}" and v["hour"] == 17 and v["stat"] == "median"
        and v["panel"] == "TTFT (ms)"
    )  # fmt: skip
    assert (beta_peak["value"], beta_peak["lo"], beta_peak["hi"]) == (350.0, 345.0, 355.0)
    # gamma's hour 3 has too few probes for a p90 interval: no band, and the table says so
    thin = next(v for v in values if v["provider"] == f"gamma · {MODEL}" and v["hour"] == 3
                and v["stat"] == "p90" and v["panel"] == "TTFT (ms)")  # fmt: skip
    assert thin["lo"] is None and "no interval" in str(thin["interval"])
    tips = [
        t["title"] for t in chart.spec["spec"]["layer"][2]["encoding"]["tooltip"] if "title" in t
    ]
    assert "95% CI low" in tips and "95% CI high" in tips


def test_not_separable_is_drawn_as_the_rest_never_as_zero() -> None:
    figs = observatory_figures()
    chart = split_chart(figs.splits)
    assert chart is not None
    values = _spec_values(chart.spec)
    by = {(v["provider"], v["when"], v["part"]): v for v in values}
    # alpha splits in full: no grey part
    assert not any(p == f"alpha · {MODEL}" and part == NOT_SEPARABLE for p, _, part in by)
    # beta gives its queue: the rest of its mean TTFT is grey
    assert by[(f"beta · {MODEL}", "17", "queue")]["ms"] == 160.0
    assert by[(f"beta · {MODEL}", "17", NOT_SEPARABLE)]["ms"] == pytest.approx(190.0)
    # gamma gives nothing: its whole TTFT is one grey bar each hour, not zero parts
    gamma = [v for v in values if v["provider"] == f"gamma · {MODEL}"]
    assert {v["part"] for v in gamma} == {NOT_SEPARABLE}
    assert len(gamma) == 24 and all(v["ms"] == 320.0 for v in gamma)
    assert not any(v["ms"] == 0 for v in values)
    page = dashboard_html(figs)
    assert "gamma · m-8b: not separable" in page


def test_changes_are_drawn_at_their_time_with_their_sentence_and_interval() -> None:
    figs = observatory_figures()
    chart = changes_chart(figs)
    assert chart is not None
    values = _spec_values(chart.spec)
    shift = [v for v in values if v["row"] == "change"]
    assert len(shift) == 1
    assert shift[0]["t"] == CHANGE_AT.isoformat()
    assert shift[0]["at_interval"] == "2026-11-05 12:00 UTC – 2026-11-05 15:00 UTC"
    assert "the provider's queue" in str(shift[0]["sentence"])
    assert shift[0]["component"] == "queue"
    assert shift[0]["delta"] == "180.0 [158.0–202.0]"
    events = [v for v in values if v["row"] == "event"]
    assert [e["kind"] for e in events] == ["fingerprint"]
    assert len([v for v in values if v["row"] == "point"]) == 7
    table = next(
        b for b in dashboard_blocks(figs) if isinstance(b, Table) and "finding" in b.columns
    )
    assert [r[6] for r in table.rows] == ["180.0 [158.0–202.0]", "fp_0a1b → fp_9f8e"]
    page = dashboard_html(figs)
    for change in figs.changes:
        assert change.sentence.replace("'", "&#x27;") in page


def test_a_change_without_a_series_is_drawn_as_its_levels() -> None:
    figs = observatory_figures().model_copy(update={"series": []})
    chart = changes_chart(figs)
    assert chart is not None
    levels = [v for v in _spec_values(chart.spec) if v["row"] == "level"]
    assert [(v["level"], v["value"]) for v in levels] == [
        ("before", 200.0), ("before", 200.0), ("after", 380.0), ("after", 380.0),
    ]  # fmt: skip


def test_cost_only_where_priced_with_intervals() -> None:
    figs = observatory_figures()
    chart = cost_chart(figs.costs)
    assert chart is not None
    values = _spec_values(chart.spec)
    assert {v["provider"] for v in values} == {f"alpha · {MODEL}", f"beta · {MODEL}"}
    # beta has no sessions: three measures, alpha four
    assert len(values) == 7
    per_request = next(v for v in values if v["provider"] == f"alpha · {MODEL}"
                       and v["panel"] == "cost per request (USD)")  # fmt: skip
    assert per_request["estimate"] == "0.000420 [0.000400–0.000440]"
    unpriced = figs.model_copy(update={"costs": []})
    headings = [b.text for b in dashboard_blocks(unpriced) if isinstance(b, Heading)]
    assert "Cost" not in headings


def test_verdicts_table_with_confidence_and_reasons() -> None:
    blocks = dashboard_blocks(observatory_figures())
    table = next(b for b in blocks if isinstance(b, Table) and "verdict" in b.columns)
    rows = {r[1]: r for r in table.rows}
    assert set(rows) == set(PROVIDERS)
    assert rows["beta"][3] == "differs: distributions"
    assert rows["beta"][4] == "99.9%"
    assert "p = 0.0009" in rows["beta"][8]
    assert rows["alpha"][5] == "40/40 (100%, 95 % CI 91%–100%)"
    assert rows["gamma"][3] == "undecided"


def test_the_header_says_the_store_rounds_and_times() -> None:
    page = dashboard_html(observatory_figures())
    assert "store: /var/lab/watch.duckdb" in page
    assert "rounds: 2016" in page
    assert "first round: 2026-11-02 00:00 UTC; last round: 2026-11-08 23:55 UTC" in page
    assert "computed at: 2026-11-09 00:03 UTC" in page


def test_the_store_password_never_reaches_the_page() -> None:
    assert public_url(SECRET_URL) == (
        "postgresql://watcher@db.lab.internal:5432/obs?sslmode=require"
    )
    assert public_url("postgresql://u:p@h/db?password=x&sslmode=disable") == (
        "postgresql://u@h/db?sslmode=disable"
    )
    assert public_url("/var/lab/watch.duckdb") == "/var/lab/watch.duckdb"
    # a URL urllib cannot read still loses what stands before its @
    assert public_url("postgresql://u:s3cr3t@[::1/db") == "postgresql://[::1/db"
    page = dashboard_html(observatory_figures(store=SECRET_URL))
    assert "s3cr3t" not in page and "Pa55" not in page
    assert "postgresql://watcher@db.lab.internal:5432/obs" in page


def test_an_empty_store_says_so() -> None:
    figs = ObservatoryFigures(store="/tmp/x.duckdb", computed_at=CHANGE_AT)
    page = dashboard_html(figs)
    assert "The store holds no rounds yet" in page
    assert "No change found" in page and "No same-model probes" in page
    assert "vegaEmbed" not in page  # nothing to draw, no bundle


def test_the_cli_renders_saved_figures(tmp_path: Path) -> None:
    saved = tmp_path / "figs.json"
    saved.write_text(observatory_figures().model_dump_json(), encoding="utf-8")
    page = tmp_path / "out" / "dash.html"
    result = CliRunner().invoke(app, ["dashboard", "--figures", str(saved), "-o", str(page)])
    assert result.exit_code == 0, result.output
    assert "dashboard" in result.output
    text = page.read_text(encoding="utf-8")
    assert text.count('class="chart"') == 4
    specs = re.findall(r'<script type="application/json" id="chart\d-spec">(.*?)</script>', text)
    assert len(specs) == 4 and all(json.loads(s.replace("<\\/", "</")) for s in specs)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "name a STORE (a DuckDB file or a postgresql:// URL)"),
        (["--figures", "missing.json"], "cannot read the figures file"),
        (["--figures", "bad.json"], "is not observatory figures"),
        (["--figures", "deep.json"], "is not observatory figures"),
        (["--figures", "binary.json"], "cannot read the figures file"),
        (["--figures", "cut.json"], "is not observatory figures"),
    ],
)
def test_the_cli_says_bad_input_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text('{"store": 3}', encoding="utf-8")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00 not UTF-8")
    (tmp_path / "cut.json").write_text('{"store": "s", "computed_at": "2026-', encoding="utf-8")
    result = CliRunner().invoke(app, ["dashboard", *args])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], result.output
    assert not (tmp_path / "dashboard.html").exists()


def test_a_store_url_with_a_password_is_never_echoed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["dashboard", SECRET_URL])
    assert result.exit_code == 1
    assert "s3cr3t-Pa55" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
