"""Per-token logprobs off the wire: the chosen token, its log-probability, the top-k others.

It reads the shapes of OpenAI Chat Completions (with vLLM's and llama.cpp's), the Responses
API and llama.cpp's own names (`LogprobCollector.add_entries`). Only a parser asked for
logprobs (`StreamParser.want_logprobs`) calls into this module; one that was not asked never
looks for them.
"""

from __future__ import annotations

import math
from typing import Any

from labkit.errors import MalformedStream
from labkit.providers._wire import describe, wire_list, wire_object
from labkit.records import (
    MAX_LOGPROB_STEPS,
    MAX_TOP_LOGPROBS,
    LogprobStep,
    OutputLogprobs,
    TokenCandidate,
)
from labkit.tokenizers import display_piece

__all__ = ["LOGPROB_FLOOR", "LogprobCollector"]

#: The log-probability kept for a probability of 0 (vLLM's own convention; JSON has no -inf).
LOGPROB_FLOOR = -9999.0


class LogprobCollector:
    """The steps of one response, bounded by `MAX_LOGPROB_STEPS` and `MAX_TOP_LOGPROBS`."""

    def __init__(self, top_k: int) -> None:
        self.top_k = min(top_k, MAX_TOP_LOGPROBS)
        self.steps: list[LogprobStep] = []
        self.truncated = False

    def add_chat(self, value: Any) -> None:
        """A Chat Completions choice's `logprobs` object (`content`: the entries)."""
        obj = wire_object(value, "choice.logprobs")
        if obj:
            self.add_entries(obj.get("content"), "choice.logprobs.content")

    def add_entries(self, value: Any, where: str) -> None:
        """A list of per-token entries, in any of the shapes this module reads (each entry
        one output token):

        - OpenAI Chat Completions, vLLM and llama.cpp's OpenAI-compatible chat: a choice's
          ``logprobs.content`` list of ``{token, logprob, bytes, top_logprobs: [{token,
          logprob, bytes}]}`` (openai-python ``types/chat/chat_completion_token_logprob.py``);
          vLLM writes ``-9999.0`` for a probability of 0.
        - The Responses API: ``response.output_text.delta``'s ``logprobs`` list of ``{token,
          logprob, top_logprobs}`` (openai-python
          ``types/responses/response_text_delta_event.py``).
        - llama.cpp's own names (``/completion`` with ``n_probs``, tools/server/README.md):
          the same entries, or with ``post_sampling_probs`` ``prob`` and ``top_probs``
          instead of logs.
        """
        entries = wire_list(value, where)
        if not entries:
            return
        for entry in entries:
            if len(self.steps) >= MAX_LOGPROB_STEPS:
                self.truncated = True
                return
            if type(entry) is not dict:
                raise MalformedStream(f"a {where} entry is {describe(entry)}, not an object")
            token, logprob = _token_and_logprob(entry, where)
            top = entry.get("top_logprobs")
            if top is None:
                top = entry.get("top_probs")
            candidates: list[TokenCandidate] = []
            for alt in wire_list(top, f"{where}.top_logprobs") or ():
                if len(candidates) >= self.top_k:
                    break
                if type(alt) is not dict:
                    raise MalformedStream(f"a {where} alternative is {describe(alt)}")
                alt_token, alt_logprob = _token_and_logprob(alt, f"{where}.top_logprobs")
                candidates.append(TokenCandidate(token=alt_token, logprob=alt_logprob))
            self.steps.append(LogprobStep(token=token, logprob=logprob, top=candidates))

    def result(self) -> OutputLogprobs:
        """The record's `logprobs` group."""
        return OutputLogprobs(top_k=self.top_k, steps=self.steps, truncated=self.truncated)


def _token_and_logprob(entry: dict[str, Any], where: str) -> tuple[str, float]:
    """One entry's token text and log-probability (from `logprob`, or `prob`)."""
    token = entry.get("token")
    if token is None:
        token = entry.get("tok_str")  # llama.cpp's older /completion name
    if type(token) is not str:
        raise MalformedStream(f"{where} token is {describe(token)}, not a string")
    if not token:  # a piece of a character (llama.cpp sends its bytes and an empty token)
        raw = entry.get("bytes")
        if type(raw) is list and all(type(b) is int and 0 <= b < 256 for b in raw):
            token = display_piece(bytes(raw))
    value = entry.get("logprob")
    if value is None:
        prob = entry.get("prob")
        if type(prob) is not float and type(prob) is not int:
            raise MalformedStream(f"{where} has neither logprob nor prob ({describe(entry)})")
        value = math.log(prob) if prob > 0 else LOGPROB_FLOOR
    elif type(value) is not float and type(value) is not int:
        raise MalformedStream(f"{where} logprob is {describe(value)}, not a number")
    if value > 1e-6 or math.isnan(value):  # a rounding error above 0 is kept, as 0
        raise MalformedStream(f"{where} logprob is {value!r}, not a log-probability")
    return token, min(max(float(value), LOGPROB_FLOOR), 0.0)
