"""The lab end to end against the real llama-server and the real model (no mocks, no skips).

These run `labkit` as a subprocess, as a user would, so Ctrl-C, a dying server and a failing
run are exercised for real. The first run on a fresh machine builds llama-server (`labkit
setup`, minutes); later runs find it cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.figures import AttributionKey
from labkit.local import ensure_setup
from labkit.records import LabResults, RequestRecord
from tests.support.processes import pid_alive, processes
from tests.support.records import most_in_flight
from tests.support.signals import default_sigint

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
LABKIT = [sys.executable, "-m", "labkit"]


@pytest.fixture(scope="module", autouse=True)
def _local_setup() -> None:
    ensure_setup()  # build/fetch once, outside the timed subprocesses


def _children_named(parent: int, name: str) -> list[int]:
    """Pids of live processes whose program is `name` and whose parent is `parent`."""
    return [p.pid for p in processes(parent=parent) if Path(p.cmdline.split(" ")[0]).name == name]


def _run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LABKIT, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


def _records(run_dir: Path) -> list[RequestRecord]:
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    return [RequestRecord.from_json_line(line) for line in lines if line.strip()]


def _run_dir(out: Path) -> Path:
    dirs = [p for p in out.iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LABKIT, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=default_sigint,  # Ctrl-C tests interrupt it, also from a background job
    )


def _wait_for_records(out: Path, n: int, proc: subprocess.Popen[str], timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
        records = dirs[0] / "records.jsonl" if dirs else None
        if records is not None and records.exists() and len(records.read_text().splitlines()) >= n:
            return dirs[0]
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} records after {timeout} s")


def test_quickstart_on_the_real_server(tmp_path: Path) -> None:
    result = _run(["run", "configs/quickstart.yaml", "--out", str(tmp_path), "--repeats", "2"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "server" in result.stdout and "prefill" in result.stdout  # the side-by-side columns
    run_dir = _run_dir(tmp_path)
    records = [r for r in _records(run_dir) if not r.warmup]
    assert records and all(r.error is None for r in records)
    for r in records:
        pt = r.provider_timings
        assert pt.prefill_ms is not None and pt.prefill_ms > 0
        assert pt.decode_ms is not None and pt.decode_ms > 0
        assert r.client.ttft_ms is not None and r.client.ttft_ms >= pt.prefill_ms
        assert r.server_build and r.server_build.startswith("b")
    for r in (r for r in records if r.experiment == "single"):
        assert r.usage.output_tokens is not None and r.usage.output_tokens >= 32
        client, server = r.client.decode_ms_per_token, r.provider_timings.decode_ms_per_token
        assert client is not None and server is not None and client > 0 and server > 0
        # How close the client's stamps come to the server's own decode timer is the host's:
        # printed here, measured by `make bench` (benchmarks/bench_fidelity.py --llama).
        print(f"decode ms/token: client {client:.3f}, server {server:.3f}")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    local = manifest["providers"]["local"]
    assert local["status"] == "ok"
    server = local["server"]
    assert server["backend"] == "cpu" and server["build_info"].startswith("b")
    assert server["model_sha256"] and server["slots"] == 1
    assert not pid_alive(server["pid"]), "llama-server outlived the run"
    assert (run_dir / "report.html").exists() and (run_dir / "report.md").exists()
    # All five questions answered, from data, and printed last, one numbered paragraph each.
    lab = json.loads((run_dir / "lab.json").read_text())
    answered = {a["experiment"]: a for a in lab["answers"]}
    assert list(answered) == [
        "single",
        "token_ratio",
        "determinism",
        "prefill_decode",
        "attribution",
    ]
    assert [a["status"] for a in answered.values()] == ["ok"] * 5
    # The number first: "14.5 ms to the first token ...", "4.86 characters per token ...".
    leads = [a["answer"][:1] for a in answered.values()]
    assert all(c.isdigit() for c in leads), [a["answer"][:60] for a in answered.values()]
    tail = result.stdout[result.stdout.index("The lab's answers") :]
    for n, experiment in enumerate(answered, start=1):
        assert f"{n}. {experiment} · local:" in tail
    report = (run_dir / "report.md").read_text()
    for name in (
        "q1_anatomy",
        "q2_chars_per_token",
        "q3_determinism",
        "q3_next_token",
        "q4_prefill_decode",
        "q5_whose_time",
    ):
        assert f"report_files/{name}.png" in report
    # Question 3 quotes the candidates: where the replies diverged and how likely each was.
    det = answered["determinism"]["answer"]
    assert "at temperature 0 the top candidate is always taken" in det, det
    assert ("diverged at token" in det and "(p " in det) or "no repeats diverged" in det, det


LAB = """
name: lab-real
providers:
  - {id: local, kind: llamacpp, ctx_size: 2048}
