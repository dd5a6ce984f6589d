"""Same-model verdicts for the observatory's page, from a watch folder's rounds.

The store keeps the records' columns, not their per-token candidates; the verdicts
(`labkit.analysis.same_model.verdicts`) need those, so they are read from the rounds' own
run folders (``rounds/*/records.jsonl``), the config's same_model experiments naming the
reference and the tolerance.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from labkit.analysis.same_model import verdicts
from labkit.config import LabConfig
from labkit.experiments.same_model import SameModelSettings
from labkit.figures.observatory import SameModelVerdict
from labkit.records import RequestRecord

__all__ = ["same_model_verdicts"]


def _same_model_records(folder: Path, name: str) -> list[RequestRecord]:
    """The records of experiment `name` in every round of a watch folder (``rounds/*``)."""
    mark = f'"experiment":"{name}"'
    out: list[RequestRecord] = []
    rounds = folder / "rounds"
    for run in sorted(rounds.iterdir()) if rounds.is_dir() else []:
        try:
            with (run / "records.jsonl").open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if mark in line:
                        with contextlib.suppress(ValueError):
                            out.append(RequestRecord.from_json_line(line))
        except OSError:
            continue  # a round cut before its records: nothing of it to read
    return out


def same_model_verdicts(
    config: LabConfig | None, folder: Path | None
) -> tuple[list[SameModelVerdict], list[str]]:
    """Each same_model experiment's verdicts (its reference, its tolerance) from the watch
    folder's rounds; with a note where the config asks for them and no folder holds them."""
    asked = [
        (f"same_model#{i}" if i else "same_model", e)
        for i, e in enumerate(
            e for e in (config.experiments if config else []) if e.kind == "same_model"
        )
    ]
    if not asked:
        return [], []
    if folder is None:
        return [], [
            "same-model verdicts are read from a watch folder's rounds: give --watch-folder"
        ]
    out: list[SameModelVerdict] = []
    for name, settings in asked:
        assert isinstance(settings, SameModelSettings)
        records = _same_model_records(folder, name)
        if records:
            out += verdicts(records, settings.reference, settings.tolerance)
    return out, []
