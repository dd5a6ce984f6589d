"""`next_token`: the model's candidates at every step of a reply, and why two replies diverge.

Each variant (temperature 0, and a higher temperature with and without a seed, by default)
sends the prompt `repeats` times asking for each output token's logprob and `top_logprobs`
alternatives (`Provider.logprob_params`). The figures (`labkit.analysis.next_token`) give per
step the token taken, its probability, the candidates and the entropy; where repeats
diverged, the branches and their probabilities; at temperature 0, whether the top candidate
was always taken. A provider that cannot return logprobs is named as not inspected.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from labkit.analysis.next_token import next_token_figures, variant_figures
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.variants import Variant, logprob_request
from labkit.providers.base import ChatRequest, Provider
from labkit.records import MAX_TOP_LOGPROBS, LabAnswer, RequestRecord
from labkit.wording.next_token import next_token_answer

__all__ = ["NextTokenExperiment", "NextTokenSettings"]

DEFAULT_VARIANTS = [
    Variant(name="t0", params={"temperature": 0}),
    Variant(name="t1", params={"temperature": 1.0}),
    Variant(name="t1-seed", params={"temperature": 1.0, "seed": 1234}),
]


class NextTokenSettings(ExperimentSettings):
    """One prompt, several variants, `repeats` (at least 2) sends each, with logprobs."""

    kind: Literal["next_token"] = "next_token"
    prompt: str = Field(
        default="Write a short, original story about a lighthouse keeper in three sentences.",
        min_length=1,
    )
    top_logprobs: int = Field(
        default=5,
        ge=1,
        le=MAX_TOP_LOGPROBS,
        description="Candidates asked for at every step (at most 20).",
    )
    repeats: PositiveInt = Field(default=2, ge=2, description="Sends per variant (2 or more).")
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 24})
    variants: list[Variant] = Field(default_factory=lambda: list(DEFAULT_VARIANTS), min_length=1)


@register_experiment
class NextTokenExperiment(Experiment):
    """Per-step candidates, entropy and the divergence point of repeated replies."""

    kind: ClassVar[str] = "next_token"
    settings_model: ClassVar[type[ExperimentSettings]] = NextTokenSettings
    question: ClassVar[str] = (
        "At each step, which tokens did the model weigh, how sure was it, and at which token "
        "and between which candidates did two replies part?"
    )

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._can_return: dict[str, bool] = {}

    @property
    def _s(self) -> NextTokenSettings:
        assert isinstance(self.settings, NextTokenSettings)
        return self.settings

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and variants × repeats."""
        return self._s.warmup + len(self._s.variants) * self._s.repeats

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups, then every variant `repeats` times, each asking for logprobs."""
        s = self._s
        self._can_return[provider.id] = bool(provider.logprob_params(s.top_logprobs))
        yield from self.warmups("next_token", s.prompt)
        for v in s.variants:
            params = {**s.params, **v.params}
            for trial in range(s.repeats):
                request = ChatRequest(self.messages(s.prompt), params, "next_token")
                yield PlannedRequest(
                    key=f"{self.name}/{v.name}/{trial}",
                    request=logprob_request(provider, request, s.top_logprobs),
                    trial=trial,
                    tags={"variant": v.name},
                )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Per variant: steps with candidates, divergence, greedy check."""
        s = self._s
        variants = []
        for v in s.variants:
            recs = [
                r
                for r in records
                if not r.warmup and r.error is None and r.tags.get("variant") == v.name
            ]
            variants.append(variant_figures(v.name, {**s.params, **v.params}, recs))
        figures = next_token_figures(
            s.top_logprobs, variants, can_return=self._can_return.get(provider_id, True)
        )
        text = next_token_answer(figures, provider_id)
        return self.answer(
            provider_id, model, text, figures, status="ok" if figures.inspected else "failed"
        )
