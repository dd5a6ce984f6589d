"""`determinism_load`'s answer: per concurrency, whether identical requests got identical
replies, where they first differed and how close the call was there; then what the server
said about its batches, its build and its determinism mode (or that it said nothing)."""

from __future__ import annotations

from labkit.analysis.determinism_load import SERVER_TOKENS, shares_batch
from labkit.figures.determinism_load import DeterminismLoadFigures, DeterminismLoadLevel
from labkit.figures.next_token import TokenChoice
from labkit.wording.next_token import NEARLY_TIED

__all__ = ["determinism_load_answer"]


def _p(p: float) -> str:
    return f"{p:.2f}" if p >= 0.005 else "<0.01"


def _tok(c: TokenChoice) -> str:
    return "'" + c.token.replace("\n", "\\n") + "'"


def _shared_batches(f: DeterminismLoadFigures, row: DeterminismLoadLevel) -> bool:
    """Whether this level's requests can have been decoded in one batch
    (`labkit.analysis.determinism_load.shares_batch`)."""
    return shares_batch(row, f.server_slots)


def _split_words(f: DeterminismLoadFigures, row: DeterminismLoadLevel) -> str:
    """`, first different at token 7, where ...` for a level whose replies differed."""
    if row.first_different_token is None:
        return ""
    text = f", first different at token {row.first_different_token}"
    d = row.divergence
    if d is None:
        if row.tokens_from == SERVER_TOKENS:
            return text + " (where one reply ended and another went on)"
        if row.tokens_from == "characters":
            return text + " (counted in characters)"
        return text + f" (counted in {row.tokens_from} tokens, a common ruler)"
    if len(d.candidates) >= 2:
        a, b = d.candidates[0], d.candidates[1]
        text += f", where the top two candidates were {_tok(a)} {_p(a.p)} vs {_tok(b)} {_p(b.p)}"
        if b.p >= NEARLY_TIED * a.p:
            text += ": a near-tie"
            if _shared_batches(f, row):
                text += " that batched arithmetic can flip"
        else:
            text += " in the first reply: not a near-tie"
    if len(d.taken) >= 2:
        ranked = "ranked first" if row.greedy else "took"
        branches = " and ".join(f"{_tok(c)} (p {_p(c.p)})" for c in d.taken[:2])
        text += f"; after the same prefix the replies {ranked} {branches}"
    return text


def _against_words(f: DeterminismLoadFigures, row: DeterminismLoadLevel) -> str:
    """How a later level's replies compare with the first level's."""
    base = f.levels[0].concurrency
    same = row.same_as_first_level
    if same is None:
        return ""
    if same == row.n:
        return f", the same as at concurrency {base}"
    where = (
        f" from token {row.first_level_different_token}"
        if row.first_level_different_token is not None
        else ""
    )
    if row.identical:
        return f", but not concurrency {base}'s reply (its first reply parted{where})"
    return f" ({same} of them concurrency {base}'s reply)"


def _level_words(f: DeterminismLoadFigures, row: DeterminismLoadLevel) -> str:
    """One level's clause."""
    head = f"at concurrency {row.concurrency},"
    failed = f" ({row.failed} failed)" if row.failed else ""
    if row.identical is None:
        return f"{head} too few replies to compare ({row.n} succeeded){failed}"
    if row.identical:
        text = f"{head} all {row.n} replies were identical{failed}" + _against_words(f, row)
    else:
        text = f"{head} {row.distinct_outputs} distinct replies of {row.n}{failed}"
        text += _against_words(f, row) + _split_words(f, row)
    if row.greedy is False:
        text += "; a reply took a token below its top candidate: not greedy decoding"
    if row.peak_in_flight is not None and row.peak_in_flight < row.concurrency:
        were = "was" if row.peak_in_flight == 1 else "were"
        text += f" (only {row.peak_in_flight} {were} in flight at once)"
    if len(row.system_fingerprints) > 1:
        text += f" (its replies carried {len(row.system_fingerprints)} system_fingerprints)"
    return text


