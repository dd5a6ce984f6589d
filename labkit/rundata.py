"""Runs as data: `read_run` and `read_runs` give a run's records as a pandas DataFrame.

One row per record (warm-ups and failures included: filter on ``warmup`` and ``ok``), the
contract's scalar fields flattened under dotted names, exactly as `docs/measurement.md`
spells them (``client.ttft_ms``, ``tags.<label>``): the names DuckDB's struct access gives on
``records.jsonl``, so a query reads alike in both. Left out: the per-event arrays, ``params``,
``provider_timings.raw`` and ``output_text``; read those from ``records.jsonl`` itself. Every
column, and how missing values read: docs/runs.md, "Runs as data".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_run", "read_runs"]


def read_run(path: Path | str, columns: Collection[str] | None = None) -> pd.DataFrame:
    """The records of one run folder (or its ``records.jsonl``) as a DataFrame.

    Raises `labkit.RunError` when `path` is not a run folder. Lines that are not records
    (a last line cut short by a killed run) are skipped with a logged warning. `columns`:
    only these (with ``record_id``, ``run_id``, ``run_dir``, ``ok``, ``warmup``,
    ``file_offset`` and the tags), for a large run.
    """
    from labkit.report.load import RECORDS_FILE, load_run

    folder = Path(path)
    if folder.name == RECORDS_FILE and folder.is_file():
        folder = folder.parent
    return load_run(folder, columns).records


def read_runs(paths: Iterable[Path | str], columns: Collection[str] | None = None) -> pd.DataFrame:
    """The records of several runs in one DataFrame; ``run_id`` and ``run_dir`` tell them apart.

    Columns that only some runs have (a tag) are NaN in the others' rows; `columns` as in
    `read_run`.
    """
    import pandas as pd

    frames = [read_run(p, columns) for p in paths]
    if not frames:
        from labkit.report.load import load_runs

        return load_runs([])
    return pd.concat(frames, ignore_index=True)
