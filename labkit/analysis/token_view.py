"""One reply, token by token: records carrying `event_detail` and `logprobs` as rows.

A row is a token: where the reply's logprob steps are as many as its output events (one
token per event, as llama-server and OpenAI stream), step i joins event i's text, arrival
and server time; where the events carried known token counts adding up to the steps, each
token takes its event's arrival and server time; with no logprobs (Anthropic) a row is an
event, its probability not reported by this API. Computed once here.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.analysis.next_token import step_of
from labkit.figures.token_view import TokenRow, TokenViewFigures, TokenViewReply
from labkit.records import RequestRecord

__all__ = ["MAX_ROWS", "reply_rows", "token_view_figures"]

#: Rows kept per reply (the view is one screen; the record keeps them all).
MAX_ROWS = 256


def _at(values: Sequence[float | None] | None, i: int) -> float | None:
    return values[i] if values is not None and i < len(values) else None


def reply_rows(record: RequestRecord) -> tuple[list[TokenRow], bool]:
    """The rows of one reply, and whether they are tokens (else events)."""
    detail = record.event_detail
    texts = detail.texts if detail is not None else []
    server = detail.server_ms if detail is not None else None
    offsets = record.client.event_offsets_ms
    late = record.client.stamp_lateness_ms
    steps = [step_of(s) for s in record.logprobs.steps] if record.logprobs else []
    rows: list[TokenRow] = []
    if steps and len(steps) == len(texts):
        for i, (step, text) in enumerate(zip(steps, texts, strict=True)):
            rows.append(
                TokenRow(
                    i=i + 1,
                    text=text,
                    p=step.p,
                    candidates=step.candidates,
                    arrival_ms=_at(offsets, i),
                    arrival_late_ms=_at(late, i),
                    server_ms=_at(server, i),
                )
            )
        return rows, True
    counts = record.client.event_tokens
    if steps and counts is not None and sum(counts) == len(steps):
        k = 0
        for e, n in enumerate(counts):
            for _ in range(n):
                step = steps[k]
                k += 1
                rows.append(
                    TokenRow(
                        i=k,
                        text=step.token,
                        p=step.p,
                        candidates=step.candidates,
                        arrival_ms=_at(offsets, e),
                        arrival_late_ms=_at(late, e),
                        server_ms=_at(server, e),
                    )
                )
        return rows, True
    if texts:
        for i, text in enumerate(texts):
            rows.append(
                TokenRow(
                    i=i + 1,
                    text=text,
                    arrival_ms=_at(offsets, i),
                    arrival_late_ms=_at(late, i),
                    server_ms=_at(server, i),
                )
            )
        return rows, False
    for i, step in enumerate(steps):  # no event detail (an older record): logprobs alone
        rows.append(TokenRow(i=i + 1, text=step.token, p=step.p, candidates=step.candidates))
    return rows, True


def _reply(send: int, record: RequestRecord) -> TokenViewReply:
    rows, tokens = reply_rows(record)
    usage = record.usage
    cached = usage.cached_input_tokens
    if cached is None:
        cached = record.provider_timings.cached_tokens
    inputs = usage.input_tokens
    from_cache = None
    if cached is not None and inputs:
        from_cache = cached * 2 >= inputs
    return TokenViewReply(
        send=send,
        output_text=record.output_text or "",
        rows=rows[:MAX_ROWS],
        rows_are="tokens" if tokens else "events",
        truncated=len(rows) > MAX_ROWS,
        input_tokens=inputs,
        cached_tokens=cached,
        from_cache=from_cache,
    )


def token_view_figures(top_k: int, records: Sequence[RequestRecord]) -> TokenViewFigures:
    """The figures of one provider's sends (measured, successful, in send order)."""
    replies = [_reply(n, r) for n, r in enumerate(records, start=1)]
    rows = [row for reply in replies for row in reply.rows]
    missing = []
    if not any(row.p is not None for row in rows):
        missing.append("probability")
    if not any(row.server_ms is not None for row in rows):
        missing.append("server time")
    if all(reply.from_cache is None for reply in replies):
        missing.append("cache")
    return TokenViewFigures(top_k=top_k, replies=replies, not_reported=missing)
