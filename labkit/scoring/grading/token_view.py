"""Grading `token_view`: each send's rows against what the truth server sent, token by token.

Per send: the number of tokens and their text, each token's probability and the server's
own time at it (`token_ms` in the truth log, what its per-token `timings` said) against the
truth, the first token's arrival after its true send, whether the prompt came from
cache against the prompt tokens the server read from its cache, and each column the answer
calls not reported against whether the server sent it.
"""

from __future__ import annotations

from labkit.analysis.selection import measured
from labkit.figures.token_view import TokenViewFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    TOLERANCE,
    Check,
    Truth,
    fact,
    register_grader,
    true_ttft_ms,
)

__all__ = ["grade_token_view"]

#: Probabilities and server times pass through JSON and an exp(log): equal to this.
_EXACT = 1e-6


def _close(stated: list[float | None], true: list[float]) -> bool:
    """Each stated value within `_EXACT` of its true one, as many of each."""
    return len(stated) == len(true) and all(
        s is not None and abs(s - t) <= _EXACT * max(1.0, abs(t))
        for s, t in zip(stated, true, strict=True)
    )


def _shown(values: list[float | None] | list[float]) -> str:
    return "[" + ", ".join("—" if v is None else f"{v:.4g}" for v in values) + "]"


def _all(who: str, name: str, stated: list[float | None], true: list[float]) -> Check:
    """A fact over every token: right when each stated value equals its true one."""
    ok = _close(stated, true)
    return Check(
        answer=who,
        kind="fact",
        name=name,
        stated=_shown(stated),
        true=_shown(true),
        ok=ok,
        why=None if ok else f"not all within {_EXACT:g} of the truth",
    )


@register_grader("token_view")
def grade_token_view(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Every send's tokens, probabilities, server times, first arrival and cache flag."""
    f = answer.figures
    if not isinstance(f, TokenViewFigures):
        return []
    who = f"token_view · {answer.provider}"
    by_send = {int(r.trial) + 1: r for r in measured(records)}
    checks: list[Check] = []
    server_sent = False
    for reply in f.replies:
        record = by_send.get(reply.send)
        t = truth.of(record) if record is not None else None
        if record is None or t is None:
            continue
        name = f"send {reply.send}"
        texts = [row.text for row in reply.rows]
        if reply.rows_are == "tokens":
            checks.append(fact(who, f"{name}: tokens", len(reply.rows), t.output_tokens))
        else:
            checks.append(fact(who, f"{name}: streamed events", len(reply.rows), len(t.events_ns)))
        if t.steps:
            checks.append(
                fact(who, f"{name}: text", "".join(texts), "".join(s.token for s in t.steps))
            )
            if reply.rows_are == "tokens" and "probability" not in f.not_reported:
                true_p = [dict(s.candidates)[s.token] for s in t.steps]
                stated_p = [row.p for row in reply.rows]
                checks.append(_all(who, f"{name}: every token's probability", stated_p, true_p))
        if t.token_ms is not None:
            server_sent = True
            stated_ms = [row.server_ms for row in reply.rows]
            checks.append(_all(who, f"{name}: every token's server time", stated_ms, t.token_ms))
        sent = true_ttft_ms(record, t)
        first = reply.rows[0].arrival_ms if reply.rows else None
        if first is not None and sent is not None:
            # Causality, not closeness: one arrival on a busy host may trail its send by a
            # scheduler's delay that no stamp sees; it can never precede it.
            checks.append(
                Check(
                    answer=who,
                    kind="fact",
                    name=f"{name}: token 1 arrived after the server sent it",
                    stated=f"{first:.3f} ms",
                    true=f"sent at {sent:.3f} ms",
                    ok=first + TOLERANCE["ms"] >= sent,
                    why=None if first + TOLERANCE["ms"] >= sent else "arrived before its send",
                )
            )
        if reply.from_cache is not None:
            true_cached = t.cached_tokens * 2 >= t.prompt_tokens if t.prompt_tokens else False
            checks.append(fact(who, f"{name}: prompt from cache", reply.from_cache, true_cached))
    if any(t is not None for r in measured(records) if (t := truth.of(r)) is not None):
        checks.append(
            fact(
                who,
                "server time marked not reported",
                "server time" in f.not_reported,
                not server_sent,
            )
        )
    return checks
