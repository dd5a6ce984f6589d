"""What controlled the selection, from `determinism_load`'s levels: the batch when replies
sent together differed while the ones sent alone did not, not the batch when every level gave
one reply on a server that batches, undetermined otherwise; and the server's own count of
sequences per decode batch (llama-server /metrics) read from its counters."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.analysis.determinism_load import (
    batch_changed,
    decode_batch,
    decode_counters,
    shares_batch,
)
from labkit.figures.determinism_load import DeterminismLoadFigures, DeterminismLoadLevel
from labkit.wording.determinism_load import determinism_load_answer

pytestmark = pytest.mark.unit


def level(c: int, distinct: int = 1, **extra: Any) -> DeterminismLoadLevel:
    return DeterminismLoadLevel(
        concurrency=c,
        n=4,
        identical=distinct == 1,
        distinct_outputs=distinct,
        tokens_from="characters",
        peak_in_flight=c,
        **extra,
    )


def test_one_reply_everywhere_on_a_batching_server_is_not_the_batch() -> None:
    rows = [level(1), level(4, same_as_first_level=4), level(8, same_as_first_level=4)]
    assert batch_changed(rows, slots=4) is False
    f = DeterminismLoadFigures(
        params={"temperature": 0},
        levels=[rows[0], rows[1].model_copy(update={"decode_batch": 3.9}), rows[2]],
        server_slots=4,
        server_build="b1-0c1e570",
        batch_changed_selection=False,
    )
    text = determinism_load_answer(f)
    assert (
        "What controlled the selection: not the batch. With temperature 0 and no seed at every "
        "level, batch did not change the selection at concurrency 1, 4 and 8: 1 distinct reply "
        "at each"
    ) in text
    assert "the server decodes its slots' sequences in one batch (up to 4)" in text
    assert "decoded on average up to 3.9 sequences per batch" in text
    assert "its build b1-0c1e570 gave every sequence the same tokens" in text
    assert "sequences per decode batch, by its own counters: 3.9 at concurrency 4" in text


def test_replies_that_part_only_together_are_the_batch() -> None:
    assert batch_changed([level(1), level(8, distinct=3)], slots=8) is True
    # Every request of the batched level took the same other reply.
    assert batch_changed([level(1), level(8, same_as_first_level=0)], slots=8) is True


def test_what_cannot_be_told_is_none() -> None:
    # The replies sent alone already differed: something besides the batch moved them.
    assert batch_changed([level(1, distinct=2), level(8, distinct=3)], slots=8) is None
    # One slot: nothing shared a batch.
    assert batch_changed([level(1), level(8, distinct=3)], slots=1) is None
    # No level sent alone.
    assert batch_changed([level(4), level(8)], slots=8) is None
    f = DeterminismLoadFigures(params={"temperature": 0}, levels=[level(1, distinct=2)])
    assert "even the replies sent one at a time differed" in determinism_load_answer(f)


def test_a_server_that_decoded_one_sequence_per_batch_shared_none() -> None:
    assert not shares_batch(level(4, decode_batch=1.0), slots=4)
    assert shares_batch(level(4, decode_batch=2.5), slots=4)
    assert not shares_batch(level(1), slots=None)


def test_decode_batches_from_the_servers_counters() -> None:
    before = decode_counters(
        "# HELP llamacpp:n_decode_total Total number of llama_decode() calls\n"
        "llamacpp:n_decode_total 10\nllamacpp:n_busy_slots_per_decode 1\n"
    )
    after = decode_counters("llamacpp:n_decode_total 30\nllamacpp:n_busy_slots_per_decode 2.5\n")
    assert before == (10.0, 10.0) and after == (30.0, 75.0)
    assert decode_batch(before, after) == pytest.approx(65 / 20)
    assert decode_batch(after, after) is None
    assert decode_counters("llamacpp:requests_processing 0\n") is None
    assert decode_batch(None, after) is None
