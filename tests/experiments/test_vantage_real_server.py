"""`vantage` on the real llama-server (no mocks, no skips): the example's two routes, 0 ms
and 40 ms apart, each carry every trial; the replies agree across the routes (the same
prompt at temperature 0 on the same server); the answer states each vantage's shares and
the paired shift with the records' counts, whichever way the proof came out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from labkit.figures.vantage import VantageFigures
from labkit.records import RequestRecord
from tests.support.lab_runs import run_lab

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "labkit" / "examples" / "vantage.yaml"
REPEATS = 6


def test_two_routes_on_the_bundled_model_agree_and_are_paired(tmp_path: Path) -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    config["experiments"][0]["repeats"] = REPEATS
    run_dir, lab = run_lab(tmp_path, yaml.safe_dump(config), "vantage.yaml")
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, VantageFigures) and answer.status == "ok", answer.answer
    records = [
        RequestRecord.from_json_line(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    measured = [r for r in records if not r.warmup]
    assert all(r.error is None for r in records)
    assert [(v.name, v.route, v.delay_ms, v.n) for v in f.vantages] == [
        ("near", "relay", 0, REPEATS),
        ("far", "relay", 40, REPEATS),
    ]
    for name in ("near", "far"):
        mine = [r for r in measured if r.tags["vantage"] == name]
        assert sorted(r.trial for r in mine) == list(range(REPEATS))
        # llama-server's own account is there, so the provider's share is derived
        assert all(r.provider_timings.prefill_ms is not None for r in mine)
    # the same request from either route: the same reply, the same prompt tokens
    assert len({r.output_text for r in measured}) == 1
    assert len({r.usage.input_tokens for r in measured}) == 1
    (shift,) = f.shifts
    assert (shift.name, shift.reference, shift.pairs, shift.configured_ms) == (
        "far",
        "near",
        REPEATS,
        40,
    )
    for m in (shift.provider_ms, shift.network_ms, shift.ttft_ms):
        assert m is not None and m.n == REPEATS and m.lo is not None and m.hi is not None
    assert shift.provider_unchanged is not None and shift.network_matches is not None
    assert f.proven == (shift.provider_unchanged and shift.network_matches)
    lead = "The split is proven" if f.proven else "did not confirm the split"
    assert lead in answer.answer and "far against near (+40 ms configured" in answer.answer
