"""The prompt-cache probe graded against the truth server: a server whose prefix cache keeps
an entry 0.6 s after its last use, serves prompts of 100 tokens or more, holds about two
probes' prompts (LRU) and sits behind two replicas routed by `prompt_cache_key`. The probe
must recover the lifetime within its bracket, and every row's hits, the TTFT and the money
a hit saved must agree with what the server really did (`labkit.scoring.grading`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.figures.prompt_cache import PromptCacheFigures
from labkit.records import LabResults
from labkit.scoring.grading import grade_run
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from labkit.truth.schedule import LAB_SCHEDULE

pytestmark = pytest.mark.integration

TTL_S = 0.6
SCHEDULE = {
    **LAB_SCHEDULE,
    "cache_ttl_s": TTL_S,
    "cache_min_tokens": 100,
    "cache_tokens": 400,
    "cache_replicas": 2,
    "slots": 1,
}


def _config(base_url: str) -> dict[str, object]:
    return {
        "name": "prompt-cache-truth",
        "providers": [
            {
                "id": "local",
                "kind": "llamacpp",
                "managed": False,
                "exclusive": True,
                "slots": 1,
                "base_url": base_url,
            }
        ],
        "experiments": [
            {
                "kind": "prompt_cache",
                "repeats": 2,
                "warmup": 0,
                "prefix_tokens": [60, 150],
                "probe_tokens": 150,
                "gaps_s": [0.2, 0.4, 0.9, 1.4],
                "evict_after": [0, 1, 3],
                "concurrency": [2],
                "routing_key": "prompt_cache_key",
                "prices": {"input": 2.0, "cached_input": 0.5},
            }
        ],
    }


def test_the_probe_recovers_the_truth_servers_cache(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    with TruthServer(truth_log=log, seed=0, **SCHEDULE) as server:
        path = tmp_path / "probe.yaml"
        path.write_text(yaml.safe_dump(_config(server.base_url)))
        out = tmp_path / "runs"
        result = CliRunner().invoke(app, ["run", str(path), "--no-report", "--out", str(out)])
        assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, PromptCacheFigures) and answer.status == "ok", answer.answer

    # the lifetime the server was given lies in the bracket the gaps found
    assert f.lifetime is not None and f.lifetime.consistent
    assert f.lifetime.lo_s is not None and f.lifetime.hi_s is not None
    assert f.lifetime.lo_s < TTL_S <= f.lifetime.hi_s
    rows = {(r.phase, r.label): r for r in f.rows}
    # below the minimum nothing is cached, above it every repeat hits
    assert rows["length", "60 tokens"].hits == 0 and rows["length", "60 tokens"].repeats == 2
    assert rows["length", "150 tokens"].hits == 2
    # two probes' prompts fit the cache: one other prompt leaves the prefix, three evict it
    assert rows["evict", "after 1 other prompt"].hits == 2
    assert rows["evict", "after 3 other prompts"].hits == 0
    # a key sends the repeat to its prime's replica; without one it goes to the other
    assert rows["routing", "with a routing key"].hits == 2
    assert rows["routing", "without a routing key"].hits == 0
    assert rows["concurrency", "2 at once"].hits == 4
    assert f.ttft_saved is not None and f.ttft_saved.value is not None and f.money is not None
    assert "between" in answer.answer

    grade = grade_run(run_dir, read_truth_log(log))
    wrong = [f"{c.name}: stated {c.stated}, true {c.true} ({c.why})" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    checked = {c.name: c.ok for c in grade.checks}
    assert checked["cache lifetime (bracket)"] is True
    assert checked["TTFT a hit saved (paired mean)"] is True
    assert checked["money a hit saved (mean)"] is True
    assert checked["routing · without a routing key: repeats that hit"] is True
    assert grade.unmatched == 0 and grade.not_graded == []
    print(answer.answer)
    for c in grade.checks:
        print(f"{c.name}: stated {c.stated}, true {c.true}")


def test_the_example_under_run_truth_is_graded_right(tmp_path: Path) -> None:
    """`labkit run --truth --example prompt_cache`: the lab's truth server keeps its cache
    without a lifetime, so the bracket is a lower bound that must hold, and every row's hits
    are the server's."""
    out = tmp_path / "runs"
    args = ["run", "--example", "prompt_cache", "--truth", "--no-report", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    grade = grade_run(run_dir, read_truth_log(run_dir / "truth.jsonl"))
    wrong = [f"{c.name}: stated {c.stated}, true {c.true} ({c.why})" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    checked = {c.name: c.ok for c in grade.checks}
    assert checked["cache lifetime (bracket)"] is True
    assert checked["evict · after 3 other prompts: repeats that hit"] is True
    assert grade.unmatched == 0 and grade.not_graded == []
