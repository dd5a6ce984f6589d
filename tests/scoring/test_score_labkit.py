"""`labkit score` on labkit's own requests agrees with `benchmarks/bench_load.py`'s method:
the same request matched to the same truth, the same TTFT and stamp error figures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_load

from labkit.cli.app import app
from labkit.scoring.peers import read_results
from labkit.scoring.score import score
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration

STREAMS, REQUESTS = 4, 12


def test_score_matches_bench_load_on_the_same_requests(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    with TruthServer(truth_log=log, ttft_ms=20, interval_ms=2, tokens=20) as srv:
        leg = bench_load.labkit_leg(srv.base_url, STREAMS, REQUESTS)
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text(
        "".join(r.model_dump_json() + "\n" for r in leg.records), encoding="utf-8"
    )
    truth = read_truth_log(log)
    # bench_load's figures, from the same truth in the shape of the server's /stamps
    stamps = {
        t.id: {"t_recv": t.t_read_ns, "sends": t.events_ns, "sent": t.events_sent_ns}
        for t in truth.requests
    }
    acc = bench_load.Accum()
    acc.add(leg, stamps, STREAMS)
    bench = acc.figures()
    assert bench["unmatched_streams"] == 0

    s = score(read_results(run), truth)
    assert s.matched_by == {"id": REQUESTS, "time": 0}
    assert s.unmatched_truth == STREAMS  # the leg's warm-up requests
    assert [r["truth_id"] for r in s.rows] == [st.response_id for st in leg.streams]
    for metric, figure in (("ttft", "ttft_err_ms"), ("event_stamp", "event_err_ms")):
        mine, theirs = s.metric(metric), bench[figure]
        assert mine.n == theirs["n"]
        assert mine.p50.value == pytest.approx(theirs["p50"], abs=1e-9)
        assert mine.p99.value == pytest.approx(theirs["p99"], abs=1e-9)
        assert mine.max == pytest.approx(theirs["max"], abs=1e-9)
    assert s.metric("output_tokens").max == 0  # labkit counts what the server sent

    out = tmp_path / "score"
    result = CliRunner().invoke(app, ["score", str(log), str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "12 request(s) matched by id" in result.output
    assert {p.name for p in out.iterdir()} >= {"score.md", "score.json", "score.vl.json"}
