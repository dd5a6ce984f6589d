"""write_report end to end: files written, sections present, every gap said in words."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from labkit.records import LabAnswer, LabResults
from labkit.report import write_report
from labkit.report.build import asked_experiments
from tests.report.report_builders import full_lab, mixed_records, write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _md(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_full_report(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", mixed_records(), lab=full_lab())
    paths = write_report(run_dir)
    md = _md(paths.md)
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Lab answers"
    for exp in ("single", "token_ratio", "determinism", "prefill_decode", "attribution"):
        assert f". {exp}: What does {exp} show?" in md
    assert "Prefill costs 0.2 ms per prompt token." in md
    assert "hosted: reports no prefill/decode timings of its own" in md
    assert "not reported" in md
    links = re.findall(r"\]\((report_files/[^)]+\.png)\)", md)
    # One picture per question and per section, none twice; every one a Vega-Lite chart.
    assert [Path(link).stem for link in links] == [
        "q2_chars_per_token",
        "q4_prefill_decode",
        "distributions",
        "client_vs_server",
    ]
    for link in links:
        assert (run_dir / link).read_bytes().startswith(b"\x89PNG")
    html = paths.html.read_text(encoding="utf-8")
    assert html.count('<div class="chart"') == len(links)
    # Nothing is fetched: no element loads a URL; the charts' Vega is inlined once.
    markup = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    assert "<img" not in markup
    assert not re.search(r"<(?:img|script|link|iframe)\b[^>]*\b(?:src|href)=\"(?!data:)", markup)
    assert html.count("vegaEmbed(el, spec") == 1
    csv = pd.read_csv(paths.csv)
    parquet = pd.read_parquet(paths.parquet)
    assert list(csv.columns) == list(parquet.columns)
    local = csv[(csv["provider"] == "local") & (csv["experiment"] == "single")].iloc[0]
    assert local["warmup_excluded"] == 1 and local["n"] == 20
    hosted = parquet[parquet["provider"] == "hosted"].iloc[0]
    assert hosted["errors"] == 1 and hosted["error_kinds"] == "timeout: 1"
    # regenerating is idempotent
    assert write_report(run_dir) == paths


def test_without_lab_json_only_the_requests_are_drawn(tmp_path: Path) -> None:
    paths = write_report(write_run(tmp_path / "run", mixed_records()))
    md = _md(paths.md)
    assert "lab.json is absent" in md
    # The requests' own values are still drawn; no aggregate is recomputed for a chart.
    links = re.findall(r"\]\((report_files/[^)]+\.png)\)", md)
    assert [Path(link).stem for link in links] == ["distributions", "client_vs_server"]


def test_every_request_failed(tmp_path: Path) -> None:
    recs = [make_record(provider="hosted", error_kind="http_status") for _ in range(3)]
    manifest = {
        "status": "failed",
        "providers": {
            "hosted": {
                "kind": "anthropic",
                "model": "m",
                "status": "failed",
                "reason": None,
                "first_error": "HTTP 500 from the API",
            }
        },
    }
    paths = write_report(write_run(tmp_path / "run", recs, manifest=manifest))
    md = _md(paths.md)
    assert "hosted: every request failed (3 of 3: http_status × 3)" in md
    assert "Provider hosted was failed: HTTP 500 from the API." in md
    assert "The run's status is 'failed'" in md
    assert "report_files/" not in md  # no successful request: nothing to draw
    assert "synthetic http_status" in md  # the errors table shows a message
    assert paths.html.is_file() and paths.parquet.is_file()


def test_one_record(tmp_path: Path) -> None:
    paths = write_report(write_run(tmp_path / "run", [make_record(ttft_ms=123.0)]))
    md = _md(paths.md)
    assert "local: only 1 successful request; every percentile is that one value." in md
    row = pd.read_csv(paths.csv).iloc[0]
    assert row["ttft_ms.p50"] == row["ttft_ms.p99"] == 123.0


def test_only_an_asked_experiment_without_an_answer_gets_a_stub(tmp_path: Path) -> None:
    # A run of one load experiment, and a determinism run that produced no answer: the lab's
    # other questions were never asked, so they get no "no answer" stub.
    answer = LabAnswer(
        experiment="load", provider="local", question="How does load move TTFT?", answer="Up."
    )
    config = {"experiments": [{"kind": "load"}, {"kind": "determinism"}, {"kind": "load"}]}
    run_dir = write_run(
        tmp_path / "run",
        [make_record(experiment="load")],
        manifest={"config": config},
        lab=LabResults(run_id="run-1", answers=[answer]),
    )
    md = _md(write_report(run_dir).md)
    lab = md.split("## What is missing")[0]
    headings = [line for line in lab.splitlines() if line.startswith("### ")]
    assert headings == [
        "### 1. determinism",
        "### 2. load: How does load move TTFT?",
        "### 3. load#1",
    ]
    assert "The config asked for determinism, but the run produced no answer for it." in lab
    for unasked in ("single", "token_ratio", "prefill_decode", "attribution"):
        assert unasked not in lab
    assert asked_experiments({"config": config}) == ["load", "determinism", "load#1"]
    assert asked_experiments({}) == []  # a manifest without its config: answers only


@pytest.mark.parametrize(
    ("read_path", "shown"),
    [
        ({"implementation": "c", "reason": None, "detail": None}, "| c |"),
        (
            {
                "implementation": "python",
                "reason": "switched_off",
                "detail": "LABKIT_READPATH=python",
            },
            "| python (switched off: LABKIT_READPATH=python) |",
        ),
        (
            {"implementation": "python", "reason": "not_built", "detail": "ImportError: x"},
            "| python (not built: ImportError: x) |",
        ),
        ({"implementation": "rust"}, "| unreadable: {'implementation': 'rust'} |"),
    ],
)
def test_the_run_table_shows_the_read_path(
    tmp_path: Path, read_path: dict[str, object], shown: str
) -> None:
    run_dir = write_run(tmp_path / "run", [make_record()], manifest={"read_path": read_path})
    rows = [line for line in _md(write_report(run_dir).md).splitlines() if "read path" in line]
    assert len(rows) == 1 and re.sub(r" +", " ", rows[0]).endswith(shown), rows


def test_a_run_from_before_the_read_path_was_recorded_shows_none(tmp_path: Path) -> None:
    md = _md(write_report(write_run(tmp_path / "run", [make_record()])).md)
    assert "read path" not in md


def test_provider_without_usage(tmp_path: Path) -> None:
    recs = [
        make_record(
            provider="bare",
            output_tokens=None,
            input_tokens=None,
            n_events=5,
            decode_ms_per_token=None,
        )
        for _ in range(3)
    ]
    paths = write_report(write_run(tmp_path / "run", recs))
    md = _md(paths.md)
    assert "bare: reported no token usage" in md


def test_locally_counted_output_tokens_are_flagged(tmp_path: Path) -> None:
    recs = [make_record(output_tokens_source="local") for _ in range(2)]
    md = _md(write_report(write_run(tmp_path / "run", recs)).md)
    assert "counted locally by labkit" in md


def test_empty_records_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "records.jsonl").write_text("")
    md = _md(write_report(run_dir).md)
    assert "records.jsonl holds no records" in md
    assert "manifest.json is missing" in md


def test_load_levels_table_figure_and_client_bound_note(tmp_path: Path) -> None:
    from labkit.experiments.load import LoadExperiment, LoadSettings
    from labkit.records import LabResults

    records = []
    for level, streams, lag in (("c1", 1, 0.8), ("c4", 4, 7.5)):
        for i in range(8):
            rec = make_record(experiment="load", ttft_ms=50.0 + 10 * streams, tags={"level": level})
            rec.t_start_mono_ns = 10**12 + (i // streams) * 300_000_000 + i * 1000
            rec.client.loop_lag_ms = lag
            rec.app.cpu_ms = 0.9 * (rec.client.e2e_ms or 0.0)  # labkit itself was busy
            records.append(rec)
    exp = LoadExperiment(LoadSettings(concurrency=[1, 4], requests=8))
    answer = exp.analyze("local", "m", records)
    run_dir = write_run(tmp_path / "run", records, lab=LabResults(run_id="run-1", answers=[answer]))
    paths = write_report(run_dir)
    md = _md(paths.md)
    assert "## Load levels" in md
    rows = [line for line in md.splitlines() if line.startswith("| concurrency")]
    assert len(rows) == 2 and "client-bound" in rows[1] and "client-bound" not in rows[0]
    assert (run_dir / "report_files" / "load_curves.png").read_bytes().startswith(b"\x89PNG")
    # The flag is also said in words, with the fix for a busy labkit: more processes.
    assert "local · load · c4: client-bound" in md and "`workers`" in md
    assert "local · load · c1" not in md
    assert "Load levels" in paths.html.read_text(encoding="utf-8")


def test_missing_timings_from_a_kind_that_reports_them_are_said_apart(tmp_path: Path) -> None:
    # The manifest says which providers report their own timings (the provider's
    # capability); the report tells "this kind never does" from "none arrived this time".
    manifest = {
        "providers": {
            "hosted": {"status": "ok", "reports_server_timings": True},
            "local": {"status": "ok", "reports_server_timings": True},
        }
    }
    run_dir = write_run(tmp_path / "run", mixed_records(), lab=full_lab(), manifest=manifest)
    md = _md(write_report(run_dir).md)
    assert "hosted: its kind reports prefill/decode timings of its own, but none arrived" in md
    assert "hosted: reports no prefill/decode timings of its own" not in md
    assert "local: its kind reports" not in md  # its timings did arrive
