"""The fake server's sampling: known distributions per prompt and step, temperature 0 the
likeliest, a seed that repeats a sampled reply, and none that lets it vary."""

from __future__ import annotations

import json
import math

import pytest

from labkit.truth.reply import Responder, distribution, read_request
from labkit.truth.schedule import TruthSchedule

pytestmark = pytest.mark.unit

SAMPLING = TruthSchedule(tokens=24, sampling=True, candidates=5)


def reply_words(responder: Responder, **body: object) -> list[str]:
    body = {"messages": [{"role": "user", "content": "tell me"}], **body}
    reply = responder.reply(SAMPLING, read_request("chat", json.dumps(body).encode()))
    assert "".join(s.token for s in reply.steps) == "".join(reply.texts)
    return [s.token for s in reply.steps]


def test_each_step_has_a_known_distribution_of_the_prompt_and_the_step() -> None:
    assert distribution(7, 3, 5) == distribution(7, 3, 5)
    assert distribution(7, 3, 5) != distribution(7, 4, 5) != distribution(8, 3, 5)
    logits = [logit for _, logit in distribution(7, 3, 5)]
    assert logits == sorted(logits, reverse=True) and len(set(logits)) == 5


def test_temperature_zero_takes_the_likeliest_and_reports_the_untempered_distribution() -> None:
    server = Responder("t", seed=1)
    request = read_request(
        "chat", b'{"messages":[{"role":"user","content":"tell me"}],"temperature":0}'
    )
    reply = server.reply(SAMPLING, request)
    for step in reply.steps:
        assert step.token == step.candidates[0][0]
        assert sum(p for _, p in step.candidates) == pytest.approx(1.0)
        assert step.candidates[0][1] < 1.0  # the model's distribution, not the greedy one
    assert reply_words(server, temperature=0) == [s.token for s in reply.steps]


def test_a_seed_repeats_a_sampled_reply_and_no_seed_varies_it() -> None:
    server = Responder("t", seed=1)
    seeded = reply_words(server, temperature=1, seed=7)
    assert reply_words(server, temperature=1, seed=7) == seeded
    assert reply_words(server, temperature=1, seed=8) != seeded
    assert reply_words(server, temperature=1) != reply_words(server, temperature=1)


def test_temperature_sharpens_or_flattens_the_reported_probabilities() -> None:
    server = Responder("t")
    top = {}
    for t in (0.5, 1.0, 2.0):
        body = json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": t})
        step = server.reply(SAMPLING, read_request("chat", body.encode())).steps[0]
        top[t] = max(p for _, p in step.candidates)
    assert top[0.5] > top[1.0] > top[2.0]


def test_without_sampling_logprobs_report_the_scripted_words_as_certain() -> None:
    body = b'{"messages":[],"logprobs":true,"top_logprobs":2,"max_tokens":3}'
    reply = Responder("t").reply(TruthSchedule(), read_request("chat", body))
    assert [(s.token, s.candidates) for s in reply.steps] == [
        (" tokens", ((" tokens", 1.0),)),
        (" are", ((" are", 1.0),)),
        (" the", ((" the", 1.0),)),
    ]
    assert math.log(reply.steps[0].probability) == 0.0
