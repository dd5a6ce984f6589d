"""`conversation` settings and the user messages it rebuilds on resume (no sockets)."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from labkit.experiments.conversation import ConversationExperiment, ConversationSettings

pytestmark = pytest.mark.unit


def test_yaml_on_and_off_are_cache_variants() -> None:
    raw = yaml.safe_load("kind: conversation\ncache: [on, off]\nthink_time_s: [0.1, 0.3]\n")
    settings = ConversationSettings.model_validate(raw)
    assert settings.cache == ["on", "off"] and settings.think_time_s == (0.1, 0.3)
    with pytest.raises(ValidationError, match="each once"):
        ConversationSettings(cache=["on", "on"])
    with pytest.raises(ValidationError, match="min <= max"):
        ConversationSettings(think_time_s=(2.0, 1.0))


def test_user_messages_rebuild_the_same_and_only_turn_0_carries_the_nonce() -> None:
    exp = ConversationExperiment(ConversationSettings(user_tokens=26))
    first = exp.user_message("abcd", 0, 1, 0)
    assert first == exp.user_message("abcd", 0, 1, 0) and first.startswith("[abcd] Turn 1: ")
    later = exp.user_message("abcd", 0, 1, 2)
    assert later.startswith("Turn 3: ") and "abcd" not in later
    assert len(later.split()) == 2 + 20  # 26 tokens at the default 1.3 tokens per word
    assert exp.user_message("abcd", 1, 1, 2) != later  # another variant, other words
