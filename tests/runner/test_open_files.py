"""A level of many streams raises the soft open-files limit its sockets need (one each, plus
the run's own files), within the hard limit, and says so when the hard limit is too low."""

from __future__ import annotations

import resource

import pytest

from labkit.experiments.paced import LevelPlan
from labkit.runner.workers import open_files_for

pytestmark = pytest.mark.unit


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """RLIMIT_NOFILE as a dict the code under test reads and sets (soft, hard)."""
    state = {"soft": 1024, "hard": 4096}

    def getrlimit(which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return state["soft"], state["hard"]

    def setrlimit(which: int, value: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE and value[1] == state["hard"]
        state["soft"] = value[0]

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return state


def test_a_thousand_streams_get_the_files_they_need(limits: dict[str, int]) -> None:
    assert open_files_for(LevelPlan(title="concurrency 1000", most_workers=1000)) is None
    assert limits["soft"] >= 1000 + 256


def test_a_hard_limit_too_low_is_said_in_one_sentence(limits: dict[str, int]) -> None:
    limits["hard"] = 1100
    said = open_files_for(LevelPlan(title="concurrency 1000", most_workers=1000))
    assert said is not None and "1,100" in said and "ulimit" in said
    assert limits["soft"] == 1100


def test_a_small_or_open_level_leaves_the_limit_alone(limits: dict[str, int]) -> None:
    assert open_files_for(LevelPlan(title="concurrency 8", most_workers=8)) is None
    assert open_files_for(LevelPlan(title="2 req/s")) is None
    assert limits["soft"] == 1024
