"""A huge plan starts sending at once, holds only what is in flight, and stops on Ctrl-C.

`labkit run --repeats 100000000` against a fast server on 127.0.0.1, in a real subprocess:
records appear while the process holds a few hundred MB at most (the plan is drawn lazily:
10^8 planned requests built first would take gigabytes, and minutes before the first
record), and SIGINT ends the run with the manifest `interrupted` and every record kept.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.records import RequestRecord
from tests.providers.streams import oa_chunk, sse
from tests.support.misbehaving import MisbehavingServer, sse_reply

pytestmark = pytest.mark.integration


def _default_sigint() -> None:
    # A test run from a background job inherits SIGINT as ignored; the child must not.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_huge_repeats_start_at_once_and_ctrl_c_stops_them(tmp_path: Path) -> None:
    events = [sse(oa_chunk("ok", finish="stop")), b"data: [DONE]\n\n"]
    with MisbehavingServer(lambda _: sse_reply(events)) as server:
        cfg = tmp_path / "huge.yaml"
        cfg.write_text(
            "name: huge\n"
            "providers: [{id: s, kind: openai_compatible, model: m, concurrency: 4, "
            f"base_url: '{server.base_url}'}}]\n"
            "experiments: [{kind: single, prompt_cache: as_sent, prompts: [hi], warmup: 0}]\n"
        )
        out = tmp_path / "runs"
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "labkit",
                "run",
                str(cfg),
                "--out",
                str(out),
                "--no-report",
                "--repeats",
                "100000000",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_default_sigint,
        )
        records_path = None
        # A hang guard only: what shows the plan is lazy is the memory held (below).
        while time.monotonic() - t0 < 600:
            found = list(out.glob("*/records.jsonl")) if out.exists() else []
            if found and len(found[0].read_text().splitlines()) >= 20:
                records_path = found[0]
                break
            time.sleep(0.1)
        assert records_path is not None, "no records within 600 s: the plan was not lazy"
        rss_kib = int(
            next(
                line.split()[1]
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
        )
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    assert rss_kib < 400 * 1024, f"{rss_kib} KiB resident: the plan was held in memory"
    manifest = json.loads((records_path.parent / "manifest.json").read_text())
    lines = records_path.read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines]
    assert manifest["status"] == "interrupted" and manifest["records"] == len(records)
    assert sum(r.error is None for r in records) >= 20
