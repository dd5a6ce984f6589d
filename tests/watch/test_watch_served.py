"""`labkit watch` over real sockets: a watch of two providers against the truth server (one
answers every request 429), killed with SIGKILL in the middle of a round and restarted with
the same command, loses no round and doubles none in the store; every request of a
simulated round carries its simulated time and every prompt its round's nonce."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.store import open_store
from labkit.truth.process import TruthServer
from labkit.watch import read_state, run_watch
from tests.providers.streams import oa_chunk, sse
from tests.support.misbehaving import MisbehavingServer, sse_reply

pytestmark = pytest.mark.integration

START = "2026-01-05T00:00:00Z"
ROUNDS = 4
REPEATS = 3


def _documented_queries() -> list[str]:
    """The SQL docs/watch.md gives under "Asking the store"."""
    text = (Path(__file__).parents[2] / "docs" / "watch.md").read_text()
    section = text.split("## Asking the store", 1)[1].split("\n## ", 1)[0]
    quoted = section.split('watch.duckdb "', 1)[1].split('"\n```', 1)[0]
    inline = section.split("rounds by status: `", 1)[1].split("`", 1)[0]
    return [quoted.replace('\\"', '"'), inline]


def _labkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "labkit", *args]


def _wait_for(condition: object, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s  # a hang guard, not a speed bound
    while not callable(condition) or not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _mid_round(folder: Path) -> bool:
    """A round after the first is running and has written a record (not all of them)."""
    try:
        state = read_state(folder)
    except Exception:
        return False
    if state is None or not state.rounds or state.rounds[-1].status != "running":
        return False
    entry = state.rounds[-1]
    records = folder / "rounds" / entry.run_id / "records.jsonl"
    return entry.index >= 1 and records.exists() and records.read_bytes().count(b"\n") >= 1


def test_a_watch_killed_mid_round_and_restarted_loses_no_round_and_doubles_none(
    tmp_path: Path,
) -> None:
    with TruthServer(first_token_ms=300, token_interval_ms=2, tokens=4) as srv:
        throttled = srv.base_url.replace(
            "/v1", "/fail=http_status/fail_status=429/retry_after_s=1/v1"
        )
        common = "kind: openai_compatible, model: m, retries: 0"
        cfg = tmp_path / "watch.yaml"
        cfg.write_text(
            "name: served\n"
            f"output_dir: {tmp_path / 'results'}\n"
            "providers:\n"
            f"  - {{id: up, {common}, base_url: '{srv.base_url}'}}\n"
            f"  - {{id: busy, {common}, base_url: '{throttled}'}}\n"
            "experiments:\n"
            f"  - {{kind: single, prompt_cache: as_sent, prompts: [hi], repeats: {REPEATS}, "
            "warmup: 0, params: {max_tokens: 4}}\n"
            f"watch: {{every: 1h, rounds: {ROUNDS}, "
            f"clock: {{kind: simulated, start: '{START}'}}}}\n"
        )
        folder = tmp_path / "results" / "watch-served"
        with (tmp_path / "first.log").open("w") as log:
            first = subprocess.Popen(
                _labkit("watch", str(cfg)), stdout=log, stderr=subprocess.STDOUT
            )
            try:
                _wait_for(lambda: _mid_round(folder), "a round in flight")
            finally:
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=30)
        cut = read_state(folder)
        assert cut is not None and cut.rounds[-1].status == "running"
        status = subprocess.run(
            _labkit("watch", "status", str(folder)), capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0, status.stderr
        assert "not running" in status.stdout
        assert f"round {cut.rounds[-1].index} was cut short" in status.stdout
        again = subprocess.run(
            _labkit("watch", str(cfg)), capture_output=True, text=True, timeout=300
        )
    assert again.returncode == 0, again.stdout + again.stderr
    lines = again.stdout.splitlines()
    assert f"round {cut.rounds[-1].index}: cut short by a stop; finishing it now" in lines
    assert lines[-1] == f"watch stopped: {ROUNDS} rounds done (watch.rounds)"
    round_lines = [line for line in lines if line.startswith("round ") and " · " in line]
    assert all(f"requests {REPEATS} ok, {REPEATS} throttled, 0 failed" in x for x in round_lines)

    state = read_state(folder)
    assert state is not None and not state.missed
    assert [r.index for r in state.rounds] == list(range(ROUNDS))
    assert all(r.status == "throttled" and r.loaded for r in state.rounds)
    store = open_store(str(folder / "watch.duckdb"), create=False)
    try:
        rounds = store.rounds(state.watch_id)
        probes = store.probes(state.watch_id)
        by_hour, by_status = (store.query(sql) for sql in _documented_queries())
    finally:
        store.close()
    # docs/watch.md's queries answer from this store: a round per simulated hour 00-03 UTC.
    assert list(by_hour["provider"]) == ["up"] * ROUNDS
    assert list(by_hour["hour"]) == list(range(ROUNDS))
    assert list(by_hour["n"]) == [REPEATS] * ROUNDS
    assert by_status.values.tolist() == [["throttled", ROUNDS]]
    assert list(rounds["index"]) == list(range(ROUNDS))  # each round once
    assert set(rounds["status"]) == {"throttled"}
    assert probes["record_id"].is_unique  # no record twice
    per_round = probes.groupby(["round.index", "provider"]).size()
    assert set(per_round) == {REPEATS}  # the cut round finished: every request once
    busy = probes[probes["provider"] == "busy"]
    assert set(busy["error.status"]) == {429} and set(busy["error.retry_after_s"]) == {1.0}
    for index, group in probes.groupby("round.index"):
        nonce = state.rounds[int(index)].nonce
        assert set(group["tags.watch_nonce"]) == {nonce}
        assert set(group["tags.watch_round"]) == {index}
    assert len({r.nonce for r in state.rounds}) == ROUNDS


def test_every_request_of_a_simulated_round_carries_its_time_and_its_nonce(
    tmp_path: Path,
) -> None:
    events = [sse(oa_chunk("ok", finish="stop")), b"data: [DONE]\n\n"]
    with MisbehavingServer(lambda _: sse_reply(events)) as server:
        config = parse_config(
            {
                "name": "headers",
                "output_dir": str(tmp_path),
                "providers": [
                    {
                        "id": "s",
                        "kind": "openai_compatible",
                        "model": "m",
                        "base_url": f"{server.base_url}/v1",
                    }
                ],
                "experiments": [
                    {"kind": "single", "prompt_cache": "as_sent", "prompts": ["a"], "repeats": 2},
                    {"kind": "single", "prompt_cache": "as_sent", "prompts": ["b"], "repeats": 1},
                ],
                "watch": {
                    "every": "1h",
                    "rounds": 3,
                    "clock": {"kind": "simulated", "start": START},
                    "keep_cache": ["single#1"],
                },
            }
        )
        run_watch(config, tmp_path / "w")
        requests = list(server.requests)
    state = read_state(tmp_path / "w")
    assert state is not None
    start = datetime.fromisoformat(START).astimezone(UTC).timestamp()
    assert len(requests) == 3 * (1 + 2 + 1 + 1)  # warm-ups and repeats of both, per round
    seen: dict[str, set[str]] = {}
    for raw in requests:
        head, _, body = raw.partition(b"\r\n\r\n")
        headers = dict(line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:])
        sim = float(headers["x-labkit-sim-time"])
        index = round((sim - start) / 3600)
        assert sim == start + 3600 * index and 0 <= index < 3
        messages = json.loads(body)["messages"]
        text = " ".join(m["content"] for m in messages)
        nonce = state.rounds[index].nonce
        assert nonce is not None
        if messages[-1]["content"] == "b":  # keep_cache: sent as written
            assert "Probe" not in text
        else:
            assert messages[0] == {"role": "system", "content": f"Probe {nonce}."}
        seen.setdefault(str(index), set()).add(nonce)
    assert all(len(nonces) == 1 for nonces in seen.values()) and len(seen) == 3
    assert os.path.exists(tmp_path / "w" / "watch.duckdb")
