"""`same_model` on fake providers serving the truth server's model variants, the whole run
path in process: the reference, the same model on another server (logit noise), another
tokenizer, another model's distributions and another stop habit under the one name; the
verdicts must say which is which."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.same_model import fingerprint, total_variation, verdicts
from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.figures.same_model import SameModelFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.runner import RunOptions, prepare_run, run_lab

pytestmark = pytest.mark.unit

#: The truth server's sampling model, fast, stopping on its own after 6 tokens.
MODEL = {"first_token_ms": 0, "token_interval_ms": 0, "tokens": 6, "sampling": True}

PROVIDERS = {
    "ref": MODEL,
    "other_server": {**MODEL, "logit_noise": 0.05},
    "other_tokenizer": {**MODEL, "tokenizer": "thirds"},
    "other_model": {**MODEL, "model_salt": 7},
    "other_stops": {**MODEL, "tokens": 40},  # runs to max_tokens: another stop habit
}


def run(
    tmp_path: Path, providers: dict[str, dict[str, Any]] = PROVIDERS, **experiment: Any
) -> tuple[dict[str, LabAnswer], list[RequestRecord]]:
    cfg = parse_config(
        {
            "name": "same",
            "providers": [
                {"id": pid, "kind": "fake", "model": "one-name", "schedule": schedule}
                for pid, schedule in providers.items()
            ],
            "experiments": [{"kind": "same_model", "reference": "ref", "warmup": 0, **experiment}],
        }
    )
    result = asyncio.run(run_lab(prepare_run(cfg, RunOptions(out_dir=tmp_path))))
    return {a.provider: a for a in result.lab.answers}, result.records


def test_the_verdicts_name_each_variant(tmp_path: Path) -> None:
    answers, records = run(tmp_path)
    want = {
        "other_server": "consistent",
        "other_tokenizer": "differs: tokenizer",
        "other_model": "differs: distributions",
        "other_stops": "differs: behaviour",
    }
    for pid, verdict in want.items():
        f = answers[pid].figures
        assert isinstance(f, SameModelFigures) and f.verdict is not None, pid
        assert f.verdict.verdict == verdict, (pid, f.verdict)
        assert f.verdict.confidence >= 0.95, (pid, f.verdict)
        assert answers[pid].answer.startswith(f"{pid} ")
    ref = answers["ref"].figures
    assert isinstance(ref, SameModelFigures) and ref.is_reference and ref.verdict is None
    # the tokenizer's verdict is exact: every real text counted differently
    tok = answers["other_tokenizer"].figures
    assert isinstance(tok, SameModelFigures) and tok.verdict is not None
    assert tok.verdict.token_counts_equal is not None
    assert tok.verdict.token_counts_equal.k < tok.verdict.token_counts_equal.n
    # another server's distributions are near, another model's far
    near = answers["other_server"].figures
    far = answers["other_model"].figures
    assert isinstance(near, SameModelFigures) and isinstance(far, SameModelFigures)
    assert max(p.total_variation or 0 for p in near.prompts) < 0.1
    assert min(p.total_variation or 1 for p in far.prompts) > 0.1
    # every probe asked for logprobs at temperature 0
    dist = [r for r in records if r.tags.get("phase") == "dist"]
    assert dist and all(r.params.get("temperature") == 0 and r.logprobs for r in dist)
    # the observatory's hook gives the same verdicts from the records alone
    got = {v.provider: v.verdict for v in verdicts(records, "ref")}
    assert got == want


def test_the_same_model_against_itself_is_consistent(tmp_path: Path) -> None:
    answers, _ = run(tmp_path, {"ref": MODEL, "twin": MODEL})
    f = answers["twin"].figures
    assert isinstance(f, SameModelFigures) and f.verdict is not None
    assert f.verdict.verdict == "consistent"
    assert all(p.total_variation == 0 for p in f.prompts)
    # 10 prompts all within the tolerance: the signed-rank test's smallest p, 1/2^10
    assert f.verdict.confidence == pytest.approx(1 - 2**-10)


def test_a_reference_that_is_not_a_provider_is_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"experiments\[0\].reference: no provider with id 'nope'"
    ):
        parse_config(
            {
                "name": "x",
                "providers": [{"id": "f", "kind": "fake"}],
                "experiments": [{"kind": "same_model", "reference": "nope"}],
            }
        )


def test_total_variation_and_a_fingerprint_without_logprobs() -> None:
    assert total_variation({"a": 0.5, "b": 0.5}, {"a": 0.5, "c": 0.5}) == pytest.approx(0.5)
    fp = fingerprint("x", [])
    assert not fp.logprobs_returned and fp.counts == {}
