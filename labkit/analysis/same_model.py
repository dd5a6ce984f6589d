"""Same model? A provider's fingerprint against a reference endpoint's, and the verdict.

The fingerprint (`fingerprint`) is one provider's answers to a fixed probe set
(`labkit.experiments.same_model`): each fixed text's token count beyond the chat framing, each
prompt's first-token distribution at temperature 0 and its stop reason. Repeats at temperature 0
are identical, so the prompts are the sample: two servers of one model differ only by numerics
(kernels, batching, precision), by less than a `tolerance`, and another model by far more.
`verdict` tests each part against the reference's and names the first difference, or
``consistent``, or ``undecided``. The tests and the verdict: docs/experiments.md, "Same model?".
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from labkit.analysis.stats import proportion
from labkit.figures.observatory import SameModelVerdict
from labkit.figures.same_model import PromptDistance, SameModelFigures, TextCount
from labkit.records import RequestRecord

__all__ = [
    "ALPHA",
    "OTHER",
    "Fingerprint",
    "fingerprint",
    "same_model_figures",
    "total_variation",
    "verdict",
    "verdicts",
]

#: The level of every test of the verdict.
ALPHA = 0.05
#: The outcome that holds each distribution's probability beyond its top candidates.
OTHER = "\0other"
#: Stop reasons of a reply that ended on its own.
_ENDED = frozenset({"end", "stop_sequence"})


@dataclass
class Fingerprint:
    """One provider's answers to the fixed probe set."""

    provider: str
    model: str = ""
    #: Each fixed text's prompt tokens (first successful repeat), in the texts' order.
    counts: dict[str, int] = field(default_factory=dict)
    #: Each prompt's first-token distribution (mean over its repeats), OTHER for the rest.
    dists: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Each prompt's likeliest first token.
    tops: dict[str, str] = field(default_factory=dict)
    #: Each prompt's stop reason (the commonest over its repeats).
    stops: dict[str, str] = field(default_factory=dict)
    logprobs_returned: bool = False


def _first_distribution(record: RequestRecord) -> dict[str, float] | None:
    lp = record.logprobs
    if lp is None or not lp.steps:
        return None
    step = lp.steps[0]
    cands = step.top or []
    dist: dict[str, float] = {}
    for c in cands:
        dist[c.token] = dist.get(c.token, 0.0) + math.exp(c.logprob)
    if step.token not in dist:
        dist[step.token] = math.exp(step.logprob)
    total = sum(dist.values())
    if total > 1.0:  # rounding: normalise, the rest is nothing
        dist = {k: v / total for k, v in dist.items()}
    else:
        dist[OTHER] = 1.0 - total
    return dist


def fingerprint(provider: str, records: Iterable[RequestRecord]) -> Fingerprint:
    """A provider's fingerprint from its `same_model` records (warm-ups and failures left
    out): ``phase`` ``count`` records carry ``text_id``, ``dist`` records a prompt id."""
    fp = Fingerprint(provider)
    dists: dict[str, list[dict[str, float]]] = defaultdict(list)
    stops: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        if r.warmup or r.error is not None:
            continue
        fp.model = fp.model or r.model
        phase = r.tags.get("phase")
        if phase == "count":
            text_id = str(r.tags.get("text_id", r.prompt_id))
            if r.usage.input_tokens is not None and text_id not in fp.counts:
                fp.counts[text_id] = r.usage.input_tokens
        elif phase == "dist":
            if r.stop_reason is not None:
                stops[r.prompt_id][str(r.stop_reason)] += 1
            dist = _first_distribution(r)
            if dist is not None:
                dists[r.prompt_id].append(dist)
                fp.logprobs_returned = True
    for pid, many in dists.items():
        keys = {k for d in many for k in d}
        mean = {k: sum(d.get(k, 0.0) for d in many) / len(many) for k in keys}
        fp.dists[pid] = mean
        fp.tops[pid] = max((k for k in mean if k != OTHER), key=lambda k: mean[k], default="")
    fp.stops = {pid: c.most_common(1)[0][0] for pid, c in stops.items()}
    return fp


