"""`thinking`: how long a reasoning model thought before its first visible token, where it
counts its reasoning tokens but never streams them.

The prompt is sent `repeats` times asking for reasoning (`effort`: Chat `reasoning_effort`,
Responses `reasoning.effort`). Each reply's hidden reasoning tokens (usage) times its own
visible decode pace estimate the thinking time, and its TTFT splits into waiting, thinking
(estimated) and answering (`labkit.analysis.thinking`). A provider that reports no hidden
reasoning, or streams its reasoning, is named as not estimated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field

from labkit.analysis.thinking import thinking_figures
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.providers.base import ChatRequest, Provider
from labkit.records import LabAnswer, RequestRecord
from labkit.wording.thinking import thinking_answer

__all__ = ["ThinkingExperiment", "ThinkingSettings"]


class ThinkingSettings(ExperimentSettings):
    """One prompt, sent `repeats` times (2 or more: the interval is across requests) with
    reasoning asked for."""

    kind: Literal["thinking"] = "thinking"
    prompt: str = Field(
        default="Is 3599 a prime number? Answer in one short sentence.", min_length=1
    )
    repeats: int = Field(default=12, ge=2, le=10_000, description="Sends (2 or more).")
    effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        default="low",
        description="The reasoning effort asked for (null: none asked; the model's default).",
    )
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 64})


@register_experiment
class ThinkingExperiment(Experiment):
    """Hidden reasoning's time, estimated, and the TTFT split into waiting, thinking and
    answering."""

    kind: ClassVar[str] = "thinking"
    settings_model: ClassVar[type[ExperimentSettings]] = ThinkingSettings
    question: ClassVar[str] = (
        "How much of the time to the first token did the model spend thinking, where it "
        "reasons without streaming its reasoning?"
    )

    @property
    def _s(self) -> ThinkingSettings:
        assert isinstance(self.settings, ThinkingSettings)
        return self.settings

    def _params(self, provider: Provider) -> dict[str, Any]:
        """The params with the effort asked as the provider's API takes it: Chat's
        `reasoning_effort`, else (an API that does not send it: Responses) `reasoning.effort`."""
        params = dict(self._s.params)
        effort = self._s.effort
        if effort is None:
            return params
        if "reasoning_effort" in provider.wire_params({"reasoning_effort": effort}):
            params.setdefault("reasoning_effort", effort)
        else:
            params["reasoning"] = {**params.get("reasoning", {}), "effort": effort}
        return params

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and repeats."""
        return self._s.warmup + self._s.repeats

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups, then the prompt `repeats` times, reasoning asked for."""
        s = self._s
        params = self._params(provider)
        for planned in self.warmups("thinking", s.prompt):
            planned.request.params = {**params, **planned.request.params}
            yield planned
        for trial in range(s.repeats):
            yield PlannedRequest(
                key=f"{self.name}/{trial}",
                request=ChatRequest(self.messages(s.prompt), dict(params), "thinking"),
                trial=trial,
            )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The estimate over the measured replies with hidden reasoning."""
        mine = [r for r in records if r.provider == provider_id]
        figures = thinking_figures(mine, dict(self._s.params))
        text = thinking_answer(figures, provider_id)
        status: Literal["ok", "failed"] = "ok" if figures.thinking_ms is not None else "failed"
        return self.answer(provider_id, model, text, figures, status=status)
