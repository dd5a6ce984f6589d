"""How each level read by several processes went: one JSON line per level run, in the run folder.

A level split over processes (Ray actors: ``ray-levels.jsonl``; this host's worker
processes: ``worker-levels.jsonl``) can lose one of them mid-level: its share is then never
sent and the level's figures come from fewer requests, whether or not a request was in
flight. The executor appends a line per level it ran; the runner reads the levels whose
latest line says partial (a resumed run's rerun appends a new line, which then decides) and
hands them to each experiment's answer (`Experiment.partial_levels`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel

from labkit.errors import ConfigError
from labkit.jsonlines import iter_lines
from labkit.records import RequestRecord

__all__ = ["LEVEL_LINE_MAX", "LevelRun", "append_level_line", "level_label", "partial_levels_in"]

#: The longest line read back (bytes): a level run on a thousand nodes names each twice.
LEVEL_LINE_MAX = 1024 * 1024


class LevelRun(BaseModel):
    """What every level log's line says: which level, of whom, and whether it is partial."""

    #: Who runs a level's shares, as the answer names one that died ("a Ray node").
    died_what: ClassVar[str] = "a process"

    experiment: str
    provider: str
    #: The level's label, as its records carry it (`tags["level"]`).
    level: str

    @property
    def partial(self) -> bool:
        """Whether a process died mid-level: some of the level's share never ran."""
        raise NotImplementedError


def level_label(records: Iterable[RequestRecord], index: int) -> str:
    """A level's label as its measured records carry it (`tags["level"]`); its number where
    none does (no record of it, or an experiment that tags none)."""
    for record in records:
        if not record.warmup and "level" in record.tags:
            return str(record.tags["level"])
    return str(index)


def append_level_line(path: Path, line: LevelRun) -> None:
    """Append one level's line to the log at `path`."""
    with path.open("a", encoding="utf-8") as f:
        f.write(line.model_dump_json() + "\n")


def partial_levels_in(
    path: Path, model: type[LevelRun], experiment: str
) -> dict[tuple[str, str], str]:
    """(provider id, level label) of `experiment`'s levels whose latest line in the log at
    `path` says partial, each to what died (`LevelRun.died_what`). A line that is no `model`
    (a write cut short) is passed over; the lines after one too long (`LEVEL_LINE_MAX`) or
    not UTF-8 are not read; no file to read: none."""
    try:
        lines = iter_lines(path, "levels log", max_line_bytes=LEVEL_LINE_MAX)
    except ConfigError:  # no file, or none that opens
        return {}
    latest: dict[tuple[str, str], bool] = {}
    with contextlib.closing(lines), contextlib.suppress(ConfigError):
        for line in lines:
            try:
                level = model.model_validate_json(line.data)
            except ValueError:
                continue
            if level.experiment == experiment:
                latest[(level.provider, level.level)] = level.partial
    return {key: model.died_what for key, partial in latest.items() if partial}