def _probability_words(f: DeterminismLoadFigures) -> str:
    """What the probabilities say beside the texts: whether they moved between replies (up
    to where they parted) and between levels, and the closest call on the way (empty: no
    logprobs)."""
    within = [r.prob_drift for r in f.levels if r.prob_drift is not None]
    across = [r.first_level_drift for r in f.levels if r.first_level_drift is not None]
    if not within:
        return ""
    moved = max(within + across)
    if not all(r.identical for r in f.levels if r.identical is not None):
        if moved == 0:
            return "Up to where the replies parted, every probability the server reported matched."
        return (
            f"Up to where the replies parted, the probabilities moved by up to {moved:.2g} "
            "between replies."
        )
    near = min(
        (r.narrowest for r in f.levels if r.narrowest is not None),
        key=lambda n: n.first.p - n.second.p,
        default=None,
    )
    closest = (
        f"token {near.token}: {_tok(near.first)} {_p(near.first.p)} vs {_tok(near.second)} "
        f"{_p(near.second.p)}"
        if near is not None
        else None
    )
    if moved > 0:
        text = f"The probabilities moved by up to {max(within):.2g} between a level's replies"
        if across:
            text += f" and by up to {max(across):.2g} against the first level"
        return text + (f"; the closest call was {closest}." if closest is not None else ".")
    text = "Every probability the server reported matched too, " + (
        "within and across levels" if across else "within each level"
    )
    if closest is not None:
        text += f", so even the closest call ({closest}) went the same way every time"
    batched = [r for r in f.levels if _shared_batches(f, r)]
    if batched:
        most = max(r.peak_in_flight or r.concurrency for r in batched)
        if f.server_slots is not None:
            most = min(most, f.server_slots)
        text += (
            f": sharing a batch of up to {most} left the arithmetic unchanged, as far as these "
            "probabilities show"
        )
    return text + "."


def _levels_list(rows: list[DeterminismLoadLevel]) -> str:
    """`1, 4 and 8`."""
    names = [str(r.concurrency) for r in rows]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _held(f: DeterminismLoadFigures) -> str:
    """`temperature 0 and no seed`: the sampling settings every level was sent with."""
    temperature = f.params.get("temperature")
    seed = f.params.get("seed")
    t = f"temperature {temperature}" if temperature is not None else "the default temperature"
    return f"{t} and " + (f"seed {seed}" if seed is not None else "no seed")


def _changed_words(f: DeterminismLoadFigures) -> str:
    """Where the batch changed the selection: the level with the most distinct replies, where
    they first differed and the top-two margin there."""
    shared = [r for r in f.levels if r.identical is not None and _shared_batches(f, r)]
    moved = [r for r in shared if not r.identical] or [
        r for r in shared if r.same_as_first_level is not None and r.same_as_first_level < r.n
    ]
    row = max(moved, key=lambda r: (r.distinct_outputs, -r.concurrency))
    if row.identical:
        where = (
            f" from token {row.first_level_different_token}"
            if row.first_level_different_token is not None
            else ""
        )
        return (
            f"at concurrency {row.concurrency} all {row.n} replies parted from the reply sent "
            f"one at a time{where}"
        )
    text = f"{row.distinct_outputs} distinct replies of {row.n} at concurrency {row.concurrency}"
    if row.first_different_token is not None:
        text += f", first different at token {row.first_different_token}"
    d = row.divergence
    if d is not None and len(d.candidates) >= 2:
        a, b = d.candidates[0], d.candidates[1]
        text += f", where the top two were {_p(a.p)} vs {_p(b.p)} (margin {_p(a.p - b.p)})"
    return text


