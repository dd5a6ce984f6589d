"""`determinism_load`'s analysis: one concurrency level's replies compared, records → figures.

The replies are compared on the server's own tokens where every reply carried logprobs
(their steps), else on a common ruler (tiktoken's ``cl100k_base``), else on characters.
The branches and candidates at the first different token, the greedy check and each step's
probabilities come from `labkit.analysis.next_token`, computed once there; this module adds
what a level needs beside them: how far the probabilities moved between replies that took
the same tokens, the closest top-two call, and how many requests were in flight together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.analysis.next_token import variant_figures
from labkit.analysis.selection import latest_pass, measured
from labkit.figures.determinism_load import DeterminismLoadLevel, NarrowestStep
from labkit.figures.next_token import NextTokenStep, NextTokenVariant
from labkit.records import RequestRecord
from labkit.tokenizers import TokenizerUnavailable, display_piece, offline_tokenizer

#: llama-server's counters of its decode calls (/metrics, with ``--metrics``): the calls so
#: far, and the mean busy slots (sequences) per call so far.
_DECODES = "llamacpp:n_decode_total"
_BUSY_PER_DECODE = "llamacpp:n_busy_slots_per_decode"

__all__ = [
    "SERVER_TOKENS",
    "batch_changed",
    "decode_batch",
    "decode_counters",
    "first_difference",
    "level_rows",
    "peak_in_flight",
    "shares_batch",
]

#: `tokens_from` when the replies were compared on their logprob steps.
SERVER_TOKENS = "the server's tokens (logprob steps)"


def first_difference(outputs: Sequence[Sequence[Any]]) -> int | None:
    """0-based index of the first item where any output differs from the first (an output
    that ends earlier differs there); None when all are equal or fewer than two."""
    first = list(outputs[0]) if outputs else []
    at: int | None = None
    for other in map(list, outputs[1:]):
        if other != first:
            k = next(
                (i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a != b),
                min(len(first), len(other)),
            )
            at = k if at is None else min(at, k)
    return at


def peak_in_flight(records: Sequence[RequestRecord]) -> int | None:
    """Most requests in flight at once, from each record's start and end-to-end time; None
    where the records came from several hosts (their clocks differ) or carry no times."""
    timed = [
        (r.t_start_mono_ns, r.t_start_mono_ns + round(r.client.e2e_ms * 1e6))
        for r in records
        if r.t_start_mono_ns is not None and r.client.e2e_ms is not None
    ]
    if not timed or len({r.host for r in records}) > 1:
        return None
    # At a tie the end comes first: a request sent as another ends never overlapped it.
    events = sorted([(start, 1) for start, _ in timed] + [(end, -1) for _, end in timed])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


def _ruler_tokens(texts: list[str]) -> tuple[str, list[list[str]]]:
    """`texts` cut by tiktoken's cl100k_base (a common ruler for any model), else into
    characters; with the ruler's name."""
    try:
        ruler = offline_tokenizer("cl100k_base")
    except TokenizerUnavailable:
        return "characters", [[display_piece(c.encode()) for c in t] for t in texts]
    cut = [ruler.tokenize(t).pieces or () for t in texts]
    return ruler.label, [[display_piece(p) for p in c] for c in cut]


def _narrowest(steps: Sequence[NextTokenStep]) -> NarrowestStep | None:
    """The step whose top two candidates were closest (None: no step had two)."""
    best: NarrowestStep | None = None
    for i, s in enumerate(steps):
        if len(s.candidates) < 2:
            continue
        a, b = s.candidates[0], s.candidates[1]
        if best is None or a.p - b.p < best.first.p - best.second.p:
            best = NarrowestStep(token=i + 1, first=a, second=b)
    return best


def _drift(replies: Sequence[Sequence[NextTokenStep]], shared: int) -> float:
    """Largest difference between a reply's and the first reply's probability of the same
    token at one of the first `shared` steps."""
    first = replies[0]
    return max(
        (abs(r[i].p - first[i].p) for r in replies[1:] for i in range(min(shared, len(r)))),
        default=0.0,
    )


