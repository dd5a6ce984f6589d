"""`token_view`'s answer: how one reply's tokens came, and what this API does not show."""

from __future__ import annotations

from labkit.figures.token_view import NOT_REPORTED, TokenRow, TokenViewFigures, TokenViewReply

__all__ = ["token_view_answer"]


def _quoted(text: str) -> str:
    return "'" + text.replace("\n", "\\n") + "'"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def _cache(reply: TokenViewReply) -> str:
    if reply.from_cache is None:
        return f"send {reply.send}: cached prompt tokens {NOT_REPORTED}"
    got = f"send {reply.send} read {reply.cached_tokens} of {reply.input_tokens} prompt tokens"
    return got + (" from cache (the prompt came from cache)" if reply.from_cache else " from cache")


def _first(reply: TokenViewReply) -> str:
    row = reply.rows[0]
    said = f"token 1 {_quoted(row.text)} reached the client at {_ms(row.arrival_ms)}"
    if row.server_ms is not None:
        said += f", {_ms(row.server_ms)} after the server started on the prompt by its own clock"
    return said


def _least_sure(rows: list[TokenRow]) -> str | None:
    known = [r for r in rows if r.p is not None]
    if not known:
        return None
    row = min(known, key=lambda r: r.p if r.p is not None else 1.0)
    others = ", ".join(f"{_quoted(c.token)} {c.p:.2f}" for c in row.candidates[:3])
    return (
        f"the model was least sure at token {row.i} {_quoted(row.text)} (p {row.p:.2f}"
        + (f"; candidates {others}" if others else "")
        + ")"
    )


def token_view_answer(f: TokenViewFigures, provider: str) -> str:
    """One lead sentence on the first send, one on the repeat's cache, one on what is
    not reported."""
    replies = [r for r in f.replies if r.rows]
    if not replies:
        return f"{provider}: no reply streamed any token."
    first = replies[0]
    unit = "tokens" if first.rows_are == "tokens" else "streamed events (no token boundaries)"
    lead = f"{provider}: send 1 streamed {len(first.rows)} {unit}; {_first(first)}"
    sure = _least_sure(first.rows)
    sentences = [lead + (f"; {sure}." if sure else ".")]
    sentences.append("Cache: " + "; ".join(_cache(r) for r in f.replies) + ".")
    if f.not_reported:
        sentences.append(f"{', '.join(f.not_reported).capitalize()}: {NOT_REPORTED}.")
    return " ".join(sentences)
