"""Conversation histories: the messages a multi-turn session resends at each turn."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Messages", "answered", "build_history", "with_user"]

Messages = list[dict[str, str]]


def build_history(system: str | None, exchanges: Iterable[tuple[str, str]] = ()) -> Messages:
    """A session's history: the system message (when set), then each earlier turn's user
    message and the model's answer to it."""
    messages: Messages = [{"role": "system", "content": system}] if system else []
    for user, answer in exchanges:
        messages = answered(with_user(messages, user), answer)
    return messages


def with_user(messages: Messages, user: str) -> Messages:
    """The next turn's request: the history, then the new user message (a new list)."""
    return [*messages, {"role": "user", "content": user}]


def answered(messages: Messages, answer: str) -> Messages:
    """The history after a turn: its request, then the model's answer (a new list)."""
    return [*messages, {"role": "assistant", "content": answer}]
