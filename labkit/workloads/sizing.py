"""Synthetic prompts sized in tokens: filler words, and how many tokens one word makes.

A prompt of ``n`` tokens is ``n / tokens_per_word`` filler words. Until a provider's own
counter has counted a sample, a word is taken as 1.3 tokens (English words in common BPE
vocabularies); `measure_sizing` counts a 400-word sample once per provider and run and
hands the result to every experiment that asks (and, inside a level's job, to worker
processes and Ray actors).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

if TYPE_CHECKING:
    from labkit.providers.base import Provider

__all__ = ["TOKENS_PER_WORD_GUESS", "PromptSizing", "count_tokens", "filler_text", "measure_sizing"]

#: Tokens per filler word before (or without) a count by the provider.
TOKENS_PER_WORD_GUESS = 1.3
#: Words in the calibration sample: long enough that its edges do not bias the rate.
_SAMPLE_WORDS = 400

_WORDS = [
    "river",
    "stone",
    "market",
    "window",
    "garden",
    "letter",
    "engine",
    "winter",
    "silver",
    "forest",
    "candle",
    "harbor",
    "mountain",
    "pencil",
    "village",
    "thunder",
    "orchard",
    "bridge",
    "lantern",
    "meadow",
    "copper",
    "island",
    "basket",
    "feather",
    "castle",
    "valley",
    "mirror",
    "ladder",
    "planet",
    "shadow",
    "violin",
    "desert",
    "rocket",
    "blanket",
]


def filler_text(n_words: int, offset: int = 0) -> str:
    """`n_words` plain English words, varied enough to be a realistic prompt; `offset`
    starts the sequence elsewhere (the same arguments give the same text)."""
    return " ".join(_WORDS[(offset + i * 7) % len(_WORDS)] for i in range(n_words))


class PromptSizing(BaseModel):
    """How many tokens one filler word makes for one provider: measured once per provider
    and run, then carried wherever prompts are built (a level's job included)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens_per_word: PositiveFloat = Field(
        default=TOKENS_PER_WORD_GUESS, description="Tokens the provider counts per filler word."
    )
    source: str | None = Field(
        default=None,
        description="The counter that measured it (`llamacpp:/tokenize`); None: the guess.",
    )

    def words_for(self, tokens: int) -> int:
        """Filler words for about `tokens` tokens (at least one)."""
        return max(1, round(tokens / self.tokens_per_word))

    def filler(self, tokens: int, offset: int = 0) -> str:
        """Filler text of about `tokens` tokens."""
        return filler_text(self.words_for(tokens), offset)

    def corrected(self, counted: int, target: int) -> PromptSizing:
        """This sizing scaled by a built prompt's count: a prompt meant to be `target`
        tokens counted `counted` (words join into tokens a little differently inside a
        long prompt with headers)."""
        return self.model_copy(update={"tokens_per_word": self.tokens_per_word * counted / target})


async def count_tokens(provider: Provider, text: str) -> int | None:
    """The provider's count of `text` as a user message; None when it has no counter, its
    counter fails, or it counts nothing (a sizing never rests on a failed count)."""
    try:
        counted = await provider.count_tokens(text)
    except Exception:
        return None
    return counted.tokens if counted is not None and counted.tokens > 0 else None


# One measurement per provider object: the runner keeps one per provider for a whole run.
_measured: weakref.WeakKeyDictionary[Provider, PromptSizing] = weakref.WeakKeyDictionary()


async def measure_sizing(provider: Provider) -> PromptSizing:
    """`provider`'s sizing, counted on a 400-word sample the first time it is asked in a
    run; the 1.3 guess where the provider has no counter."""
    known = _measured.get(provider)
    if known is not None:
        return known
    sample = filler_text(_SAMPLE_WORDS)
    try:
        counted = await provider.count_tokens(sample)
    except Exception:
        counted = None
    sizing = PromptSizing()
    if counted is not None and counted.tokens > 0:
        sizing = PromptSizing(tokens_per_word=counted.tokens / _SAMPLE_WORDS, source=counted.source)
    _measured[provider] = sizing
    return sizing