experiments:
  - {kind: single, repeats: 2, params: {temperature: 0, max_tokens: 32}}
  - {kind: token_ratio}
  - {kind: determinism, repeats: 2, params: {max_tokens: 24}}
  - kind: prefill_decode
    repeats: 3  # medians of 3 absorb one stalled request on a busy machine
    prompt_tokens: [16, 256, 1024]
    cache_prefix_tokens: 512
    cache_repeats: 1
    params: {temperature: 0, max_tokens: 16}
  - {kind: attribution, repeats: 2}
"""


def test_whole_lab_on_the_real_server(tmp_path: Path) -> None:
    cfg = tmp_path / "lab.yaml"
    cfg.write_text(LAB)
    result = _run(["run", str(cfg), "--out", str(tmp_path / "runs"), "--no-report"])
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = _run_dir(tmp_path / "runs")
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    got = {a.experiment: a for a in lab.answers}
    assert set(got) == {"single", "token_ratio", "determinism", "prefill_decode", "attribution"}
    assert all(a.status == "ok" for a in lab.answers), [
        (a.experiment, a.answer) for a in lab.answers
    ]

    pd = got["prefill_decode"].figures
    # Shapes, counts and the two accounts' agreement, never speed: a busy host stretches any
    # one request (a decode-time ratio asserted here failed a fresh clone's `make test`).
    assert [p.target_prompt_tokens for p in pd.points] == [16, 256, 1024]
    assert all(p.n == 3 for p in pd.points)
    counts = [p.input_tokens for p in pd.points]
    assert all(c is not None for c in counts) and counts == sorted(set(counts)), counts
    for p in pd.points:
        assert p.decode_ms_per_token is not None and p.decode_ms_per_token > 0
        assert p.provider_decode_ms_per_token is not None and p.provider_decode_ms_per_token > 0
        # each request's TTFT holds the server's prefill, so their medians keep that order
        assert p.ttft_ms is not None and p.prefill_ms is not None and p.ttft_ms >= p.prefill_ms
    assert pd.fit.ms_per_token > 0  # prefill grows with the prompt
    assert pd.server_prefill_fit.ms_per_token > 0
    assert pd.decode_fit is not None
    assert pd.cold_cache_hits == 0
    assert pd.cache.n_hits >= 1 and pd.cache.hit_cached_tokens > 0
    assert pd.cache.prime_ttft_ms is not None and pd.cache.hit_ttft_ms is not None

    variants = {v.variant: v for v in got["determinism"].figures.variants}
    assert variants["t0-seed"].identical is True
    assert variants["t0"].identical is True
    assert got["determinism"].figures.tokenizer == "llamacpp:/tokenize"

    rows = {r.text_id: r for r in got["token_ratio"].figures.rows}
    assert all(r.token_source == "llamacpp:/tokenize" for r in rows.values())
    assert rows["english"].chars_per_token > rows["japanese"].chars_per_token

    attribution = {r.key: r for r in got["attribution"].figures.rows}
    assert attribution[AttributionKey.TTFT_MINUS_PREFILL].value_ms > 0
    assert attribution[AttributionKey.TCP_CONNECT].value_ms is not None


def test_ctrl_c_keeps_records_leaves_no_server_and_resume_finishes(tmp_path: Path) -> None:
    cfg = tmp_path / "long.yaml"
    cfg.write_text(
        "name: long\nproviders: [{id: local, kind: llamacpp, ctx_size: 1024}]\n"
        "experiments: [{kind: single, prompt_cache: as_sent, repeats: 12, warmup: 0, "
        "params: {max_tokens: 24}}]\n"
    )
    out = tmp_path / "runs"
    proc = _start(["run", str(cfg), "--out", str(out), "--no-report"])
    run_dir = _wait_for_records(out, 3, proc)
    servers = _children_named(proc.pid, "llama-server")
    assert len(servers) == 1
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "labkit run --resume" in output and "Traceback" not in output
    time.sleep(0.5)
    assert not pid_alive(servers[0]), "llama-server outlived Ctrl-C"
    kept = _records(run_dir)
    assert len([r for r in kept if r.error is None]) >= 3
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"

    result = _run(["run", "--resume", str(run_dir), "--no-report"])
    assert result.returncode == 0, result.stdout + result.stderr
    done = [r for r in _records(run_dir) if r.error is None]
    assert sorted(r.plan_key or "" for r in done) == sorted(f"single/p0/{i}" for i in range(12))
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


def test_server_dying_mid_run_is_reported_and_finished_records_kept(tmp_path: Path) -> None:
    cfg = tmp_path / "die.yaml"
    cfg.write_text(
        "name: die\nproviders: [{id: local, kind: llamacpp, ctx_size: 1024}]\n"
        "experiments: [{kind: single, repeats: 40, warmup: 0, "
        "params: {max_tokens: 64, ignore_eos: true}}]\n"
    )
    out = tmp_path / "runs"
    proc = _start(["run", str(cfg), "--out", str(out), "--no-report"])
    run_dir = _wait_for_records(out, 2, proc)
    (server,) = _children_named(proc.pid, "llama-server")
    os.kill(server, signal.SIGKILL)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output
    assert "llama-server exited during the run" in output and "Traceback" not in output
    records = _records(run_dir)
    assert sum(1 for r in records if r.error is None) >= 2
    failed = [r for r in records if r.error is not None]
    assert failed and failed[0].error is not None and failed[0].error.kind == "connection"
    assert len(records) < 40  # it stopped sending to a dead server
    assert (
        json.loads((run_dir / "manifest.json").read_text())["providers"]["local"]["status"]
        == "failed"
    )


def test_failing_run_stops_the_server(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    # An unknown response_format is refused by llama-server: every request fails with a 4xx.
    cfg.write_text(
        "name: bad\nproviders: [{id: local, kind: llamacpp, ctx_size: 1024}]\n"
        "experiments: [{kind: single, repeats: 2, warmup: 0, "
        "params: {max_tokens: 8, response_format: {type: bogus}}}]\n"
    )
    out = tmp_path / "runs"
    proc = _start(["run", str(cfg), "--out", str(out), "--no-report"])
    servers: list[int] = []
    while proc.poll() is None and not servers:
        servers = _children_named(proc.pid, "llama-server")
        time.sleep(0.05)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, output
    assert "every request failed" in output
    records = _records(_run_dir(out))
    assert records and all(r.error is not None and r.error.kind == "http_status" for r in records)
    for pid in servers:
        assert not pid_alive(pid), "llama-server outlived a failing run"


LOAD = """
name: load-real
providers:
  - {id: local, kind: llamacpp, ctx_size: 512, slots: 8}
