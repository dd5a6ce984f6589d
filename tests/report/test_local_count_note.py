"""The report flags labkit's prompt count disagreeing with usage beyond the chat framing."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.report.build import missing_notes
from labkit.report.load import load_run
from labkit.report.stats import run_stats
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _notes(tmp_path: Path, diffs: list[int | None]) -> list[str]:
    records = []
    for diff in diffs:
        rec = make_record(provider="gpt", provider_kind="openai")
        rec.usage.input_tokens_local_diff = diff
        records.append(rec)
    run = load_run(write_run(tmp_path / "run", records))
    notes = missing_notes(run, run_stats(run.lab, run.run_dir))
    return [n for n in notes if "local prompt count" in n]


def test_a_disagreement_is_flagged_with_its_size(tmp_path: Path) -> None:
    notes = _notes(tmp_path, [0, 4, 7, None])
    assert notes == [
        "gpt: labkit's local prompt count and the provider's usage disagree beyond the chat "
        "framing in 2 of 3 requests (by +4 to +7 tokens, usage.input_tokens_local_diff): the "
        "model → encoding map or the framing is off for this model."
    ]


def test_agreement_or_no_local_count_is_not_flagged(tmp_path: Path) -> None:
    assert _notes(tmp_path, [0, 0]) == []
    assert _notes(tmp_path / "none", [None, None]) == []
