"""Sampling variants and the logprob ask, shared by `determinism` and `next_token`.

A `Variant` is a named set of sampling parameters that an experiment sends its prompt under;
`logprob_request` asks a provider for each output token's candidates where it can.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from labkit.providers.base import ChatRequest, Provider

__all__ = ["Variant", "logprob_request"]


class Variant(BaseModel):
    """A named set of sampling parameters."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


def logprob_request(provider: Provider, request: ChatRequest, top_k: int | None) -> ChatRequest:
    """`request` asking `provider` for `top_k` candidates per token, where it can (`top_k`
    None, or a provider that cannot: `request` unchanged)."""
    asked = provider.logprob_params(top_k) if top_k else {}
    if asked:
        request.params = {**request.params, **asked}
        request.top_logprobs = top_k
    return request
