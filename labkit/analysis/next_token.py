"""The next token, seen: each reply's steps with their candidates, where repeats diverged.

From records carrying `logprobs` (`RequestRecord.logprobs`): per step the token taken, its
probability and the top candidates, with the step's entropy (`scipy.stats.entropy` of the
candidates plus the rest of the probability as one outcome); per variant where its repeats
first took different tokens (the branches and their probabilities), and at temperature 0
whether the top candidate was always taken (where not: the step and the top-two margin).
Computed once here; `next_token` and `determinism` (with `top_logprobs`) both call it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from labkit.figures.next_token import (
    Divergence,
    GreedyMiss,
    NextTokenFigures,
    NextTokenStep,
    NextTokenVariant,
    TokenChoice,
)
from labkit.records import LogprobStep, RequestRecord

__all__ = ["NOT_INSPECTED", "next_token_figures", "step_of", "variant_figures"]

#: Why a provider's replies could not be inspected: it has no way to return logprobs.
NOT_INSPECTED = "the provider cannot return logprobs"
#: A chosen token within this relative probability of the top one counts as the top (a tie).
_TIE = 1e-6


def step_of(step: LogprobStep) -> NextTokenStep:
    """One recorded step as figures: probabilities, candidates most likely first, entropy."""
    candidates = sorted(step.top, key=lambda c: c.logprob, reverse=True)
    probs = [math.exp(c.logprob) for c in candidates]
    rest = max(0.0, 1.0 - sum(probs))
    bits = 0.0
    if probs:
        from scipy.stats import entropy  # scipy.stats takes half a second: only when used

        bits = float(entropy([*probs, rest], base=2))
    return NextTokenStep(
        token=step.token,
        p=math.exp(step.logprob),
        entropy_bits=bits,
        candidates=[
            TokenChoice(token=c.token, p=p) for c, p in zip(candidates, probs, strict=True)
        ],
    )


def _margin(step: NextTokenStep) -> float | None:
    """Top candidate's probability minus the second's (None with fewer than two)."""
    c = step.candidates
    return c[0].p - c[1].p if len(c) >= 2 else None


def _divergence(replies: Sequence[Sequence[NextTokenStep]]) -> Divergence | None:
    """The first step where any reply took another token than the first reply."""
    if len(replies) < 2:
        return None
    first = replies[0]
    at: int | None = None
    for other in replies[1:]:
        for i in range(min(len(first), len(other))):
            if first[i].token != other[i].token:
                at = i if at is None else min(at, i)
                break
    if at is None:
        return None
    taken: list[TokenChoice] = []
    for reply in replies:
        if at < len(reply) and all(t.token != reply[at].token for t in taken):
            taken.append(TokenChoice(token=reply[at].token, p=reply[at].p))
    step = first[at]
    return Divergence(
        step=at,
        prefix="".join(s.token for s in first[:at]),
        taken=taken,
        candidates=step.candidates,
        margin=_margin(step),
    )


def _greedy_misses(replies: Sequence[Sequence[NextTokenStep]]) -> list[GreedyMiss]:
    """Steps where the token taken was less likely than the top candidate (first per reply)."""
    misses = []
    for reply in replies:
        for i, step in enumerate(reply):
            top = step.candidates[0] if step.candidates else None
            if top is not None and top.token != step.token and top.p > step.p * (1 + _TIE):
                margin = _margin(step)
                misses.append(
                    GreedyMiss(
                        step=i,
                        taken=TokenChoice(token=step.token, p=step.p),
                        top=top,
                        margin=margin if margin is not None else top.p,
                    )
                )
                break
    return misses


def variant_figures(
    name: str, params: dict[str, Any], records: Sequence[RequestRecord]
) -> NextTokenVariant:
    """One variant's figures from its successful records (warm-ups already left out)."""
    with_logprobs = [r for r in records if r.logprobs is not None]
    replies = [[step_of(s) for s in r.logprobs.steps] for r in with_logprobs if r.logprobs]
    greedy: bool | None = None
    misses: list[GreedyMiss] = []
    if float(params.get("temperature", 1.0)) == 0 and replies:
        misses = _greedy_misses(replies)
        greedy = not misses
    return NextTokenVariant(
        variant=name,
        params=params,
        replies=replies,
        truncated=any(r.logprobs.truncated for r in with_logprobs if r.logprobs),
        divergence=_divergence(replies),
        greedy=greedy,
        greedy_misses=misses,
    )


def next_token_figures(
    top_k: int, variants: Sequence[NextTokenVariant], *, can_return: bool
) -> NextTokenFigures:
    """The figures of one provider: `inspected` when any reply carried logprobs."""
    inspected = any(any(v.replies) for v in variants)
    why = None
    if not inspected:
        why = NOT_INSPECTED if not can_return else "no reply carried logprobs"
    return NextTokenFigures(
        top_k=top_k,
        inspected=inspected,
        not_inspected_because=why,
        variants=list(variants) if inspected else [],
    )