experiments:
  - kind: load
    concurrency: [1, 8]
    requests: 8
    warmup: 1
    params: {temperature: 0}
    output_tokens: 128  # long enough that batched decode, not the batch's prefill, decides
"""


def test_load_levels_on_the_real_server(tmp_path: Path) -> None:
    """Eight streams share llama-server's batch: more tokens per second in all than one."""
    cfg = tmp_path / "load.yaml"
    cfg.write_text(LOAD)
    result = _run(["run", str(cfg), "--out", str(tmp_path / "runs")])
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = _run_dir(tmp_path / "runs")
    records = _records(run_dir)
    measured = [r for r in records if not r.warmup]
    assert len(measured) == 16 and all(r.error is None for r in measured)
    assert {r.tags["level"] for r in measured} == {"c1", "c8"}
    assert all(r.usage.output_tokens == 128 for r in measured)  # ignore_eos on llama.cpp
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    (answer,) = lab.answers
    c1, c8 = answer.figures.levels
    assert c1.ok == c8.ok == 8
    assert c1.output_tokens_per_s and c8.output_tokens_per_s  # a rate, not a race: no ratio
    # One stream never overlaps itself; eight share the server: more than one request in
    # flight at once (each holds 128 tokens of decode), never more than eight.
    assert most_in_flight(r for r in measured if r.tags["level"] == "c1") == 1
    assert 1 < most_in_flight(r for r in measured if r.tags["level"] == "c8") <= 8
    assert c1.mean_in_flight is not None and c1.mean_in_flight <= 1 + 1e-9
    assert c8.mean_in_flight is not None and c8.mean_in_flight <= 8 + 1e-9
    print(f"mean in flight: c1 {c1.mean_in_flight:.2f}, c8 {c8.mean_in_flight:.2f}")
    # The per-level table and the load figure are in the report and the summary.
    report = (run_dir / "report.md").read_text()
    assert "## Load levels" in report and "concurrency 8" in report
    assert (run_dir / "report_files" / "load_curves.png").stat().st_size > 10_000
    summary = (run_dir / "summary.txt").read_text()
    assert "load · local" in summary and "concurrency 8" in summary
