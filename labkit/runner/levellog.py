"""How each level read by several processes went: one JSON line per level run, in the run folder.

A level split over processes (Ray actors: ``ray-levels.jsonl``; this host's worker
processes: ``worker-levels.jsonl``) can lose one of them mid-level: its share is then never
sent and the level's figures come from fewer requests, whether or not a request was in
flight. The executor appends a line per level it ran; the runner reads the levels whose
latest line says partial (a resumed run's rerun appends a new line, which then decides) and
hands them to each experiment's answer (`Experiment.partial_levels`). A resumed run that
finds nothing of such a level left to measure appends a `LevelRun.settled` line instead.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import ClassVar, NamedTuple

from pydantic import BaseModel

from labkit.errors import ConfigError
from labkit.experiments.paced import LevelPlan
from labkit.jsonlines import iter_lines

__all__ = [
    "LEVEL_LINE_MAX",
    "LevelLog",
    "LevelRun",
    "append_level_line",
    "level_label",
    "partial_levels_in",
]

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
    #: A line no process ran: a resumed run whose experiment found nothing of the level
    #: left to measure (the process died after its share's last record) settles its mark.
    settled: bool = False

    @property
    def partial(self) -> bool:
        """Whether a process died mid-level: some of the level's share never ran."""
        raise NotImplementedError


def level_label(plan: LevelPlan) -> str:
    """A level's key in the logs: the label its records carry (`LevelPlan.record_label`),
    else its number (an experiment whose records carry none)."""
    label = plan.record_label()
    return str(plan.index) if label is None else label


def append_level_line(path: Path, line: LevelRun) -> None:
    """Append one level's line to the log at `path`, on a line of its own even where the
    last write was cut short (a process killed mid-write leaves no newline)."""
    with path.open("a+b") as f:
        start = b""
        if f.seek(0, os.SEEK_END) > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                start = b"\n"
        f.write(start + line.model_dump_json().encode() + b"\n")


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


class LevelLog(NamedTuple):
    """One kind of level log: its file in the run folder and the line it holds."""

    file: str
    line: type[LevelRun]

    def partial_levels(self, run_dir: Path, experiment: str) -> dict[tuple[str, str], str]:
        """`experiment`'s levels this log's latest lines say are partial (`partial_levels_in`)."""
        return partial_levels_in(run_dir / self.file, self.line, experiment)

    def settle(self, run_dir: Path, experiment: str, provider: str, level: str) -> None:
        """Append a `LevelRun.settled` line for a level nothing of which is left to measure."""
        line = self.line(experiment=experiment, provider=provider, level=level, settled=True)
        append_level_line(run_dir / self.file, line)
