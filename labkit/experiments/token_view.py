"""`token_view`: one reply, token by token, with everything labkit can see of each token.

The prompt (led by a fresh mark, so its first send finds no cached prefix) is sent `sends`
times (2 by default: the second finds the first's prompt in the cache) asking for each output
token's logprob and `top_k` candidates (`Provider.logprob_params`) and the server's own time
at every token (`Provider.event_time_params`: llama.cpp's `timings_per_token`), with each
output event's text kept (`ChatRequest.event_detail`). The figures
(`labkit.analysis.token_view`) join per token its text, probability and candidates, its
arrival on the client, the server's time and whether the prompt came from cache; a column
the API does not report is named, never shown blank or zero.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt

from labkit.analysis.token_view import token_view_figures
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.variants import logprob_request
from labkit.providers.base import ChatRequest, Provider
from labkit.records import MAX_TOP_LOGPROBS, LabAnswer, RequestRecord
from labkit.wording.token_view import token_view_answer

__all__ = ["TokenViewExperiment", "TokenViewSettings"]


class TokenViewSettings(ExperimentSettings):
    """One prompt sent `sends` times, every token seen."""

    kind: Literal["token_view"] = "token_view"
    prompt: str = Field(
        default="Explain in two sentences why the sky is blue.",
        min_length=1,
    )
    sends: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Sends of the prompt (2: the second shows the prompt cache at work).",
    )
    top_logprobs: int = Field(
        default=5, ge=1, le=MAX_TOP_LOGPROBS, description="Candidates per token (at most 20)."
    )
    fresh_prefix: bool = Field(
        default=True,
        description="Lead the prompt with a mark new to this run, so its first send finds "
        "nothing of it cached.",
    )
    warmup: NonNegativeInt = Field(default=0, description="Warm-up requests (other prompt).")
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 24, "temperature": 0})


@register_experiment
class TokenViewExperiment(Experiment):
    """Each token of one reply: text, probability, candidates, arrival, server time, cache."""

    kind: ClassVar[str] = "token_view"
    settings_model: ClassVar[type[ExperimentSettings]] = TokenViewSettings
    question: ClassVar[str] = (
        "Token by token, what did the model weigh, when did each token leave the server and "
        "reach the client, and did the prompt come from cache?"
    )

    @property
    def _s(self) -> TokenViewSettings:
        assert isinstance(self.settings, TokenViewSettings)
        return self.settings

    def _prompt(self) -> str:
        """The prompt, led by a mark new to each provider's plan where `fresh_prefix`."""
        s = self._s
        return f"[{uuid.uuid4().hex[:8]}] {s.prompt}" if s.fresh_prefix else s.prompt

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and sends."""
        return self._s.warmup + self._s.sends

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups (another prompt), then the prompt `sends` times, asking for logprobs,
        the server's per-token times and each event's text."""
        s = self._s
        yield from self.warmups("token_view/warmup", "Say hello.")
        prompt = self._prompt()
        for trial in range(s.sends):
            params = {**s.params, **provider.event_time_params()}
            request = ChatRequest(self.messages(prompt), params, "token_view")
            request.event_detail = True
            yield PlannedRequest(
                key=f"{self.name}/{trial}",
                request=logprob_request(provider, request, s.top_logprobs),
                trial=trial,
                tags={"send": trial + 1},
            )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Every send's rows, and the columns the API did not report."""
        recs = sorted(
            (r for r in records if not r.warmup and r.error is None), key=lambda r: r.trial
        )
        figures = token_view_figures(self._s.top_logprobs, recs)
        text = token_view_answer(figures, provider_id)
        return self.answer(
            provider_id, model, text, figures, status="ok" if figures.replies else "failed"
        )
