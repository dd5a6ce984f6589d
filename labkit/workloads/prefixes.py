"""Shared prefixes: requests that open with the same system prompt or document and end
each its own way (or a few ways), so a provider's prefix cache can serve the prefix."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from labkit.workloads.sizing import PromptSizing

__all__ = ["SharedPrefix"]


class SharedPrefix(BaseModel):
    """Requests that share a system prompt or document, with some distinct suffixes."""

    model_config = ConfigDict(extra="forbid")

    tokens: PositiveInt = Field(description="Length of the shared prefix, in tokens.")
    distinct_suffixes: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Distinct suffixes per request: 1, every request ends its own way (only "
        "the prefix can be cached); 0.25, a quarter as many suffixes as requests, each sent "
        "about four times (whole prompts repeat).",
    )
    where: Literal["system", "user"] = Field(
        default="system",
        description="`system`: the prefix is the system message; `user`: it opens the user "
        "message (a document, then the question).",
    )

    def suffix_of(self, i: int) -> int:
        """Request `i`'s suffix number: ``i × distinct_suffixes`` rounded down, so
        consecutive requests share one."""
        return math.floor(i * self.distinct_suffixes)

    def prefix_text(
        self, sizing: PromptSizing, head: str, seed: int, system: str | None = None
    ) -> str:
        """The prefix: `system` (when set), then `head` and filler of `tokens` tokens; a new
        `head` makes a new prefix (no earlier prefix in a warm cache serves it)."""
        text = f"{head} " + sizing.filler(self.tokens, seed)
        return f"{system}\n\n{text}" if system else text

    def messages(self, prefix: str, suffix: str) -> list[dict[str, str]]:
        """One request's chat messages: `prefix` as the system message and `suffix` as the
        user's, or (`where: user`) both in one user message, the document then the question."""
        if self.where == "system":
            return [{"role": "system", "content": prefix}, {"role": "user", "content": suffix}]
        return [{"role": "user", "content": f"{prefix}\n\n{suffix}"}]