def _control_words(f: DeterminismLoadFigures) -> str:
    """Which of temperature, seed and batch controlled the selection, as far as measured:
    temperature and seed were held fixed at every level, so only the batch varied."""
    judged = [r for r in f.levels if r.identical is not None]
    alone = [r for r in judged if not _shared_batches(f, r)]
    shared = [r for r in judged if _shared_batches(f, r)]
    held = _held(f)
    if f.batch_changed_selection is True:
        return (
            f"What controlled the selection: the batch. With {held} at every level, the replies "
            f"sent one at a time were identical, and sharing a batch changed them: "
            f"{_changed_words(f)}; temperature and seed did not vary here (the determinism "
            "experiment varies them)."
        )
    if f.batch_changed_selection is False:
        text = (
            f"What controlled the selection: not the batch. With {held} at every level, batch "
            f"did not change the selection at concurrency {_levels_list(judged)}: 1 distinct "
            "reply at each, "
            "the same at every level"
        )
        batches = [r.decode_batch for r in shared if r.decode_batch is not None]
        if f.server_slots is not None and f.server_slots > 1:
            text += (
                f". Why: the server decodes its slots' sequences in one batch (up to "
                f"{f.server_slots})"
            )
            if batches:
                text += (
                    f" and decoded on average up to {max(batches):.1f} sequences per batch "
                    "during these levels (its own counters)"
                )
            build = f" {f.server_build}" if f.server_build else ""
            text += (
                f", and its build{build} gave every sequence the same tokens whatever shared "
                "its batch: batch-invariant results here, as measured, not a guarantee of its "
                "kernels"
            )
        return text + "."
    if alone and not all(r.identical for r in alone):
        return (
            f"What controlled the selection is not settled by the batch: with {held}, even "
            "the replies sent one at a time differed, so something besides the batch moved it."
        )
    if not shared:
        return (
            "Whether the batch controls the selection was not tested: no level's requests "
            "shared a batch (one slot, or one in flight at a time)."
        )
    return (
        "Whether the batch controls the selection was not tested: no level sent its "
        "requests one at a time to compare with (add concurrency 1)."
    )


def _server_words(f: DeterminismLoadFigures) -> str:
    """The server's batch setting (and the batches it counted), build and determinism mode,
    as far as it reported them."""
    builds = sorted({b for r in f.levels for b in r.server_builds})
    if f.server_build and f.server_build not in builds:
        builds.append(f.server_build)
    prints = sorted({p for r in f.levels for p in r.system_fingerprints})
    parts = []
    if f.server_slots is not None:
        over = [r.concurrency for r in f.levels if r.concurrency > f.server_slots]
        slots = f"{f.server_slots} slot{'s' if f.server_slots != 1 else ''}"
        parts.append(
            f"the server decodes up to {f.server_slots} requests in one batch ({slots})"
            + (f", so above concurrency {f.server_slots} the rest waited" if over else "")
        )
    else:
        parts.append("batch setting not reported")
    counted = [r for r in f.levels if r.decode_batch is not None]
    if counted:
        per = ", ".join(f"{r.decode_batch:.1f} at concurrency {r.concurrency}" for r in counted)
        parts.append(f"sequences per decode batch, by its own counters: {per}")
    parts.append(f"server_build {', '.join(builds)}" if builds else "server_build not reported")
    parts.append(
        f"system_fingerprint {', '.join(prints)}" if prints else "system_fingerprint not reported"
    )
    parts.append(f"determinism mode {f.determinism_mode or 'not reported'}")
    return "; ".join(parts)


def determinism_load_answer(f: DeterminismLoadFigures) -> str:
    """Per level whether the replies stayed identical and, where they did not, where and how
    close the call was; then the server's batch setting, build and determinism mode."""
    temperature = f.params.get("temperature")
    sent = f"temperature {temperature}" if temperature is not None else "the default temperature"
    clauses = [_level_words(f, row) for row in f.levels]
    text = f"Identical requests at {sent}: " + "; ".join(clauses) + "."
    if f.top_k is not None and not f.inspected:
        text += f" Candidates not inspected: {f.not_inspected_because}, so no margin is known."
    probabilities = _probability_words(f)
    if probabilities:
        text += " " + probabilities
    server = _server_words(f)
    return f"{text} {_control_words(f)} {server[0].upper()}{server[1:]}."
