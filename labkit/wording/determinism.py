"""`determinism`'s answer: which sampling variants repeated their output, and where
the others diverged."""

from __future__ import annotations

from labkit.figures.determinism import DeterminismFigures, VariantRow
from labkit.wording.next_token import divergence_sentence

__all__ = ["determinism_answer"]


def _variant_words(row: VariantRow) -> str:
    """`temperature 1, seed 1234` for a variant's parameters."""
    words = [f"temperature {row.params['temperature']}"] if "temperature" in row.params else []
    if row.params.get("seed") is not None:
        words.append(f"seed {row.params['seed']}")
    return ", ".join(words) or row.variant


def _temperature(r: VariantRow) -> float:
    return float(r.params.get("temperature", 1.0))


def determinism_answer(f: DeterminismFigures) -> str:
    """Which settings repeated their reply exactly, and which parameter decided it."""
    judged = [r for r in f.variants if r.identical is not None]
    same = sum(1 for r in judged if r.identical)
    greedy = [r for r in judged if _temperature(r) == 0]
    hot = [r for r in judged if _temperature(r) > 0]
    hot_seed = [r for r in hot if r.params.get("seed") is not None]
    hot_free = [r for r in hot if r.params.get("seed") is None]
    if greedy and all(r.identical for r in greedy):
        why = "at temperature 0 the reply never changed, seed or not"
    elif greedy:
        why = "even at temperature 0 replies differed (batching or hardware nondeterminism)"
    else:
        why = "no variant decoded greedily"
    text = f"{same} of {len(judged)} settings gave the same reply on every repeat: {why}."
    if hot_free:
        varied = not all(r.identical for r in hot_free)
        text += (
            " Above temperature 0 without a seed, replies varied."
            if varied
            else " Above temperature 0 without a seed, replies still matched (a fixed "
            "default seed, or too few repeats)."
        )
    if hot_seed:
        text += (
            " A seed made sampled replies repeat."
            if all(r.identical for r in hot_seed)
            else " A seed did not make sampled replies repeat here."
        )
    diverged = [r for r in judged if not r.identical and r.first_divergent_token is not None]
    if diverged:
        first = min(diverged, key=lambda r: r.first_divergent_token or 0)
        where = (
            "at the first token"
            if not first.first_divergent_token
            else f"after {first.first_divergent_token} identical tokens"
        )
        text += (
            f" The earliest split came {where} ({_variant_words(first)}: "
            f"{first.distinct_outputs} different replies of {first.n})."
        )
    seen = f.next_token
    if seen is not None:
        text += (
            " " + divergence_sentence(seen)
            if seen.inspected
            else f" Its candidates were not inspected: {seen.not_inspected_because}."
        )
    return text
