"""`vantage` graded against the truth server (`labkit run --truth`): from two routes 0 ms
and 40 ms apart, the provider's share agrees within its interval and the network's moves by
40 ms within its interval; every stated figure's interval holds the truth, every stated
fact is right; and an attribution answer in the same run cites the proof."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.figures.attribution import AttributionFigures
from labkit.figures.vantage import VantageFigures
from labkit.records import LabResults
from labkit.scoring.grading import Grade

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "labkit" / "examples"


def _run(tmp_path: Path, config: dict[str, object]) -> tuple[Grade, LabResults]:
    path = tmp_path / "vantage.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "runs"
    result = CliRunner().invoke(
        app, ["run", str(path), "--truth", "--no-report", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    grade = Grade.model_validate_json((run_dir / "grade.json").read_text())
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    return grade, lab


def test_two_vantages_40_ms_apart_are_graded_right_and_attribution_cites_them(
    tmp_path: Path,
) -> None:
    config = yaml.safe_load((EXAMPLES / "vantage.yaml").read_text())
    config["experiments"] = [
        {"kind": "attribution", "repeats": 6, "paths": ["wire"], "params": {"max_tokens": 8}},
        *config["experiments"],
    ]
    grade, lab = _run(tmp_path, config)
    wrong = [f"{c.name}: stated {c.stated}, true {c.true} ({c.why})" for c in grade.wrong]
    assert wrong == [], "\n".join(wrong)
    assert grade.unmatched == 0 and grade.matched > 0 and grade.not_graded == []
    checks = {c.name: c.ok for c in grade.checks if c.answer == "vantage · local"}
    must = [
        "near: provider share (mean)",
        "near: network share (mean)",
        "far: provider share (mean)",
        "far: network share (mean)",
        "far − near: provider share (paired)",
        "far − near: network share (paired)",
        "far − near: provider share unchanged",
        "far − near: network share shift against what the routes added",
    ]
    assert {name: checks.get(name) for name in must} == dict.fromkeys(must, True)
    by_kind = {a.experiment: a for a in lab.answers}
    f = by_kind["vantage"].figures
    assert isinstance(f, VantageFigures)
    (shift,) = f.shifts
    assert shift.pairs == 12 and shift.configured_ms == 40
    # the relay's own account of what each route added is there for every request
    assert all(v.route_ms is not None and v.route_ms.n == 12 for v in f.vantages)
    assert shift.route_ms is not None and shift.route_ms.n == 12
    # what the answer states is what the figures hold, and attribution cites it
    attribution = by_kind["attribution"]
    assert isinstance(attribution.figures, AttributionFigures)
    assert attribution.figures.split_proven == f.proven
    proof = "The split is proven by a vantage run" if f.proven else "did not confirm the split"
    assert proof in attribution.answer and proof in by_kind["vantage"].answer
