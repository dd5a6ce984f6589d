"""Each reader pinned to a file its client wrote (tests/scoring/peer_results, README there):
read, scored against the truth log of the same run, imported as a labkit run and compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit import read_runs
from labkit.errors import ConfigError
from labkit.report.compare import NOT_MEASURED, compare_runs
from labkit.scoring.imports import import_results, to_records
from labkit.scoring.peers import ClientRequest, ClientResults, detect, read_results
from labkit.scoring.score import TIME_SLACK_MS, score
from labkit.truth.log import read_truth_log

pytestmark = pytest.mark.unit

PEERS = Path(__file__).resolve().parent / "peer_results"
#: (reader, results file, the client's label, how its requests are matched, its first TTFT)
FILES = [
    ("labkit", "labkit/run", "labkit", "id", None),
    ("guidellm", "guidellm/benchmarks.json", "guidellm 0.8.1", "id", 72.89409637451172),
    ("aiperf", "aiperf/profile_export.jsonl", "aiperf 0.13.0", "id", 69.20712499999999),
    ("vllm", "vllm/vllm_bench_serve.json", "vllm bench serve", "time", 59.41375099973811),
]


@pytest.mark.parametrize(("fmt", "name", "label", "matched_by", "first_ttft"), FILES)
def test_each_reader_reads_and_scores_its_peers_file(
    fmt: str, name: str, label: str, matched_by: str, first_ttft: float | None
) -> None:
    path = PEERS / name
    assert detect(path) == fmt
    results = read_results(path)
    assert results.label.startswith(label)
    assert len(results.requests) == 16 and all(r.ok for r in results.requests)
    if first_ttft is not None:
        assert results.requests[0].ttft_ms == pytest.approx(first_ttft)
    truth = read_truth_log(
        path.parent / "truth.jsonl" if path.is_file() else PEERS / fmt / "truth.jsonl"
    )
    s = score(results, truth)
    assert s.matched_by[matched_by] == 16 and s.unmatched_client == 0
    assert s.unmatched_truth == 0
    # causality: a client cannot see the first token before the server sent it (a wall-clock
    # start is known to TIME_SLACK_MS), and every client counted the tokens it was sent
    assert all(row["ttft_error"] >= -TIME_SLACK_MS for row in s.rows)
    assert s.metric("output_tokens").max == 0 and s.metric("output_tokens").p50.value == 0
    assert s.metric("ttft").n == 16


def test_vllm_matched_by_time_pairs_each_start_with_the_next_read() -> None:
    s = score(
        read_results(PEERS / "vllm/vllm_bench_serve.json"),
        read_truth_log(PEERS / "vllm/truth.jsonl"),
    )
    # vLLM's bench stamps on the monotonic clock: each start precedes its read
    assert all(row["request_start"] < 0 for row in s.rows)
    assert len({row["truth_id"] for row in s.rows}) == 16
    assert "e2e" in s.not_measured and "event_stamp" in s.not_measured


def test_only_labkit_keeps_per_event_stamps_and_they_match_the_sends() -> None:
    s = score(read_results(PEERS / "labkit/run"), read_truth_log(PEERS / "labkit/truth.jsonl"))
    assert s.metric("event_stamp").n == 16 * 32
    assert s.metric("event_stamp").p50.value is not None and s.metric("event_stamp").p50.value >= 0
    assert s.not_measured == []


def test_a_peer_imported_as_a_run_is_read_and_compared(tmp_path: Path) -> None:
    runs = {}
    for fmt, name in (
        ("guidellm", "guidellm/benchmarks.json"),
        ("vllm", "vllm/vllm_bench_serve.json"),
    ):
        imported = import_results(
            read_results(PEERS / name), tmp_path, provider="truth", model="labkit-truth"
        )
        runs[fmt] = imported.folder
        assert imported.records == 16
        assert "client.event_offsets_ms" in imported.not_measured
    frame = read_runs([PEERS / "labkit/run", runs["guidellm"], runs["vllm"]])
    assert len(frame) == 48
    vllm_rows = frame[frame["run_dir"] == str(runs["vllm"])]
    assert vllm_rows["client.e2e_ms"].isna().all() and vllm_rows["client.ttft_ms"].notna().all()

    table = compare_runs([PEERS / "labkit/run", runs["guidellm"], runs["vllm"]])
    verdicts = {(r["run"], r["metric"]): str(r["verdict"]) for _, r in table.iterrows()}
    vllm_label = next(run for run, _ in verdicts if run.startswith("vllm"))
    guidellm_label = next(run for run, _ in verdicts if run.startswith("guidellm"))
    for metric in ("e2e_p50", "e2e_p90"):
        assert verdicts[(vllm_label, metric)] == f"{NOT_MEASURED} by {vllm_label}"
        assert not verdicts[(guidellm_label, metric)].startswith(NOT_MEASURED)
    assert not verdicts[(vllm_label, "ttft_p50")].startswith(NOT_MEASURED)


def test_a_file_no_reader_knows_is_one_clear_error(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text('{"hello": 1}')
    with pytest.raises(ConfigError, match="cannot tell which client wrote"):
        read_results(odd)
    with pytest.raises(ConfigError, match="not a truth log"):
        read_truth_log(odd)


def test_the_score_and_import_commands(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from labkit.cli.app import app

    runner = CliRunner()
    out = tmp_path / "score"
    result = runner.invoke(
        app,
        [
            "score",
            str(PEERS / "aiperf/truth.jsonl"),
            str(PEERS / "aiperf/profile_export.jsonl"),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "16 request(s) matched by id" in result.output
    assert "not measured by this client: output event stamp" in result.output
    assert "| TTFT |" in (out / "score.md").read_text()
    result = runner.invoke(
        app,
        [
            "import-results",
            str(PEERS / "guidellm/benchmarks.json"),
            "--out",
            str(tmp_path / "runs"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "(16 records)" in result.output
    missing = runner.invoke(app, ["score", str(tmp_path / "none.jsonl"), str(PEERS / "vllm")])
    assert missing.exit_code == 1
    assert "cannot read the truth log" in missing.output and "Traceback" not in missing.output
    with pytest.raises(ConfigError, match="cannot read"):
        read_results(tmp_path, "labkit")  # a folder without records.jsonl


def test_the_largest_error_is_the_one_of_largest_magnitude_with_its_sign() -> None:
    truth = read_truth_log(PEERS / "labkit/truth.jsonl")
    first, second = truth.requests[:2]
    results = ClientResults(tool="a client", version=None, path=PEERS)
    for index, (t, error_ms) in enumerate(((first, -9.87), (second, 0.18))):
        start = t.t_start_ns
        results.requests.append(
            ClientRequest(
                index=index,
                request_id=t.id,
                start_mono_ns=start,
                ttft_ms=(t.events_ns[0] - start) / 1e6 + error_ms,
            )
        )
    s = score(results, truth)
    assert s.metric("ttft").max == pytest.approx(-9.87)
    assert s.metric("ttft").n == 2


@pytest.mark.parametrize(
    ("decode_ms", "tokens", "reason"),
    [
        (90.0, 10.0, None),  # measured
        (None, 10.0, "not_measured"),  # the peer reported no decode
        (90.0, None, "not_measured"),  # ... or no output count
        (90.0, 1.0, "one_token"),
    ],
)
def test_an_imported_null_decode_says_why(
    tmp_path: Path, decode_ms: float | None, tokens: float | None, reason: str | None
) -> None:
    # Every path to a null decode carries its reason, imported records included (issue 44).
    request = ClientRequest(index=0, ttft_ms=5.0, decode_ms=decode_ms, output_tokens=tokens)
    results = ClientResults(tool="peer", version=None, path=tmp_path / "r.json", requests=[request])
    (record,) = to_records(results, "run", "p", "load", "m")
    assert record.client.decode_null_reason == reason
    assert (record.client.decode_ms_per_token is None) == (reason is not None)
