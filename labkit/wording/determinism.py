"""`determinism`'s answer: which sampling variants repeated their output, and where
the others diverged."""

from __future__ import annotations

from labkit.figures.determinism import DeterminismFigures, VariantRow
from labkit.wording.next_token import divergence_sentence

__all__ = ["control_sentence", "determinism_answer"]


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
        why = "even at temperature 0 replies differed"
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
    seen = f.next_token
    replies = {r.variant: f"{r.distinct_outputs} different replies of {r.n}" for r in judged}
    # With the candidates the divergence sentence says where the replies split, once.
    said = seen is not None and seen.inspected and any(v.divergence for v in seen.variants)
    if diverged and not said:
        first = min(diverged, key=lambda r: r.first_divergent_token or 0)
        text += (
            f" The earliest split came at {_position(f, first.first_divergent_token or 0)} "
            f"({_variant_words(first)}: {replies[first.variant]})."
        )
    if seen is not None:
        text += (
            " " + divergence_sentence(seen, replies)
            if seen.inspected
            else f" Its candidates were not inspected: {seen.not_inspected_because}."
        )
    return text + " " + control_sentence(greedy, hot_free, hot_seed)


def control_sentence(
    greedy: list[VariantRow], hot_free: list[VariantRow], hot_seed: list[VariantRow]
) -> str:
    """Which of temperature and seed controlled the selection, as far as these repeats
    measured it; the batch was not varied (the `determinism_load` experiment varies it)."""
    varied = any(not r.identical for r in hot_free)
    named = []
    if greedy and all(r.identical for r in greedy) and varied:
        named.append("temperature (0 fixed the reply; above 0 without a seed it varied)")
    if hot_seed and all(r.identical for r in hot_seed) and varied:
        named.append("seed (it made sampled replies repeat)")
    if named:
        text = "What controlled the selection here: " + " and ".join(named) + "."
    elif not (greedy and not all(r.identical for r in greedy)):
        text = "Neither temperature nor seed was shown to control the selection in these repeats."
    else:
        text = ""
    if greedy and not all(r.identical for r in greedy):
        text += (
            " Not temperature alone: at temperature 0 the replies still differed."
            if text
            else "What controlled the selection here: not temperature alone, since at "
            "temperature 0 the replies still differed."
        )
    return text + " The batch was not varied here (`determinism_load` varies it)."


def _position(f: DeterminismFigures, index: int) -> str:
    """`token 3` for the 0-based `index` of the outputs' compared units, 1-based as every
    position is said (`character 3` where the outputs were compared by characters, and the
    ruler named where it is not the model's own tokenizer)."""
    if f.tokenizer.startswith("characters"):
        return f"character {index + 1}"
    ruler = f.tokenizer.removeprefix("tiktoken:").removesuffix(" (common ruler)")
    if f.tokenizer.startswith("tiktoken:"):
        return f"token {index + 1} (of {ruler}, a common ruler)"
    return f"token {index + 1}"
