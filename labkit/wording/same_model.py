"""`same_model`'s answer: the verdict against the reference, its confidence, and why."""

from __future__ import annotations

from labkit.figures.same_model import SameModelFigures

__all__ = ["same_model_answer"]


def same_model_answer(figures: SameModelFigures, provider: str) -> str:
    """One sentence with the verdict and its confidence, then the reasons it rests on."""
    if figures.is_reference or figures.verdict is None:
        n = sum(t.tokens is not None for t in figures.texts)
        stops = ", ".join(f"{k} ×{v}" for k, v in sorted(figures.stop_mix.items())) or "none"
        return (
            f"{provider} is the reference every other provider of this model name is "
            f"compared with ({n} fixed texts counted; prompts' stops: {stops})."
        )
    v = figures.verdict
    lead = {
        "consistent": f"{provider} is consistent with the reference {v.reference}",
        "differs: tokenizer": f"{provider} differs from the reference {v.reference}: another "
        "tokenizer",
        "differs: distributions": f"{provider} differs from the reference {v.reference}: its "
        "next-token distributions are another model's",
        "differs: behaviour": f"{provider} differs from the reference {v.reference}: its stop "
        "behaviour",
        "undecided": f"Whether {provider} serves the reference {v.reference}'s model is undecided",
    }[v.verdict]
    said = f"{lead} (confidence {v.confidence:.1%})."
    if v.reasons:
        said += " " + "; ".join(v.reasons[:3]) + "."
    return said
