"""`determinism_load` on the real llama-server with several slots (no mocks, no skips): every
level of three is there with its replies, what the answer says about them agrees with the
texts the records hold, whichever way the replies came out, and so does what it names as
having controlled the selection (batch, or not), with the server's own count of sequences per
decode batch beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.analysis.determinism_load import SERVER_TOKENS, shares_batch
from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.records import RequestRecord
from tests.support.lab_runs import run_lab

pytestmark = pytest.mark.e2e

REPEATS = 4

CONFIG = f"""
name: determinism-load-real
providers:
  - {{id: local, kind: llamacpp, ctx_size: 512, slots: 4}}
experiments:
  - {{kind: determinism_load, repeats: {REPEATS}, concurrency: [1, 2, 4], top_logprobs: 2,
      params: {{temperature: 0, max_tokens: 16}}}}
"""


def test_levels_replies_and_divergence_agree_with_the_records(tmp_path: Path) -> None:
    run_dir, lab = run_lab(tmp_path, CONFIG, "detload.yaml")
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, DeterminismLoadFigures) and answer.status == "ok", answer.answer
    records = [
        RequestRecord.from_json_line(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    measured = [r for r in records if not r.warmup]
    assert f.server_slots == 4 and f.inspected and f.server_build
    assert [row.concurrency for row in f.levels] == [1, 2, 4]
    for row in f.levels:
        mine = sorted(
            (r for r in measured if r.tags["concurrency"] == row.concurrency),
            key=lambda r: r.trial,
        )
        texts = [r.output_text or "" for r in mine]
        assert len(mine) == row.n == REPEATS and all(r.error is None for r in mine)
        assert all(r.tags["level"] == f"c{row.concurrency}" for r in mine)
        assert row.distinct_outputs == len(set(texts))
        assert row.identical == (len(set(texts)) == 1)
        assert row.peak_in_flight is not None and 1 <= row.peak_in_flight <= row.concurrency
        assert row.server_builds and row.tokens_from == SERVER_TOKENS
        # The server's own counters: sequences per decode batch during the level.
        assert row.decode_batch is not None and 1 <= row.decode_batch <= 4
        assert len(row.outputs) == REPEATS
        k = row.first_different_token
        if k is None:
            assert row.identical and all(out == row.outputs[0] for out in row.outputs)
            assert f"at concurrency {row.concurrency}, all {REPEATS} replies were identical" in (
                answer.answer
            )
        else:
            # The same k - 1 tokens in every reply, then a reply that differs (or ended).
            assert not row.identical
            shared = row.outputs[0][: k - 1]
            assert all(out[: k - 1] == shared for out in row.outputs)
            assert len({tuple(out[k - 1 : k]) for out in row.outputs}) > 1
            assert all(t.startswith("".join(shared)) for t in texts)
            assert f"first different at token {k}" in answer.answer
            if row.divergence is not None:
                assert row.divergence.step == k - 1
                assert len({c.token for c in row.divergence.taken}) >= 2
    assert "The server decodes up to 4 requests in one batch (4 slots)" in answer.answer
    assert f.levels[0].decode_batch == 1  # one at a time: one sequence per decode
    assert "sequences per decode batch, by its own counters: 1.0 at concurrency 1" in (
        answer.answer
    )
    # What controlled the selection, as the levels' counts say.
    alone, *together = f.levels
    shared = [r for r in together if shares_batch(r, f.server_slots)]
    if not alone.identical:
        assert f.batch_changed_selection is None
        assert "even the replies sent one at a time differed" in answer.answer
    elif not shared:
        assert f.batch_changed_selection is None and "was not tested" in answer.answer
    elif all(r.identical and r.same_as_first_level == r.n for r in shared):
        assert f.batch_changed_selection is False
        assert "What controlled the selection: not the batch." in answer.answer
        named = ", ".join(str(r.concurrency) for r in f.levels[:-1])
        assert (
            f"batch did not change the selection at concurrency {named} and 4: 1 distinct "
            "reply at each"
        ) in answer.answer
        assert f"its build {f.server_build} gave every sequence the same tokens" in answer.answer
    else:
        assert f.batch_changed_selection is True
        assert "What controlled the selection: the batch." in answer.answer
    assert "determinism mode not reported" in answer.answer