def _level(
    concurrency: int, params: dict[str, Any], records: list[RequestRecord], logprobs: bool
) -> tuple[DeterminismLoadLevel, list[str], NextTokenVariant | None]:
    """One level's row, its replies' texts in send order and their steps (None: not every
    reply carried logprobs)."""
    tried = [r for r in latest_pass(records) if not r.warmup]
    ok = sorted(measured(tried), key=lambda r: r.trial)
    texts = [r.output_text or "" for r in ok]
    seen: NextTokenVariant | None = None
    if logprobs and ok and all(r.logprobs is not None and r.logprobs.steps for r in ok):
        seen = variant_figures(f"concurrency {concurrency}", params, ok)
    tokens_from = SERVER_TOKENS
    outputs = [[s.token for s in reply] for reply in seen.replies] if seen else []
    at = first_difference(outputs)
    if seen is None or (at is None and len(set(texts)) > 1):
        # No steps to compare, or the texts differ beyond the recorded steps.
        tokens_from, outputs = _ruler_tokens(texts)
        at = first_difference(outputs)
    row = DeterminismLoadLevel(
        concurrency=concurrency,
        n=len(ok),
        failed=len(tried) - len(ok),
        identical=len(set(texts)) == 1 if len(ok) >= 2 else None,
        distinct_outputs=len(set(texts)),
        first_different_token=at + 1 if at is not None else None,
        tokens_from=tokens_from,
        peak_in_flight=peak_in_flight(tried),
        cached_prompts=sum(1 for r in ok if (r.usage.cached_input_tokens or 0) > 0),
        system_fingerprints=sorted({r.system_fingerprint for r in ok if r.system_fingerprint}),
        server_builds=sorted({r.server_build for r in ok if r.server_build}),
        outputs=outputs,
    )
    if seen is None or not seen.replies:
        return row, texts, None
    on_steps = at is not None and tokens_from == SERVER_TOKENS
    shared = at if on_steps and at is not None else len(seen.replies[0])
    # The candidates where the tokens first differ; where a reply only ended earlier there
    # is no branch to show.
    split = seen.divergence if on_steps and seen.divergence and seen.divergence.step == at else None
    row = row.model_copy(
        update={
            "divergence": split,
            "narrowest": _narrowest(seen.replies[0][:shared]),
            "prob_drift": _drift(seen.replies, shared),
            "greedy": seen.greedy,
        }
    )
    return row, texts, seen


def _against(
    row: DeterminismLoadLevel,
    texts: list[str],
    seen: NextTokenVariant | None,
    base_text: str,
    base: NextTokenVariant | None,
) -> DeterminismLoadLevel:
    """`row` compared with the first level: its replies carrying the first level's first
    reply, and where its first reply parted from that one."""
    if not texts:
        return row
    if seen is not None and base is not None and seen.replies and base.replies:
        mine, theirs = seen.replies[0], base.replies[0]
        at = first_difference([[s.token for s in theirs], [s.token for s in mine]])
        if at is not None or texts[0] == base_text:
            shared = at if at is not None else len(mine)
            return row.model_copy(
                update={
                    "same_as_first_level": texts.count(base_text),
                    "first_level_different_token": at + 1 if at is not None else None,
                    "first_level_drift": _drift([theirs, mine], shared),
                }
            )
    _, cut = _ruler_tokens([base_text, texts[0]])
    at = first_difference(cut)
    return row.model_copy(
        update={
            "same_as_first_level": texts.count(base_text),
            "first_level_different_token": at + 1 if at is not None else None,
        }
    )


def level_rows(
    params: dict[str, Any], levels: Sequence[tuple[int, list[RequestRecord]]], *, logprobs: bool
) -> list[DeterminismLoadLevel]:
    """A row per level, from each level's records (its latest pass; warm-ups and failures
    left out of the comparison), each after the first also compared with the first level's
    first reply; `logprobs`: whether they were asked for."""
    rows: list[DeterminismLoadLevel] = []
    base: tuple[str, NextTokenVariant | None] | None = None
    for k, (concurrency, records) in enumerate(levels):
        row, texts, seen = _level(concurrency, params, records, logprobs)
        if k == 0 and texts:
            base = (texts[0], seen)
        elif base is not None:
            row = _against(row, texts, seen, *base)
        rows.append(row)
    return rows


def shares_batch(row: DeterminismLoadLevel, slots: int | None) -> bool:
    """Whether a level's requests can have been decoded in one batch: more than one in
    flight (the peak seen, else the concurrency), on a server with more than one slot (as
    far as either is known), and, where the server counted it, more than one sequence per
    decode on average."""
    in_flight = row.peak_in_flight if row.peak_in_flight is not None else row.concurrency
    if row.decode_batch is not None and row.decode_batch <= 1:
        return False
    return in_flight > 1 and (slots is None or slots > 1)


def batch_changed(rows: Sequence[DeterminismLoadLevel], slots: int | None) -> bool | None:
    """Whether sharing a batch changed the selection (`DeterminismLoadFigures.
    batch_changed_selection`): the levels sent one at a time are the baseline; None where
    there is none, its replies differed, or no level shared a batch."""
    judged = [r for r in rows if r.identical is not None]
    alone = [r for r in judged if not shares_batch(r, slots)]
    shared = [r for r in judged if shares_batch(r, slots)]
    if not alone or not shared or not all(r.identical for r in alone):
        return None
    against_first = bool(rows) and rows[0] in alone
    return any(
        not r.identical
        or (against_first and r.same_as_first_level is not None and r.same_as_first_level < r.n)
        for r in shared
    )


def decode_counters(text: str) -> tuple[float, float] | None:
    """llama-server's decode calls so far and the sequences they decoded (calls × mean busy
    slots per call), from its /metrics text; None where either is missing."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (_DECODES, _BUSY_PER_DECODE):
            try:
                found[name] = float(value.split()[0])
            except (ValueError, IndexError):
                return None
    if _DECODES not in found or _BUSY_PER_DECODE not in found:
        return None
    return found[_DECODES], found[_DECODES] * found[_BUSY_PER_DECODE]


def decode_batch(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    """Mean sequences per decode call between two readings of `decode_counters` (None:
    a reading missing, or no decode call between them)."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])
