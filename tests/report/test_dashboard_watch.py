"""`labkit dashboard --watch-folder` on a real watch: twelve rounds of two simulated providers
on a compressed clock (an hour a round), each round a run loaded into the watch's DuckDB
store; the page says the watch's rounds and times, and gives every hour it watched, for each
provider, its median with its interval (none below the schedule's first-token wait)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labkit.cli import app
from labkit.config import load_config
from labkit.watch import read_state, run_watch

pytestmark = pytest.mark.integration

FAST = {"first_token_ms": 5, "token_interval_ms": 1, "tokens": 8}


def test_the_page_of_a_twelve_hour_watch(tmp_path: Path) -> None:
    config = tmp_path / "watch.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "pair",
                "output_dir": str(tmp_path / "results"),
                "providers": [
                    {"id": "steady", "kind": "fake", "model": "m", "schedule": FAST},
                    {
                        "id": "slow",
                        "kind": "fake",
                        "model": "m",
                        "schedule": {**FAST, "first_token_ms": 40},
                    },
                ],
                "experiments": [{"kind": "single", "repeats": 3, "warmup": 0}],
                "watch": {
                    "every": "1h",
                    "rounds": 12,
                    "clock": {"kind": "simulated", "start": "2026-01-05T00:00:00Z"},
                },
            }
        ),
        encoding="utf-8",
    )
    folder = tmp_path / "watch"
    result = run_watch(load_config(config), folder, config_path=str(config))
    assert result.rounds_run == 12
    state = read_state(folder)
    assert state is not None and all(r.loaded for r in state.rounds)

    page = tmp_path / "page.html"
    out = CliRunner().invoke(app, ["dashboard", "--watch-folder", str(folder), "-o", str(page)])
    assert out.exit_code == 0, out.output
    text = page.read_text(encoding="utf-8")
    assert "rounds: 12" in text
    assert "first round: 2026-01-05 00:00 UTC; last round: 2026-01-05 11:00 UTC" in text
    assert "providers: slow · m, steady · m" in text
    # the TTFT table: a row per watched hour, each provider's median with its interval
    ttft = text.split("TTFT (ms) by hour of the day:", 1)[1].split("</table>", 1)[0]
    hours = re.findall(r"<tr><td class=\"num\">(\d\d)</td>", ttft)
    assert hours == [f"{h:02d}" for h in range(12)]
    medians = re.findall(r"<td class=\"num\">([\d.,]+) \[([\d.,]+)–([\d.,]+)\]</td>", ttft)
    assert len(medians) == 12 * 2  # a median with its interval, two providers, every hour
    slow = [float(m[0].replace(",", "")) for i, m in enumerate(medians) if i % 2 == 0]
    steady = [float(m[0].replace(",", "")) for i, m in enumerate(medians) if i % 2 == 1]
    # the truth server holds slow's first token 40 ms and steady's 5 ms: no median below
    assert min(slow) >= 40 and min(steady) >= 5
    assert 'data-chart="obs_hour_of_day"' in text and 'data-chart="obs_split"' in text
