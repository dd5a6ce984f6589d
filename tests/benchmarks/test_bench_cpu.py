"""benchmarks/bench_cpu.py's verdicts: labkit ÷ the floor measured beside it (both figures
must be within the target) and the one-stream TTFT error target, on made-up figures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_cpu
from bench_cpu import Side

pytestmark = pytest.mark.unit

SIDES = [
    Side("before", Path("b"), Path("cb"), "before"),
    Side("after", Path("a"), Path("ca"), "after"),
]


def _dist(p50: float | None, p99: float | None) -> dict[str, Any]:
    return {"p50": p50, "p99": p99, "max": p99, "n": 0 if p99 is None else 10}


def _level(floor: float | None, before: tuple[Any, Any], after: tuple[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"floor_us_per_token": floor}
    for side, (marginal, in_level) in zip(SIDES, (before, after), strict=True):
        out[side.name] = {
            "cpu_us_per_token": marginal,
            "cpu_us_per_token_in_level": in_level,
            "figures": {
                "request_sent_ms": _dist(0.05, 0.2),
                "request_path_ms": _dist(0.04, 0.1),
                "ttft_err_ms": _dist(0.01, 0.5 if side.name == "after" else 0.7),
            },
        }
    return out


def test_the_ratio_is_to_the_floor_of_the_same_level() -> None:
    out = _level(20.0, (33.0, 34.0), (24.0, 25.0))
    assert bench_cpu.floor_ratios(out, SIDES[0]) == (pytest.approx(1.65), pytest.approx(1.7))
    assert bench_cpu.floor_ratios(out, SIDES[1]) == (pytest.approx(1.2), pytest.approx(1.25))
    assert bench_cpu.floor_verdict(out, SIDES[1]) is True
    assert bench_cpu.floor_verdict(out, SIDES[0]) is False


def test_a_level_passes_only_when_both_figures_are_within_the_target() -> None:
    assert bench_cpu.floor_verdict(_level(20.0, (0, 0), (24.0, 26.0)), SIDES[1]) is False
    assert bench_cpu.floor_verdict(_level(20.0, (0, 0), (26.0, 24.0)), SIDES[1]) is False


def test_a_missing_figure_or_floor_is_no_verdict() -> None:
    assert bench_cpu.floor_verdict(_level(20.0, (0, 0), (None, 24.0)), SIDES[1]) is None
    assert bench_cpu.floor_verdict(_level(None, (0, 0), (24.0, 24.0)), SIDES[1]) is None


def test_one_stream_holds_the_ttft_error_p99_to_its_target() -> None:
    got = bench_cpu.one_stream(_level(20.0, (1, 1), (1, 1)), SIDES)
    assert got["after"]["pass"] is True  # p99 0.5 ms
    assert got["before"]["pass"] is False  # p99 0.7 ms
    assert got["after"]["request_sent_ms"]["p99"] == 0.2


def test_the_summary_lists_each_level_and_the_one_stream_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    levels = {32: _level(20.0, (33.0, 34.0), (24.0, 25.0))}
    for level in levels.values():
        for side in SIDES:
            level[side.name]["figures"].update(
                event_err_ms=_dist(0.01, 0.02), ttft_err_ms=_dist(0.01, 0.02)
            )
            level[side.name]["client_bound"] = [False]
    single = bench_cpu.one_stream(_level(20.0, (1, 1), (1, 1)), SIDES)
    targets = bench_cpu.print_summary(levels, None, SIDES, single)
    assert [ok for _, ok, _ in targets] == [True, True]
    printed = capsys.readouterr().out
    assert "PASS  32 stream(s)" in printed and "1 stream: TTFT error p99" in printed


def test_the_warm_read_split_runs_through_the_recorder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import readpath_warm

    monkeypatch.setattr(readpath_warm, "ROUNDS", 1)
    monkeypatch.setattr(readpath_warm, "STREAMS", 2)
    readpath_warm.main()  # asserts each stream's 100 output events and its end
    got = json.loads(capsys.readouterr().out)
    assert set(got) == {
        "framing + SSE split",
        "JSON decode + provider parse + stamp",
        "read path, whole",
        "glue (sink, on_read)",
        readpath_warm.COMMON_STEP,
    }
    assert got["read path, whole"] > got["framing + SSE split"] > 0
    assert got[readpath_warm.COMMON_STEP] > 0


def test_the_warm_read_table_says_n_a_for_a_step_one_side_lacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench_cpu.print_warm_read(
        {"before": {"read path, whole": 3.5}, "after": {"read path, whole": 1.9, "one call": 0.4}},
        SIDES,
    )
    printed = capsys.readouterr().out
    assert "| read path, whole | 3.50 | 1.90 |" in printed
    assert "| one call | n/a | 0.40 |" in printed


def test_the_warm_read_table_says_n_a_for_a_side_it_could_not_probe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench_cpu.print_warm_read({"before": None, "after": {"read path, whole": 3.5}}, SIDES)
    assert "| read path, whole | n/a | 3.50 |" in capsys.readouterr().out
