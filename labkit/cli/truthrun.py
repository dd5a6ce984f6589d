"""`labkit run --truth`: a config's experiments answered by the truth server, then graded.

One truth server (`labkit.truth.schedule.LAB_SCHEDULE`: a prefix cache, an end token counted
and never streamed, seeded sampling with logprobs, an unreported front end, llama.cpp's
timings and endpoints) answers every provider of the config on 127.0.0.1: a llama.cpp entry
as an existing llama-server (`managed: false`), an OpenAI- or Anthropic-protocol entry at
its root. Its log lands in the run folder (``truth.jsonl``); after the run every answer is
graded against it (`labkit.scoring.grading`), the table printed and written beside the
report (``grade.md``, ``grade.json``). So a learner can check every number the lab states.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from labkit.errors import ConfigError

__all__ = ["TRUTH_KEY_ENV", "TruthLab", "answered_by_truth"]

#: The variable a hosted entry's key is read from under `--truth` (the server needs none).
TRUTH_KEY_ENV = "LABKIT_TRUTH_KEY"


def answered_by_truth(raw: dict[str, Any], root: str) -> dict[str, Any]:
    """The config (as YAML gave it) with every provider pointed at the truth server at
    `root` (each kind says how: `ProviderSettings.answered_at`); one `ConfigError` naming a
    provider whose protocol the server does not speak."""
    from labkit.providers import provider_class, provider_kinds

    providers = raw.get("providers")
    if not isinstance(providers, list) or not providers:
        raise ConfigError("--truth: the config names no providers to answer")
    rewritten = []
    for entry in providers:
        if not isinstance(entry, dict):
            raise ConfigError("--truth: every provider must be a mapping")
        kind, pid = entry.get("kind"), entry.get("id", "?")
        if kind not in provider_kinds():
            raise ConfigError(f"--truth: provider {pid!r} has an unknown kind {kind!r}")
        answered = provider_class(str(kind)).settings_model.answered_at(entry, root, TRUTH_KEY_ENV)
        if answered is None:
            raise ConfigError(
                f"--truth: provider {pid!r} is {kind}, whose protocol the truth server does not "
                "speak (it answers OpenAI Chat and Responses, Anthropic Messages and llama.cpp)"
            )
        rewritten.append(answered)
    return {**raw, "providers": rewritten}


def _slots(raw: dict[str, Any]) -> int:
    """The truth server's slots: the most any entry asks for (default 1)."""
    asked = [
        int(e["slots"])
        for e in raw.get("providers", [])
        if isinstance(e, dict) and isinstance(e.get("slots"), int)
    ]
    return max(asked, default=1)


class TruthLab:
    """The truth server for one `--truth` run: `with TruthLab(raw) as lab: lab.config`."""

    def __init__(self, raw: dict[str, Any], seed: int = 0) -> None:
        from labkit.truth.process import TruthServer
        from labkit.truth.schedule import LAB_SCHEDULE

        self._dir = tempfile.TemporaryDirectory(prefix="labkit-truth-")
        self.log = Path(self._dir.name) / "truth.jsonl"
        schedule = {**LAB_SCHEDULE, "slots": _slots(raw)}
        self.server = TruthServer(truth_log=self.log, seed=seed, **schedule)
        self._raw = raw

    def __enter__(self) -> TruthLab:
        self.server.start()
        os.environ.setdefault(TRUTH_KEY_ENV, "truth-server")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self._dir.cleanup()

    @property
    def config(self) -> dict[str, Any]:
        """The config with every provider answered by this server."""
        return answered_by_truth(self._raw, f"http://127.0.0.1:{self.server.port}")

    def keep_log(self, run_dir: Path) -> Path:
        """Stop the server (its log whole) and copy the log into the run folder."""
        self.server.stop()
        kept = run_dir / "truth.jsonl"
        shutil.copyfile(self.log, kept)
        return kept


def write_grade(grade: Any, folder: Path) -> list[Path]:
    """`grade.json` (every check) and `grade.md` (the table) in `folder`."""
    from labkit.safefiles import write_new_file
    from labkit.scoring.grading import grade_summary, grade_table

    cols, rows = grade_table(grade)
    lines = ["# Graded against the truth server", ""]
    lines += [*grade_summary(grade), ""]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    paths = [folder / "grade.json", folder / "grade.md"]
    write_new_file(paths[0], grade.model_dump_json(indent=2) + "\n")
    write_new_file(paths[1], "\n".join(lines) + "\n")
    return paths


def print_grade(grade: Any, console: Any) -> None:
    """The grading table and its summary lines on `console` (a rich console)."""
    from rich.table import Table
    from rich.text import Text

    from labkit.scoring.grading import grade_summary, grade_table

    cols, rows = grade_table(grade)
    table = Table(title="Graded against the truth server")
    for col in cols:
        table.add_column(col)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    for line in grade_summary(grade):
        console.print(Text(line), soft_wrap=True)
