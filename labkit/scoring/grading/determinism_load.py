"""Grading question 3 under load (`determinism_load`): per level, identical or not, how many
distinct replies, where they split and the candidates there, against the tokens the truth
server sent; and whether the batch changed the selection, against the flips it logged
(`labkit.truth.batch`)."""

from __future__ import annotations

from labkit.analysis.determinism_load import SERVER_TOKENS, first_difference
from labkit.analysis.selection import latest_pass, measured
from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import Check, Truth, fact, figure, register_grader
from labkit.truth.log import TruthRequest

__all__ = ["grade_determinism_load"]


def _level_truth(
    records: list[RequestRecord], concurrency: int, truth: Truth
) -> list[TruthRequest] | None:
    """The truth of a level's compared replies, in the order the analysis compares them
    (None: a reply the log does not know, or one without its drawn steps)."""
    tagged = [r for r in records if r.tags.get("level") == f"c{concurrency}" and not r.warmup]
    ok = sorted(measured(latest_pass(tagged)), key=lambda r: r.trial)
    drawn = [truth.of(r) for r in ok]
    if len(drawn) < 2 or any(t is None or not t.steps for t in drawn):
        return None
    return [t for t in drawn if t is not None]


@register_grader("determinism_load")
def grade_determinism_load(
    answer: LabAnswer, records: list[RequestRecord], truth: Truth
) -> list[Check]:
    """Per level: identical replies, the count of distinct ones, the first different token
    and, at it, the branches taken and the first reply's top two probabilities; then whether
    sharing a batch changed the selection (true: the server flipped some reply's token)."""
    f = answer.figures
    if not isinstance(f, DeterminismLoadFigures):
        return []
    who = f"determinism_load · {answer.provider}"
    checks: list[Check] = []
    seen: list[TruthRequest] = []
    for row in f.levels:
        drawn = _level_truth(records, row.concurrency, truth)
        if drawn is None or row.identical is None:
            continue
        seen += drawn
        replies = [[s.token for s in t.steps] for t in drawn]
        split = first_difference(replies)
        name = f"concurrency {row.concurrency}"
        checks.append(fact(who, f"{name}: identical replies", row.identical, split is None))
        true_distinct = len({tuple(r) for r in replies})
        checks.append(fact(who, f"{name}: distinct replies", row.distinct_outputs, true_distinct))
        if row.tokens_from == SERVER_TOKENS:
            true_k = split + 1 if split is not None else None
            checks.append(
                fact(who, f"{name}: first different token", row.first_different_token, true_k)
            )
        d = row.divergence
        if d is None or split is None or d.step != split:
            continue
        branches = sorted({c.token for c in d.taken})
        true_branches = sorted({r[split] for r in replies if split < len(r)})
        checks.append(fact(who, f"{name}: branches at token {split + 1}", branches, true_branches))
        first = dict(drawn[0].steps[split].candidates)
        for rank, c in enumerate(d.candidates[:2], start=1):
            checks.append(
                figure(
                    who,
                    f"{name}: candidate {rank} {c.token!r} p at token {split + 1}",
                    c.p,
                    first.get(c.token),
                    "p",
                )
            )
    if f.batch_changed_selection is not None and seen:
        flipped = any(t.flipped_steps for t in seen)
        checks.append(
            fact(
                who,
                "the batch changed the selection",
                f.batch_changed_selection,
                flipped,
                why="the truth server flipped "
                + ("some near-tie" if flipped else "nothing: every batch decoded alike"),
            )
        )
    return checks
