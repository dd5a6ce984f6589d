"""The next token, seen: logprob collection off the wire shapes (bounded, checked), the
per-step figures (scipy's entropy), the divergence point with both branches' probabilities,
the temperature-0 check, the sentences quoted, and a provider that cannot return logprobs."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import entropy

from labkit.analysis.next_token import NOT_INSPECTED, step_of, variant_figures
from labkit.errors import MalformedStream
from labkit.experiments.next_token import NextTokenExperiment, NextTokenSettings
from labkit.figures import NextTokenFigures
from labkit.providers.logprobs import LOGPROB_FLOOR, LogprobCollector
from labkit.providers.openai import OpenAIChatParser
from labkit.records import (
    MAX_LOGPROB_STEPS,
    LogprobStep,
    OutputLogprobs,
    RequestRecord,
    TokenCandidate,
)
from labkit.wire.sse import SSEEvent
from labkit.wording.next_token import divergence_sentence, next_token_answer
from tests.providers.streams import make_provider
from tests.support.records import make_record

pytestmark = pytest.mark.unit

LN = math.log


def entry(token: str, p: float, *alts: tuple[str, float]) -> dict[str, Any]:
    """One Chat Completions logprob entry."""
    return {
        "token": token,
        "logprob": LN(p),
        "top_logprobs": [{"token": t, "logprob": LN(q)} for t, q in alts],
    }


def rec(variant: str, steps: list[tuple[str, float, list[tuple[str, float]]]]) -> RequestRecord:
    r = make_record(experiment="next_token", tags={"variant": variant})
    r.logprobs = OutputLogprobs(
        top_k=3,
        steps=[
            LogprobStep(
                token=t,
                logprob=LN(p),
                top=[TokenCandidate(token=a, logprob=LN(q)) for a, q in alts],
            )
            for t, p, alts in steps
        ],
    )
    return r


# --- reading the shapes ----------------------------------------------------------------------


def test_the_chat_parser_reads_logprobs_only_when_asked() -> None:
    chunk = (
        '{"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi",'
        '"logprob":-0.1,"top_logprobs":[{"token":"Hi","logprob":-0.1},{"token":"Yo","logprob":'
        "-2.5}]}]}}]}"
    )
    plain = OpenAIChatParser()
    plain.on_event(SSEEvent(event=None, data=chunk, t_ns=0))
    assert plain.logprobs() is None and plain.output_text == "Hi"
    assert "on_chunk" not in vars(plain)  # the plain parser's per-event path is untouched

    asked = OpenAIChatParser()
    assert asked.want_logprobs(1)
    asked.on_event(SSEEvent(event=None, data=chunk, t_ns=0))
    got = asked.logprobs()
    assert got is not None and asked.output_text == "Hi"
    assert [(s.token, s.logprob, [c.token for c in s.top]) for s in got.steps] == [
        ("Hi", -0.1, ["Hi"])  # cut to the one candidate asked for
    ]


def test_llamacpp_post_sampling_probs_and_partial_characters() -> None:
    c = LogprobCollector(5)
    c.add_entries(
        [
            {
                "token": "",
                "bytes": [240, 159],
                "prob": 0.5,
                "top_probs": [{"token": "a", "prob": 0.5}, {"tok_str": "b", "prob": 0.0}],
            }
        ],
        "completion_probabilities",
    )
    (step,) = c.result().steps
    assert step.token == "\\xf0\\x9f"  # the bytes of a piece of a character, shown escaped
    assert step.logprob == pytest.approx(LN(0.5))
    assert [x.logprob for x in step.top] == [pytest.approx(LN(0.5)), LOGPROB_FLOOR]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"token": 3, "logprob": -1.0}, "token is int"),
        ({"token": "a"}, "neither logprob nor prob"),
        ({"token": "a", "logprob": "x"}, "not a number"),
        ({"token": "a", "logprob": 0.5}, "not a log-probability"),
        ({"token": "a", "logprob": -1.0, "top_logprobs": {}}, "not an array"),
    ],
)
def test_a_malformed_entry_is_named(bad: dict[str, Any], says: str) -> None:
    with pytest.raises(MalformedStream, match=says):
        LogprobCollector(5).add_entries([bad], "logprobs")


def test_the_record_keeps_at_most_the_bound() -> None:
    c = LogprobCollector(99)
    assert c.top_k == 20
    c.add_entries([entry("x", 0.5)] * (MAX_LOGPROB_STEPS + 3), "logprobs")
    got = c.result()
    assert len(got.steps) == MAX_LOGPROB_STEPS and got.truncated


def test_a_provider_that_cannot_is_named_not_inspected() -> None:
    provider = make_provider(
        "anthropic", api_key="sk-test", model="claude", base_url="http://127.0.0.1:9"
    )
    assert provider.logprob_params(5) == {}
    exp = NextTokenExperiment(NextTokenSettings(repeats=2))
    planned = list(exp.plan(provider))
    assert all(p.request.top_logprobs is None for p in planned)
    answer = exp.analyze(provider.id, "claude", [])
    assert answer.status == "failed"
    assert f"{provider.id} was not inspected: {NOT_INSPECTED}" in answer.answer


# --- the figures -----------------------------------------------------------------------------


@given(
    st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=1, max_size=20).filter(
        lambda ps: sum(ps) <= 1.0
    )
)
def test_a_steps_candidates_and_entropy_are_a_distribution(ps: list[float]) -> None:
    step = step_of(
        LogprobStep(
            token="t",
            logprob=LN(ps[0]),
            top=[TokenCandidate(token=f"t{i}", logprob=LN(p)) for i, p in enumerate(ps)],
        )
    )
    probs = [c.p for c in step.candidates]
    assert probs == sorted(probs, reverse=True)
    assert math.fsum(probs) <= 1 + 1e-9
    rest = max(0.0, 1 - sum(probs))
    assert step.entropy_bits == pytest.approx(entropy([*probs, rest], base=2))
    assert 0 <= step.entropy_bits <= math.log2(len(ps) + 1) + 1e-9


def test_the_divergence_names_both_branches_and_their_probabilities() -> None:
    shared = ("Once", 0.9, [("Once", 0.9), ("A", 0.05)])
    a = rec("t1", [shared, (" a", 0.41, [(" a", 0.41), (" the", 0.38), (" one", 0.1)])])
    b = rec("t1", [shared, (" the", 0.38, [(" a", 0.41), (" the", 0.38), (" one", 0.1)])])
    v = variant_figures("t1", {"temperature": 1.0}, [a, b])
    d = v.divergence
    assert d is not None and d.step == 1 and d.prefix == "Once"
    assert [(c.token, round(c.p, 2)) for c in d.taken] == [(" a", 0.41), (" the", 0.38)]
    assert d.margin == pytest.approx(0.03)
    assert v.greedy is None

    greedy = variant_figures("t0", {"temperature": 0}, [a, a])
    assert greedy.divergence is None and greedy.greedy is True
    figures = NextTokenFigures(top_k=3, inspected=True, variants=[v, greedy])
    bits = entropy([0.41, 0.38, 0.1, 0.11], base=2)  # the three candidates and the rest
    assert divergence_sentence(figures) == (
        f"The replies diverged at token 2 (temperature 1.0), a step of at least {bits:.2f} "
        "bits of entropy, where ' a' (p 0.41) and ' the' (p 0.38) were nearly tied; at "
        "temperature 0 the top candidate is always taken."
    )
    # Another answer's words on the variant's replies are said beside its parameters.
    assert "token 2 (temperature 1.0: 2 different replies of 2), a step" in divergence_sentence(
        figures, {"t1": "2 different replies of 2"}
    )


def test_the_answer_says_how_sure_the_model_was_in_bits() -> None:
    sure = ("Once", 0.97, [("Once", 0.97), ("A", 0.02)])
    split = [(" a", 0.5), (" the", 0.5)]
    a = rec("t1", [sure, sure, (" a", 0.5, split)])
    b = rec("t1", [sure, sure, (" the", 0.5, split)])
    v = variant_figures("t1", {"temperature": 1.0}, [a, b])
    text = next_token_answer(NextTokenFigures(top_k=3, inspected=True, variants=[v]), "local")
    # The median of the six steps is a near-certain one; the split step is a coin toss.
    typical = entropy([0.97, 0.02, 0.01], base=2)
    assert f"The median step's entropy was at least {typical:.2f} bits" in text, text
    assert "diverged at token 3 (temperature 1.0), a step of at least 1.00 bits" in text, text


def test_at_temperature_0_a_missed_top_candidate_is_said_with_its_margin() -> None:
    r = rec("t0", [("B", 0.45, [("A", 0.47), ("B", 0.45)])])
    v = variant_figures("t0", {"temperature": 0}, [r, r])
    assert v.greedy is False
    assert len(v.greedy_misses) == 2  # each reply's first miss
    miss = v.greedy_misses[0]
    assert miss.step == 0 and miss.top.token == "A" and miss.margin == pytest.approx(0.02)
    text = next_token_answer(NextTokenFigures(top_k=3, inspected=True, variants=[v]), "local")
    assert text.startswith("No repeats diverged")
    assert "token 1 was 'B' (p 0.45), not the top candidate 'A' (p 0.47)" in text
    assert "(top-two margin 0.02)" in text
