"""`determinism_load` on the fake provider, the whole run path in process: identical replies
at every level, a divergence at a scripted step between scripted candidates, and a provider
that cannot return logprobs (compared on a ruler, its candidates named as not inspected);
and the report's picture of the replies."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from labkit.analysis.determinism_load import SERVER_TOKENS, first_difference, peak_in_flight
from labkit.config import parse_config
from labkit.experiments.determinism_load import DeterminismLoadSettings
from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.providers.fake import FakeProvider, FakeTransport
from labkit.records import LabAnswer, LabResults, RequestRecord
from labkit.report.kinds.determinism_load import determinism_load_chart
from labkit.runner import RunOptions, prepare_run, run_lab
from tests.support.records import make_record

pytestmark = pytest.mark.unit

FAST = {"first_token_ms": 0, "token_interval_ms": 0, "tokens": 5}

#: A scripted step: the token taken, its probability, and the top candidates.
Step = tuple[str, float, list[tuple[str, float]]]

#: Reply A and reply B share two tokens; at token 3 A's top two are ' sea' 0.51 and
#: ' shore' 0.49 (A takes ' sea'), B's ' shore' 0.50 and ' sea' 0.48 (B takes ' shore').
A: list[Step] = [
    ("The", 0.9, [("The", 0.9), ("A", 0.05)]),
    (" keeper", 0.8, [(" keeper", 0.8), (" man", 0.1)]),
    (" sea", 0.51, [(" sea", 0.51), (" shore", 0.49)]),
    (" slept", 0.7, [(" slept", 0.7), (" woke", 0.2)]),
]
B: list[Step] = [
    *A[:2],
    (" shore", 0.50, [(" shore", 0.50), (" sea", 0.48)]),
    (" waited", 0.6, [(" waited", 0.6), (" slept", 0.3)]),
]


def _chunk(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _entry(token: str, p: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    alternatives = [{"token": t, "logprob": math.log(q)} for t, q in top]
    return {"token": token, "logprob": math.log(p), "top_logprobs": alternatives}


async def _reply(steps: list[Step], logprobs: bool) -> AsyncIterator[bytes]:
    for token, p, top in steps:
        choice: dict[str, Any] = {"index": 0, "delta": {"content": token}}
        if logprobs:
            choice["logprobs"] = {"content": [_entry(token, p, top)]}
        yield _chunk({"id": "c", "choices": [choice]})
    yield _chunk({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    usage = {"prompt_tokens": 9, "completion_tokens": len(steps)}
    yield _chunk({"id": "c", "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


class _Body(httpx.AsyncByteStream):
    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._source:
            yield piece


def script(monkeypatch: pytest.MonkeyPatch, alone: int, pairs: int = 2) -> None:
    """The fake answers its first `alone` requests (one at a time) with reply A, then holds
    each request until `pairs` are in flight and answers them A, B, A, B, ..."""
    arrivals = itertools.count()
    barrier: list[asyncio.Barrier] = []

    async def handle(self: FakeTransport, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        n = next(arrivals)
        if n >= alone:
            if not barrier:
                barrier.append(asyncio.Barrier(pairs))
            await barrier[0].wait()
        steps = A if n < alone or (n - alone) % 2 == 0 else B
        stream = _reply(steps, bool(body.get("logprobs")))
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=_Body(stream))

    monkeypatch.setattr(FakeTransport, "handle_async_request", handle)


def run(tmp_path: Path, **experiment: Any) -> tuple[LabAnswer, list[RequestRecord]]:
    cfg = parse_config(
        {
            "name": "detload",
            "providers": [{"id": "f", "kind": "fake", "schedule": FAST}],
            "experiments": [{"kind": "determinism_load", "warmup": 0, **experiment}],
        }
    )
    result = asyncio.run(run_lab(prepare_run(cfg, RunOptions(out_dir=tmp_path))))
    (answer,) = result.lab.answers
    return answer, result.records


def test_identical_replies_at_every_level(tmp_path: Path) -> None:
    answer, records = run(tmp_path, repeats=4, concurrency=[1, 2])
    f = answer.figures
    assert isinstance(f, DeterminismLoadFigures) and answer.status == "ok"
    assert [r.concurrency for r in f.levels] == [1, 2]
    for row in f.levels:
        assert (row.n, row.identical, row.distinct_outputs) == (4, True, 1)
        assert row.first_different_token is None and row.divergence is None
        assert row.peak_in_flight is not None and 1 <= row.peak_in_flight <= row.concurrency
    assert f.levels[1].same_as_first_level == 4
    # Each record carries its level; a level's requests are all the same request.
    assert sorted(r.tags["concurrency"] for r in records) == [1] * 4 + [2] * 4
    assert {r.tags["level"] for r in records} == {"c1", "c2"}
    # The fake answers `logprobs` as the truth server does: each step's candidates came back.
    assert f.inspected and f.not_inspected_because is None
    assert all(r.params.get("top_logprobs") == 2 for r in records)
    assert answer.answer.startswith(
        "Identical requests at temperature 0: at concurrency 1, all 4 replies were identical; "
        "at concurrency 2, all 4 replies were identical, the same as at concurrency 1"
    )
    assert "Candidates not inspected" not in answer.answer
    assert "Batch setting not reported; server_build not reported" in answer.answer
    # No slots reported: batch changed nothing where some level shared a batch, else untested.
    shared = any((r.peak_in_flight or 1) > 1 for r in f.levels)
    assert f.batch_changed_selection is (False if shared else None)
    assert ("not the batch" if shared else "was not tested") in answer.answer
    assert "determinism mode not reported." in answer.answer


def test_a_divergence_at_a_known_step_names_its_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script(monkeypatch, alone=4)
    answer, _ = run(tmp_path, repeats=4, concurrency=[1, 2])
    f = answer.figures
    assert isinstance(f, DeterminismLoadFigures) and f.inspected
    alone, paired = f.levels
    assert alone.identical and alone.prob_drift == 0 and alone.greedy is True
    assert paired.distinct_outputs == 2 and paired.identical is False
    assert paired.first_different_token == 3 and paired.tokens_from == SERVER_TOKENS
    assert paired.same_as_first_level == 2
    d = paired.divergence
    assert d is not None and d.step == 2 and d.prefix == "The keeper"
    assert {c.token for c in d.taken} == {" sea", " shore"}
    assert [c.token for c in d.candidates] in ([" sea", " shore"], [" shore", " sea"])
    assert d.margin == pytest.approx(0.02)
    # Before the split both replies took the same tokens with the same probabilities.
    assert paired.prob_drift == 0
    assert paired.narrowest is not None and paired.narrowest.token == 2
    assert paired.peak_in_flight == 2
    assert "at concurrency 1, all 4 replies were identical;" in answer.answer
    assert "at concurrency 2, 2 distinct replies of 4 (2 of them concurrency 1's reply), " in (
        answer.answer
    )
    assert "first different at token 3, where the top two candidates were" in answer.answer
    assert ": a near-tie that batched arithmetic can flip" in answer.answer
    assert f.batch_changed_selection is True
    assert (
        "What controlled the selection: the batch. With temperature 0 and no seed at every "
        "level, the replies sent one at a time were identical, and sharing a batch changed "
        "them: 2 distinct replies of 4 at concurrency 2, first different at token 3, where the "
        "top two were 0.51 vs 0.49 (margin 0.02)"
    ) in answer.answer
    chart = determinism_load_chart(LabResults(run_id="r", answers=[answer]))
    assert chart is not None and chart.png.startswith(b"\x89PNG")
    rows: dict[str, list[str]] = {}
    for v in chart.spec["data"]["values"]:
        rows.setdefault(v["row"], []).append(v["status"])
    # One row per distinct reply of each level: c1's one reply, c2's two.
    assert sorted(rows) == [
        "f · concurrency 1 · reply 1 (4 of 4)",
        "f · concurrency 2 · reply 1 (2 of 4)",
        "f · concurrency 2 · reply 2 (2 of 4)",
    ]
    same = "same as the first reply"
    assert rows["f · concurrency 2 · reply 2 (2 of 4)"] == [
        same,
        same,
        "first different token",
        "after it",
    ]
    assert "after the same prefix the replies ranked first ' sea' (p 0.51) and " in (
        answer.answer
    ) or "after the same prefix the replies ranked first ' shore' (p 0.50) and " in (answer.answer)


def test_a_provider_without_logprobs_is_compared_on_a_ruler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FakeProvider, "logprob_params", lambda self, top_k: {})
    script(monkeypatch, alone=0)
    answer, records = run(tmp_path, repeats=2, concurrency=[2])
    f = answer.figures
    assert isinstance(f, DeterminismLoadFigures)
    assert not any("logprobs" in r.params for r in records)
    (row,) = f.levels
    assert row.distinct_outputs == len({r.output_text for r in records}) == 2
    assert row.tokens_from != SERVER_TOKENS and row.divergence is None
    assert row.prob_drift is None and row.narrowest is None
    texts = sorted(r.output_text or "" for r in records)
    assert texts == ["The keeper sea slept", "The keeper shore waited"]
    # The first different token is counted on the ruler: the same pieces before it.
    k = row.first_different_token
    assert k is not None and [o[: k - 1] for o in row.outputs] == [row.outputs[0][: k - 1]] * 2
    assert row.outputs[0][k - 1] != row.outputs[1][k - 1]
    assert f"first different at token {k} (counted in {row.tokens_from} tokens" in answer.answer
    assert "Candidates not inspected: the provider cannot return logprobs" in answer.answer


def test_first_difference_counts_an_early_end_as_a_difference() -> None:
    assert first_difference([[1, 2, 3], [1, 2, 3]]) is None
    assert first_difference([[1, 2, 3]]) is None
    assert first_difference([[1, 2, 3], [1, 9, 3], [1, 2, 8]]) == 1
    assert first_difference([[1, 2, 3], [1, 2]]) == 2


def test_peak_in_flight_from_start_and_end_times() -> None:
    def rec(start_ms: float, e2e_ms: float, host: str = "h") -> RequestRecord:
        r = make_record(experiment="determinism_load", e2e_ms=e2e_ms)
        return r.model_copy(update={"t_start_mono_ns": int(start_ms * 1e6), "host": host})

    # [0, 10) [5, 15) [10, 20): two at once; one that starts as another ends never overlaps.
    assert peak_in_flight([rec(0, 10), rec(5, 10), rec(10, 10)]) == 2
    assert peak_in_flight([rec(0, 10), rec(0, 10), rec(0, 10)]) == 3
    assert peak_in_flight([rec(0, 10), rec(5, 10, host="other")]) is None


def test_settings_refuse_idle_streams_and_repeated_levels() -> None:
    with pytest.raises(ValidationError, match="leaves streams idle"):
        DeterminismLoadSettings(repeats=4, concurrency=[1, 8])
    with pytest.raises(ValidationError, match="each level once"):
        DeterminismLoadSettings(repeats=4, concurrency=[2, 2])
    assert DeterminismLoadSettings().concurrency == [1, 4, 8]


def test_a_level_whose_ray_node_died_is_partial_and_says_how_to_finish_it(
    tmp_path: Path,
) -> None:
    """A level the runner read as partial from the Ray executor (`partial_levels`: its
    node died, with or without a request in flight) is not a whole answer."""
    cfg = parse_config(
        {
            "name": "detload",
            "providers": [{"id": "f", "kind": "fake", "schedule": FAST}],
            "experiments": [
                {"kind": "determinism_load", "warmup": 0, "repeats": 4, "concurrency": [1, 2]}
            ],
        }
    )
    runner = prepare_run(cfg, RunOptions(out_dir=tmp_path))
    result = asyncio.run(run_lab(runner))
    assert result.lab.answers[0].status == "ok"
    (exp,) = runner.experiments
    exp.partial_levels = {("f", "c2"): "a Ray node"}
    answer = exp.analyze("f", result.lab.answers[0].model, result.records)
    assert answer.status == "partial"
    assert "Partial: a Ray node died mid-level in concurrency 2" in answer.answer
    assert "labkit run --resume runs it again" in answer.answer
