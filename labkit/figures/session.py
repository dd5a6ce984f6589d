"""`session`: agent sessions measured as jobs, each with its critical path."""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import Field

from labkit.figures.base import _Figures, register_figures

__all__ = ["CriticalPath", "SessionEnd", "SessionFigures", "SessionRow", "SessionStep"]

#: How a session's main agent ended: `answer` (a final turn that stopped on its own, the
#: only complete ending), `length` (its last turn cut by `max_tokens`), `step_limit`
#: (`max_steps` ran out while it still called tools), `failed` (its last turn failed),
#: `refused` (its last turn stopped by a content filter or a refusal).
SessionEnd: TypeAlias = Literal["answer", "length", "step_limit", "failed", "refused"]


class CriticalPath(_Figures):
    """Where a session's time went along its critical path, in ms; the five terms add up to
    the session's completion time (`docs/measurement.md`, "Sessions")."""

    provider_queue_ms: float = Field(default=0.0, description="The provider's reported queue.")
    prefill_ms: float = Field(default=0.0, description="Send to first output, less the queue.")
    decode_ms: float = Field(default=0.0, description="First output to the stream's end.")
    tool_ms: float = Field(default=0.0, description="Simulated tools (or a trace's gaps).")
    labkit_ms: float = Field(default=0.0, description="The rest: labkit's own time.")

    @property
    def total_ms(self) -> float:
        """The five terms together: the session's completion time."""
        return (
            self.provider_queue_ms
            + self.prefill_ms
            + self.decode_ms
            + self.tool_ms
            + self.labkit_ms
        )

    def plus(self, other: CriticalPath) -> CriticalPath:
        """Term by term sum."""
        return CriticalPath(
            provider_queue_ms=self.provider_queue_ms + other.provider_queue_ms,
            prefill_ms=self.prefill_ms + other.prefill_ms,
            decode_ms=self.decode_ms + other.decode_ms,
            tool_ms=self.tool_ms + other.tool_ms,
            labkit_ms=self.labkit_ms + other.labkit_ms,
        )


class SessionStep(_Figures):
    """One model turn of one agent of one session, on the session's own time axis."""

    session: int
    agent: str = Field(description="`0` the main agent, `0.1` its first sub-agent.")
    step: int
    ok: bool = True
    start_ms: float = Field(description="Send, ms from the session's start.")
    end_ms: float = Field(description="Stream end, ms from the session's start.")
    tool_ms: float = Field(default=0.0, description="Tool (or sub-agent) time before it.")
    tool_calls: int = Field(default=0, description="Calls this turn made.")
    subagents: int = Field(default=0, description="Sub-agents the time before it waited for.")
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_share: float | None = Field(
        default=None, description="Prompt tokens served from the provider's cache / input."
    )
    tool_call_first_ms: float | None = Field(
        default=None, description="Send to the first tool-call token (a call turn's TTFT)."
    )
    tool_call_args_ms: float | None = Field(
        default=None, description="Send to the call's complete arguments (its last token)."
    )
    compacted: bool = Field(default=False, description="The history was compacted before it.")


class SessionRow(_Figures):
    """One session as a job."""

    session: int
    complete: bool = Field(
        description="Ended with an answer: its main agent's last turn succeeded, called no "
        "tool and stopped on its own (`ended` is `answer`)."
    )
    ended: SessionEnd | None = Field(
        default=None,
        description="How its main agent ended (`SessionEnd`); null in lab.json written before.",
    )
    resumed: bool = Field(default=False, description="Finished by a resumed run.")
    steps: int
    failed_steps: int = 0
    agents: int = 1
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_ms: float = Field(description="Completion time: start to the last answer read.")
    critical: CriticalPath
    meets_slo: bool | None = None


@register_figures
class SessionFigures(_Figures):
    """`session`: agent sessions measured as jobs."""

    kind: Literal["session"] = "session"
    source: str = Field(default="generated", description="`generated`, or the trace's name.")
    sessions: list[SessionRow] = Field(default_factory=list)
    steps: list[SessionStep] = Field(default_factory=list)
    critical: CriticalPath = Field(
        default_factory=CriticalPath,
        description="Summed over the sessions measured in one run (resumed ones left out).",
    )
    incomplete: dict[str, int] = Field(
        default_factory=dict,
        description="Sessions that did not complete, counted by how they ended (`SessionEnd`: "
        "`length`, `step_limit`, `failed`, `refused`); empty when all completed.",
    )
    completion_ms_p50: float | None = None
    completion_ms_p90: float | None = None
    steps_p50: float | None = None
    tool_call_first_ms_p50: float | None = None
    tool_call_args_ms_p50: float | None = None
    cached_share_p50: float | None = None
    slo_ms: float | None = Field(default=None, description="The session completion SLO.")
    queue_reported: bool = Field(
        default=False,
        description="Whether the provider reported its queue on any turn; where not, "
        "`provider_queue_ms` is 0 and any queueing is inside `prefill_ms`.",
    )
    goodput_sessions_per_s: float | None = Field(
        default=None,
        description="Sessions that completed within the SLO (all complete ones without one) "
        "per second of the run's span.",
    )
