"""`next_token`'s answer: the model's candidates, where the repeats diverged, and the
greedy check (also quoted by `determinism` with `top_logprobs`)."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median
from typing import Any

from labkit.figures.next_token import NextTokenFigures, NextTokenVariant, TokenChoice

__all__ = ["divergence_sentence", "next_token_answer"]


#: Two branches are said to be nearly tied when the less likely has at least this share of
#: the likelier one's probability.
NEARLY_TIED = 0.75


def _p(p: float) -> str:
    """A probability as said: two decimals, or `<0.01`."""
    return f"{p:.2f}" if p >= 0.005 else "<0.01"


def _quoted(token: str) -> str:
    """A token as text in a sentence, its spaces visible: `' the'`."""
    return "'" + token.replace("\n", "\\n") + "'"


def _choice(c: TokenChoice) -> str:
    return f"{_quoted(c.token)} (p {_p(c.p)})"


def _params_words(params: dict[str, Any]) -> str:
    words = [f"temperature {params['temperature']}"] if "temperature" in params else []
    if params.get("seed") is not None:
        words.append(f"seed {params['seed']}")
    return ", ".join(words)


def _bits(bits: float) -> str:
    """An entropy as said: at least this many bits (the figures' entropy is a lower bound:
    the candidates beyond the top ones count as one outcome)."""
    return f"at least {bits:.2f} bits"


def _entropy_at(v: NextTokenVariant, step: int) -> float | None:
    """The first reply's entropy at `step` (0-based), where it has that step."""
    reply = v.replies[0] if v.replies else []
    return reply[step].entropy_bits if step < len(reply) else None


def divergence_sentence(f: NextTokenFigures, replies: Mapping[str, str] | None = None) -> str:
    """Where repeats diverged (the earliest split), how sure the model was there (the step's
    entropy) and between which candidates, then what temperature 0 did: the sentence lab
    question 3 quotes from the candidates. `replies`: words on each variant's replies
    (`2 different replies of 2`), said beside its parameters."""
    split = [v for v in f.variants if v.divergence is not None]
    if split:
        v = min(split, key=lambda v: v.divergence.step if v.divergence else 0)
        d = v.divergence
        assert d is not None
        which = _params_words(v.params) or v.variant
        if replies and v.variant in replies:
            which += f": {replies[v.variant]}"
        entropy = _entropy_at(v, d.step)
        where = f", a step of {_bits(entropy)} of entropy," if entropy is not None else ","
        branches = d.taken[:2]
        if len(branches) == 2:
            a, b = branches
            tied = min(a.p, b.p) >= NEARLY_TIED * max(a.p, b.p)
            how = (
                f"{_choice(a)} and {_choice(b)} were nearly tied"
                if tied
                else f"one took {_choice(a)} and another {_choice(b)}"
            )
            top = d.candidates[0] if d.candidates else None
            if top is not None and top.token not in (a.token, b.token):
                how += f", both below the top candidate {_choice(top)}"
        else:
            how = f"one took {_choice(branches[0])}"
        text = f"the replies diverged at token {d.step + 1} ({which}){where} where {how}"
    else:
        text = "no repeats diverged: each variant's replies took the same token at every step"
    greedy = [v for v in f.variants if v.greedy is not None]
    if greedy and all(v.greedy for v in greedy):
        text += "; at temperature 0 the top candidate is always taken"
    elif greedy:
        miss = next(m for v in greedy for m in v.greedy_misses)
        text += (
            f"; at temperature 0 token {miss.step + 1} was {_choice(miss.taken)}, not the top "
            f"candidate {_choice(miss.top)} (top-two margin {_p(miss.margin)})"
        )
    return text[0].upper() + text[1:] + "."


def next_token_answer(f: NextTokenFigures, provider_id: str) -> str:
    """The divergence sentence, and how sure the model was at a typical step (how often the
    top candidate had p >= 0.9, the median step's entropy in bits); or, for a provider
    without logprobs, that it was not inspected and why."""
    if not f.inspected:
        return (
            f"{provider_id} was not inspected: {f.not_inspected_because}, so its candidates "
            "are unknown."
        )
    steps = [s for v in f.variants for reply in v.replies for s in reply]
    text = divergence_sentence(f)
    if steps:
        surest = sum(1 for s in steps if s.candidates and s.candidates[0].p >= 0.9)
        text += (
            f" The top candidate had p >= 0.9 at {surest} of {len(steps)} steps; the others "
            f"are where a sampled reply can turn (top {f.top_k} candidates per step). The "
            f"median step's entropy was {_bits(median(s.entropy_bits for s in steps))} "
            "(0: one certain candidate)."
        )
    return text
