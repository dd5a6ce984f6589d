"""`conversation`'s answer: how TTFT grew with the history, with and without the
provider's prompt cache."""

from __future__ import annotations

from labkit.figures.conversation import ConversationFigures, ConversationVariant
from labkit.wording.common import ms

__all__ = ["conversation_answer"]


def _variant_growth(v: ConversationVariant) -> str:
    return (
        f"{ms(v.first_ttft_ms)} at turn 1 to {ms(v.last_ttft_ms)} at the last turn "
        f"(medians of {v.sessions} sessions) while the prompt grew from "
        f"{v.first_input_tokens or 0:.0f} to {v.last_input_tokens or 0:.0f} tokens"
    )


def conversation_answer(f: ConversationFigures, asked_off: bool) -> str:
    """How TTFT grew with the history, with and without the provider's prompt cache
    (`asked_off`: a cache-off variant was configured)."""
    done = [v for v in f.variants if v.sessions]
    on = next((v for v in done if v.cache == "on"), None)
    off = next((v for v in done if v.cache == "off"), None)
    lead = on or done[0]
    text = f"TTFT went from {_variant_growth(lead)}, with the prompt cache {lead.cache}."
    if lead.last_reuse is not None:
        text += f" The provider served {lead.last_reuse:.0%} of the last prompt from its cache."
    if off is not None and off is not lead:
        text += f" With it off, TTFT went from {_variant_growth(off)}."
        if on and on.last_ttft_ms and off.last_ttft_ms:
            text += (
                f" At the last turn the cache cut TTFT ×{off.last_ttft_ms / on.last_ttft_ms:.2f}."
            )
    elif asked_off and off is None:
        text += " The provider has no prompt-cache switch, so no cache-off variant ran."
    return text
