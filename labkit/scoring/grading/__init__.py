"""Grading a lab run against the truth server: every figure an answer states beside its true
value and whether its stated 95% interval covers it, and every fact it states, right or
wrong (``labkit score TRUTH RUN`` on a run whose lab.json has answers).

The graders are one module per experiment kind here, each registering itself
(`register_grader`); a kind without one is named as not graded. `grade_run` reads the run's
records and lab.json, matches each record to the truth request that answered it, and asks
each answer's grader; `grade_table` and `Grade.model_dump_json` render it.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from labkit.errors import ConfigError
from labkit.records import LabResults, RequestRecord
from labkit.scoring.grading.base import Check, Grade, Truth, grader_for
from labkit.truth.log import TruthLog

__all__ = ["Check", "Grade", "grade_run", "grade_summary", "grade_table"]


@cache
def _import_graders() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")


def _records(run_dir: Path) -> list[RequestRecord]:
    path = run_dir / "records.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    for line in lines:
        if line.strip():
            try:
                out.append(RequestRecord.model_validate_json(line))
            except ValidationError:
                continue  # a cut last line: the report says so; grading reads the rest
    return out


def _lab(run_dir: Path) -> LabResults:
    path = run_dir / "lab.json"
    try:
        return LabResults.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a lab.json ({exc.error_count()} error(s))") from None


def grade_run(run_dir: Path, log: TruthLog) -> Grade:
    """Grade every answer of the lab run in `run_dir` against the truth log."""
    _import_graders()
    records = _records(run_dir)
    lab = _lab(run_dir)
    truth = Truth(log, records)
    measured = [r for r in records if not r.warmup and r.error is None]
    matched = sum(1 for r in measured if truth.of(r) is not None)
    grade = Grade(
        run=str(run_dir), truth=str(log.path), matched=matched, unmatched=len(measured) - matched
    )
    for answer in lab.answers:
        kind = answer.experiment.split("#", 1)[0]
        grader = grader_for(kind)
        where = f"{answer.experiment} · {answer.provider}"
        mine = [
            r
            for r in records
            if r.experiment == answer.experiment and r.provider == answer.provider
        ]
        if grader is None:
            grade.not_graded.append(f"{where}: no grader for {kind}")
            continue
        checks = grader(answer, mine, truth)
        if not checks:
            grade.not_graded.append(f"{where}: nothing the truth log can check")
        grade.checks.extend(checks)
    return grade


def grade_table(grade: Grade) -> tuple[list[str], list[list[str]]]:
    """Column labels and cells: one row per check."""
    cols = ["answer", "what", "stated", "true", "graded"]
    rows = []
    for c in grade.checks:
        verdict = {True: "covered" if c.kind == "figure" else "right", False: "WRONG", None: "—"}[
            c.ok
        ]
        if c.ok is True and c.bound == "lower":
            verdict = "reached"
        if c.ok is False and c.kind == "figure":
            verdict = "MISSED"
        rows.append(
            [c.answer, c.name, c.stated, c.true, verdict + (f" ({c.why})" if c.why else "")]
        )
    return cols, rows


def grade_summary(grade: Grade) -> list[str]:
    """How many checks held, what was not graded, and the records the log did not know."""
    graded = [c for c in grade.checks if c.kind == "figure" and c.ok is not None]
    figures = [c for c in graded if c.bound is None]
    bounded = [c for c in graded if c.bound == "lower"]
    facts = [c for c in grade.checks if c.kind == "fact" and c.ok is not None]
    covered = (
        f"{sum(c.ok is True for c in figures)} of {len(figures)} stated intervals covered the truth"
        if figures
        else "no answer stated an interval"
    )
    if bounded:
        covered += (
            f", {sum(c.ok is True for c in bounded)} of {len(bounded)} reached the lower bound "
            "the truth sets where it sees only part of a figure"
        )
    right = (
        f"{sum(c.ok is True for c in facts)} of {len(facts)} stated facts were right"
        if facts
        else "no answer stated a fact"
    )
    lines = [f"{covered}; {right}."]
    lines += [f"not graded: {why}" for why in grade.not_graded]
    if grade.unmatched:
        lines.append(f"{grade.unmatched} measured record(s) had no request in the truth log.")
    return lines
