"""`single`'s answer: the median TTFT with its interval, then decode and stop reasons."""

from __future__ import annotations

from labkit.figures.single import SingleFigures
from labkit.wording.common import marked, ms, say

__all__ = ["single_answer"]


_STOP_WORDS = {"length": "max_tokens reached", "end": "the model's own end"}


def single_answer(f: SingleFigures) -> str:
    """Median TTFT with its interval, then the token rate, the reply and the server's clock."""
    text = marked(
        f"{say(f.ttft)} to the first token: the median wait from sending a request until its "
        "reply starts (time to first token, TTFT).",
        f.client_bound,
    )
    stops = ", ".join(_STOP_WORDS.get(k, k) for k in sorted(f.stop_reasons))
    tokens = f"{f.output_tokens_p50:g}-token " if f.output_tokens_p50 is not None else ""
    reply = f"the {tokens}reply" + (f" ({stops})" if stops else "")
    if f.decode_per_token is not None and f.decode_per_token.n:
        text += f" Then a token came every {say(f.decode_per_token)}"
        text += (
            f", so {reply} was complete after {ms(f.last_token_ms_p50)}."
            if f.last_token_ms_p50 is not None
            else "."
        )
    elif f.last_token_ms_p50 is not None:
        text += f" {reply[0].upper()}{reply[1:]} was complete after {ms(f.last_token_ms_p50)}."
    if f.provider_prefill_ms_p50 is not None:
        per_token = f.provider_decode_ms_per_token_p50
        text += f" The server's own clock: {ms(f.provider_prefill_ms_p50)} reading the prompt" + (
            f", {ms(per_token, 2)} per token." if per_token is not None else "."
        )
    if f.failed:
        text += f" {f.failed} of {f.n + f.failed} requests failed."
    return text