def total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    """½ Σ |p − q| over the union of both outcomes."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def _wilcoxon(diffs: Sequence[float], alternative: str) -> float | None:
    """The one-sided signed-rank p-value of `diffs` (None: fewer than 2 prompts)."""
    if len(diffs) < 2:
        return None
    from scipy import stats as sps

    if all(d == 0 for d in diffs):
        return 1.0
    result = sps.wilcoxon(diffs, alternative=alternative, zero_method="zsplit")
    return float(result.pvalue)


def _stop_p(mine: Sequence[str], theirs: Sequence[str]) -> float | None:
    """Fisher's exact test (the counts are small) on ended-on-its-own against not, here and
    at the reference."""
    if not mine or not theirs:
        return None
    from scipy import stats as sps

    a = sum(s in _ENDED for s in mine)
    b = sum(s in _ENDED for s in theirs)
    table = [[a, len(mine) - a], [b, len(theirs) - b]]
    return float(sps.fisher_exact(table).pvalue)


def _texts(
    mine: Fingerprint, ref: Fingerprint, order: Sequence[str], named: dict[str, int]
) -> list[TextCount]:
    ids = [t for t in order if t in mine.counts or t in ref.counts] or sorted(
        set(mine.counts) | set(ref.counts)
    )
    base = next((t for t in ids if t in mine.counts and t in ref.counts), None)
    rows = []
    for t in ids:
        a, b = mine.counts.get(t), ref.counts.get(t)
        da = a - mine.counts[base] if a is not None and base is not None else None
        db = b - ref.counts[base] if b is not None and base is not None else None
        rows.append(
            TextCount(
                text_id=t,
                tokens=a,
                reference_tokens=b,
                beyond_framing=da,
                reference_beyond_framing=db,
                named_tokenizer_tokens=named.get(t),
                equal=None if da is None or db is None or t == base else da == db,
            )
        )
    return rows


def verdict(
    mine: Fingerprint,
    ref: Fingerprint,
    tolerance: float = 0.1,
    texts: Sequence[str] = (),
    named_counts: dict[str, int] | None = None,
) -> tuple[SameModelVerdict, list[TextCount], list[PromptDistance]]:
    """The verdict on `mine` against the reference `ref`, with the rows it rests on.

    Two one-sided Wilcoxon signed-rank tests over the prompts on TV − `tolerance` (exact under
    50 prompts; no normality needed): *greater* rejects "within the tolerance" (differs:
    distributions), *less* rejects "beyond it" (consistent).
    """
    rows = _texts(mine, ref, texts, named_counts or {})
    compared = [r for r in rows if r.equal is not None]
    equal = sum(bool(r.equal) for r in compared)
    reasons: list[str] = []
    prompts = sorted(set(mine.dists) | set(ref.dists) | set(mine.stops) | set(ref.stops))
    distances = []
    for pid in prompts:
        p, q = mine.dists.get(pid), ref.dists.get(pid)
        distances.append(
            PromptDistance(
                prompt_id=pid,
                total_variation=total_variation(p, q) if p is not None and q is not None else None,
                top=mine.tops.get(pid),
                reference_top=ref.tops.get(pid),
                stop=mine.stops.get(pid),
                reference_stop=ref.stops.get(pid),
            )
        )
    tvs = [d.total_variation for d in distances if d.total_variation is not None]
    diffs = [tv - tolerance for tv in tvs]
    p_beyond = _wilcoxon(diffs, "greater")
    p_within = _wilcoxon(diffs, "less")
    shared = [pid for pid in prompts if pid in mine.stops and pid in ref.stops]
    p_stop = _stop_p([mine.stops[s] for s in shared], [ref.stops[s] for s in shared])

    def made(kind: str, confidence: float) -> SameModelVerdict:
        return SameModelVerdict(
            model=mine.model or ref.model,
            provider=mine.provider,
            reference=ref.provider,
            verdict=kind,
            confidence=confidence,
            reasons=reasons,
            token_counts_equal=proportion(equal, len(compared)) if compared else None,
            distribution_p=p_beyond,
            stop_reason_p=p_stop,
        )

    if compared and equal < len(compared):
        first = next(r for r in compared if not r.equal)
        reasons.append(
            f"{len(compared) - equal} of {len(compared)} fixed texts count differently: "
            f"{first.text_id} is {first.beyond_framing} tokens beyond the framing here, "
            f"{first.reference_beyond_framing} at the reference"
        )
        return made("differs: tokenizer", 1.0), rows, distances
    if compared:
        reasons.append(f"all {len(compared)} fixed texts count alike (beyond the framing)")
    elif not mine.counts or not ref.counts:
        reasons.append("token counts not compared: a side reported no input tokens")
    if tvs:
        mean_tv = sum(tvs) / len(tvs)
        reasons.append(
            f"first-token distributions over {len(tvs)} prompts: mean total variation "
            f"{mean_tv:.3f} (tolerance {tolerance:g})"
        )
    else:
        reasons.append("distributions not compared: a side returned no logprobs")
    if p_beyond is not None and p_beyond < ALPHA:
        return made("differs: distributions", 1 - p_beyond), rows, distances
    if p_stop is not None and p_stop < ALPHA:
        reasons.append(f"stop reasons differ (Fisher's exact p = {p_stop:.2g})")
        return made("differs: behaviour", 1 - p_stop), rows, distances
    if p_within is not None and p_within < ALPHA:
        return made("consistent", 1 - p_within), rows, distances
    reasons.append("too few prompts to tell within the tolerance from beyond it")
    return made("undecided", 1 - min(p_within or 1.0, p_beyond or 1.0)), rows, distances


def same_model_figures(
    provider: str,
    records_by_provider: dict[str, list[RequestRecord]],
    reference: str,
    tolerance: float = 0.1,
    texts: Sequence[str] = (),
    named: tuple[str, dict[str, int]] | None = None,
) -> SameModelFigures:
    """`provider`'s figures against `reference` from every provider's records."""
    mine = fingerprint(provider, records_by_provider.get(provider, []))
    ref = fingerprint(reference, records_by_provider.get(reference, []))
    figs = SameModelFigures(
        reference=reference,
        is_reference=provider == reference,
        tokenizer=named[0] if named else None,
        tolerance=tolerance,
        stop_mix=dict(Counter(mine.stops.values())),
        reference_stop_mix=dict(Counter(ref.stops.values())),
    )
    if provider == reference:
        return figs.model_copy(
            update={"texts": _texts(mine, mine, texts, named[1] if named else {})}
        )
    if not records_by_provider.get(reference):
        v = SameModelVerdict(
            model=mine.model,
            provider=provider,
            reference=reference,
            verdict="undecided",
            confidence=0.0,
            reasons=[f"the reference {reference!r} has no records in this run"],
        )
        return figs.model_copy(update={"verdict": v})
    v, rows, distances = verdict(mine, ref, tolerance, texts, named[1] if named else None)
    return figs.model_copy(update={"verdict": v, "texts": rows, "prompts": distances})


def verdicts(
    records: Iterable[RequestRecord], reference: str, tolerance: float = 0.1
) -> list[SameModelVerdict]:
    """Every provider's verdict against `reference`, from `same_model` records of any runs
    (the observatory's hook: stored probes read back as records). One per provider and
    model name, the reference left out. Records, not a runs-as-data frame: the flattened
    columns leave out ``logprobs``, which the distributions are read from (a round's
    records are in its run folder, the frame's ``run_dir``)."""
    by: dict[tuple[str, str], list[RequestRecord]] = defaultdict(list)
    for r in records:
        by[(r.provider, r.model)].append(r)
    refs = [k for k in by if k[0] == reference]
    out = []
    for (provider, model), recs in sorted(by.items()):
        if provider == reference:
            continue
        ref_key = next((k for k in refs if k[1] == model), refs[0] if refs else None)
        ref_fp = fingerprint(reference, by[ref_key] if ref_key else [])
        if ref_key is None:
            out.append(
                SameModelVerdict(
                    model=model,
                    provider=provider,
                    reference=reference,
                    verdict="undecided",
                    confidence=0.0,
                    reasons=[f"no records of the reference {reference!r}"],
                )
            )
            continue
        out.append(verdict(fingerprint(provider, recs), ref_fp, tolerance)[0])
    return out
