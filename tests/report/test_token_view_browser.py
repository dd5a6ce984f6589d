"""`token_view` on the real llama-server and the real model, its page in a real headless
Chromium (no mocks, no skips): one row per streamed token, the rows' texts joining to the
reply, probabilities in [0, 1], llama-server's own per-token times present and never going
back, the repeat's prompt read from the cache; the timeline is drawn with marks, the table
holds a row per token, hovering a token shows its candidates, and no console errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.figures.token_view import TokenViewFigures
from labkit.local import ensure_setup
from labkit.records import LabResults, RequestRecord
from tests.report.test_html_browser import Cdp, _evaluate, browser

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["browser"]  # the real-browser fixture, shared with the whole report's test

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
name: token-view-real
providers:
  - {id: local, kind: llamacpp, ctx_size: 1024, slots: 1}
experiments:
  - {kind: token_view, sends: 2, top_logprobs: 3, params: {max_tokens: 12, temperature: 0}}
"""

_TABLE_ROWS = """
JSON.stringify([...document.querySelectorAll('table')]
  .filter(t => t.querySelector('th') && t.querySelector('th').innerText.trim() === '#')
  .map(t => t.querySelectorAll('tbody tr').length))
"""

_HOVER_TARGET = """
JSON.stringify((() => {
  const dot = document.querySelector('div.chart[data-chart="token_view"] svg .mark-symbol path');
  const box = dot.getBoundingClientRect();
  return [box.x + box.width / 2, box.y + box.height / 2];
})())
"""


def test_the_token_view_of_the_bundled_model_in_headless_chromium(
    tmp_path: Path, browser: Cdp
) -> None:
    ensure_setup()
    cfg = tmp_path / "tv.yaml"
    cfg.write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(cfg), "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if (p / "lab.json").exists()]
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    (answer,) = [a for a in lab.answers if a.experiment == "token_view"]
    f = answer.figures
    assert isinstance(f, TokenViewFigures) and answer.status == "ok", answer.answer
    assert f.not_reported == [] and len(f.replies) == 2
    records = sorted(
        (
            RequestRecord.from_json_line(line)
            for line in (run_dir / "records.jsonl").read_text().splitlines()
            if line.strip()
        ),
        key=lambda r: r.trial,
    )
    assert [r.params.get("timings_per_token") for r in records] == [True, True]
    for reply, record in zip(f.replies, records, strict=True):
        assert reply.rows_are == "tokens"
        assert len(reply.rows) == len(record.client.event_offsets_ms) == record.usage.output_tokens
        assert "".join(row.text for row in reply.rows) == record.output_text == reply.output_text
        assert all(row.p is not None and 0 <= row.p <= 1 for row in reply.rows)
        assert all(0 <= c.p <= 1 for row in reply.rows for c in row.candidates)
        times = [row.server_ms for row in reply.rows]
        assert all(t is not None for t in times), times
        known = [t for t in times if t is not None]
        assert known == sorted(known) and known[0] > 0
    first, repeat = f.replies
    assert first.from_cache is False and repeat.from_cache is True
    assert (repeat.cached_tokens or 0) > (first.cached_tokens or 0)
    assert repeat.cached_tokens == records[1].provider_timings.cached_tokens

    html = run_dir / "report.html"
    session = browser.open_page(html.resolve().as_uri())
    tokens = sum(len(r.rows) for r in f.replies)
    marks = browser.chart_marks(session, "token_view")
    # a dot and a label per token, on the client's row and on the server's
    assert marks["token_view"] >= 4 * tokens, marks
    assert _evaluate(browser, session, _TABLE_ROWS) == [len(r.rows) for r in f.replies]

    tip = browser.tooltip(session, *_evaluate(browser, session, _HOVER_TARGET), "candidates")
    assert "candidates" in tip and "server time" in tip, tip
    assert browser.page_errors(session) == []
