"""`token_ratio`'s answer: characters per token against the 4-characters rule."""

from __future__ import annotations

from collections.abc import Sequence

from labkit.figures.token_ratio import TokenizerSpread, TokenRatioFigures

__all__ = ["token_ratio_answer"]


def token_ratio_answer(f: TokenRatioFigures) -> str:
    """Characters per token across the texts, how far the 4-characters rule is off, and
    what the chat framing (`chat_framing_tokens`, or why it is unknown) and the other
    tokenizers add."""
    rows = [
        r
        for r in f.rows
        if r.tokens and r.chars_per_token is not None and r.rule_of_4_error_pct is not None
    ]
    most = max(rows, key=lambda r: r.chars_per_token or 0.0)
    least = min(rows, key=lambda r: r.chars_per_token or 0.0)
    worst = max(rows, key=lambda r: abs(r.rule_of_4_error_pct or 0.0))
    best = min(rows, key=lambda r: abs(r.rule_of_4_error_pct or 0.0))
    text = (
        f"{most.chars_per_token:.2f} characters per token for {most.text_id} but only "
        f"{least.chars_per_token:.2f} for {least.text_id}: a token's size depends on the kind "
        "of text, so '1 token ≈ 4 characters' is a rough rule."
    )
    text += (
        f" The rule was closest for {best.text_id} ({best.rule_of_4_error_pct:+.0f}%) and "
        f"worst for {worst.text_id} ({worst.rule_of_4_error_pct:+.0f}%)."
    )
    off = [d for d in f.input_tokens_local_diffs if d != 0]
    if off:
        text += (
            f" labkit's own count and the provider's usage disagree on {len(off)} of "
            f"{len(f.input_tokens_local_diffs)} requests (by {min(off):+d} to {max(off):+d} "
            "tokens beyond the chat framing)."
        )
    else:
        text += _framing_sentence(f)
    widest = _widest(f.spread)
    if widest is not None:
        text += (
            f" Across {len({c.tokenizer for c in f.side_by_side})} tokenizers, {widest.text_id} "
            f"took {widest.most_efficient_tokens} to {widest.least_efficient_tokens} tokens "
            f"({widest.ratio:.2f}×)."
        )
    return text


def _framing_sentence(f: TokenRatioFigures) -> str:
    """How many tokens the chat template adds around a text sent as one message, and how
    that was measured; or why it could not be."""
    if f.chat_framing_tokens is None:
        why = f.chat_framing_missing or "not measured"
        return f" The chat framing around a message could not be measured: {why}."
    how = (
        "from the usage of a sent one-character message"
        if f.chat_framing_source == "usage"
        else f"counted by {f.chat_framing_source}, nothing generated"
    )
    return (
        f" As a chat message, a text costs {f.chat_framing_tokens:.0f} more tokens: the chat "
        f"template's framing ({how})."
    )


def _widest(spread: Sequence[TokenizerSpread]) -> TokenizerSpread | None:
    differing = [s for s in spread if s.least_efficient_tokens != s.most_efficient_tokens]
    return max(differing, key=lambda s: s.ratio) if differing else None
