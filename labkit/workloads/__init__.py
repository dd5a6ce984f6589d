"""Workloads: what the experiments send, built in one place.

Prompts sized in tokens (`PromptSizing`, measured once per provider and run), shared
prefixes (`SharedPrefix`), request traces (`read_trace`, `trace_prompt`) and conversation
histories (`build_history`). Experiments import these, never each other.
"""

from labkit.workloads.histories import Messages, answered, build_history, with_user
from labkit.workloads.prefixes import SharedPrefix
from labkit.workloads.sizing import (
    TOKENS_PER_WORD_GUESS,
    PromptSizing,
    count_tokens,
    filler_text,
    measure_sizing,
)
from labkit.workloads.traces import TraceEntry, read_trace, trace_prompt

__all__ = [
    "TOKENS_PER_WORD_GUESS",
    "Messages",
    "PromptSizing",
    "SharedPrefix",
    "TraceEntry",
    "answered",
    "build_history",
    "count_tokens",
    "filler_text",
    "measure_sizing",
    "read_trace",
    "trace_prompt",
    "with_user",
]
