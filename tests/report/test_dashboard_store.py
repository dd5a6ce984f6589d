"""`labkit dashboard` over a real DuckDB store: the rounds in the header, the cost a hand
computation gives from usage and the config's price table, the store found from a config's
``watch.store`` or a watch folder, the analysis handed the store's probes once; every bad
input one line and exit 1, no store ever created by looking at one."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

import labkit.analysis.observatory as observatory
from labkit.cli import app
from labkit.config import load_config
from labkit.figures.observatory import ObservatoryFigures
from labkit.records import StopReason, Usage
from labkit.runner import RunOptions, prepare_run, run_lab
from labkit.store import RoundInfo, open_store
from labkit.watch.state import WatchState, write_state
from tests.report.observatory_builders import observatory_figures
from tests.report.report_builders import write_run
from tests.support.records import T0, make_record

pytestmark = pytest.mark.unit

#: Made-up prices (labkit ships none): 1.00 in, 3.00 out per 1M tokens.
PRICES = [{"provider": "a", "model": "m", "date": T0.date().isoformat(), "input": 1.0,
           "output": 3.0}]  # fmt: skip


def _config(path: Path, store: str | None = None) -> Path:
    data: dict[str, Any] = {
        "name": "watch",
        "providers": [
            {"kind": "openai_compatible", "id": "a", "base_url": "http://x", "model": "m"}
        ],
        "experiments": [{"kind": "single"}],
        "prices": PRICES,
    }
    if store is not None:
        data["watch"] = {"store": store, "every": "10m"}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _store(path: Path | str, tmp: Path, rounds: int = 3) -> Path | str:
    """`rounds` watch rounds of four answered requests each (1,000 in, 100 out tokens)."""
    store = open_store(path)
    try:
        for i in range(rounds):
            run_id = f"round-{i}"
            records = [
                make_record(run_id=run_id, provider="a", model="m").model_copy(
                    update={
                        "usage": Usage(input_tokens=1000, output_tokens=100),
                        "stop_reason": StopReason.END,
                    }
                )
                for _ in range(4)
            ]
            run = write_run(tmp / run_id, records, manifest={"run_id": run_id})
            store.load_run(run, RoundInfo(watch_id="w", index=i, at=T0 + timedelta(minutes=10 * i)))
    finally:
        store.close()
    return path


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["dashboard", *args])


def test_the_store_gives_the_header_and_the_cost_by_hand(tmp_path: Path) -> None:
    db = _store(tmp_path / "obs.duckdb", tmp_path)
    page = tmp_path / "page.html"
    result = _invoke(str(db), "--config", str(_config(tmp_path / "c.yaml")), "-o", str(page))
    assert result.exit_code == 0, result.output
    assert "note:" not in result.output
    text = page.read_text(encoding="utf-8")
    assert "rounds: 3" in text
    assert "first round: 2025-01-01 00:00 UTC; last round: 2025-01-01 00:20 UTC" in text
    # each request: 1000 × 1.00 / 1e6 + 100 × 3.00 / 1e6 = 0.0013; twelve: 0.0156
    assert "0.001300" in text and "0.0156" in text
    assert "The store holds no rounds yet" not in text


def test_the_analysis_gets_the_stores_probes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[pd.DataFrame, str]] = []

    def compute(probes: pd.DataFrame, *, store: str, **_: Any) -> ObservatoryFigures:
        seen.append((probes, store))
        return observatory_figures(store=store)

    monkeypatch.setattr(observatory, "compute", compute)
    db = _store(tmp_path / "obs.duckdb", tmp_path)
    page = tmp_path / "page.html"
    result = _invoke(str(db), "-o", str(page))
    assert result.exit_code == 0, result.output
    assert "note:" not in result.output
    [(probes, store)] = seen
    assert len(probes) == 12 and list(probes["round.index"].unique()) == [0, 1, 2]
    assert store == str(db)
    text = page.read_text(encoding="utf-8")
    assert "rounds: 2016" in text  # the analysis's own count stands
    assert text.count('class="chart"') == 4


def _state(folder: Path, store: str, config: Path | None, watch_id: str = "w") -> None:
    write_state(
        folder,
        WatchState(watch_id=watch_id, name="watch", config_path=str(config) if config else None,
                   clock="simulated", anchor=T0, every_s=600.0, store=store),
    )  # fmt: skip


def test_the_store_is_found_from_a_config_or_a_watch_folder(tmp_path: Path) -> None:
    folder = tmp_path / "watch"
    folder.mkdir()
    _store(folder / "watch.duckdb", tmp_path)
    cfg = _config(tmp_path / "c.yaml", store=str(folder / "watch.duckdb"))
    _state(folder, str(folder / "watch.duckdb"), cfg)
    for args in (["--config", str(cfg)], ["--watch-folder", str(folder)]):
        page = tmp_path / "page.html"
        page.unlink(missing_ok=True)
        result = _invoke(*args, "-o", str(page))
        assert result.exit_code == 0, result.output
        text = page.read_text(encoding="utf-8")
        assert "rounds: 3" in text
        assert "0.001300" in text  # the config's prices: from --config, or the state's config


def test_a_watch_folder_shows_its_own_watch_only(tmp_path: Path) -> None:
    folder = tmp_path / "watch"
    folder.mkdir()
    _store(folder / "watch.duckdb", tmp_path)  # watch "w": three rounds
    _state(folder, "watch.duckdb", None, watch_id="other")  # relative: where the watch ran
    page = tmp_path / "page.html"
    result = _invoke("--watch-folder", str(folder), "-o", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "rounds: 0" in text and "The store holds no rounds yet" in text
    assert "Cost" not in text  # no config: no prices


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["missing.duckdb"], "missing.duckdb"),
        (["--watch-folder", "nowhere"], "nowhere: no such watch folder"),
        (["--watch-folder", "."], "no watch has run here (no state.json)"),
        (["--config", "c.yaml"], "results/watch-watch/watch.duckdb: no store there"),
        ([], "name a STORE"),
        (["mysql://u@h/db"], "is not a store"),
    ],
)
def test_bad_input_is_one_line_and_no_store_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    monkeypatch.chdir(tmp_path)
    _config(tmp_path / "c.yaml")
    result = _invoke(*args)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], result.output
    assert not (tmp_path / "missing.duckdb").exists()
    assert not (tmp_path / "results").exists()
    assert not (tmp_path / "dashboard.html").exists()


#: The truth server's sampling model, fast, stopping on its own after 6 tokens.
SAMPLING = {"first_token_ms": 0, "token_interval_ms": 0, "tokens": 6, "sampling": True}


def test_same_model_verdicts_come_from_the_watch_folders_rounds(tmp_path: Path) -> None:
    # A watch folder by hand: one round of a same_model probe set (a fake reference, a twin,
    # another model and another tokenizer behind one name), stored, with the watch's state.
    folder = tmp_path / "watch"
    config = tmp_path / "same.yaml"
    providers = {
        "ref": SAMPLING,
        "twin": SAMPLING,
        "other_model": {**SAMPLING, "model_salt": 7},
        "other_tokenizer": {**SAMPLING, "tokenizer": "thirds"},
    }
    data = {
        "name": "same",
        "providers": [
            {"id": pid, "kind": "fake", "model": "one-name", "schedule": schedule}
            for pid, schedule in providers.items()
        ],
        "experiments": [{"kind": "same_model", "reference": "ref", "warmup": 0}],
    }
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = asyncio.run(
        run_lab(prepare_run(load_config(config), RunOptions(out_dir=folder / "rounds")))
    )
    store = open_store(folder / "watch.duckdb")
    try:
        store.load_run(result.folder.path, RoundInfo(watch_id="w", index=0, at=T0))
    finally:
        store.close()
    _state(folder, str(folder / "watch.duckdb"), config)

    page = tmp_path / "page.html"
    out = _invoke("--watch-folder", str(folder), "-o", str(page))
    assert out.exit_code == 0, out.output
    blocks_text = page.read_text(encoding="utf-8")
    assert "Same model?" in blocks_text
    rows = re.findall(r"<tr><td>one-name</td><td>([a-z_]+)</td><td>ref</td><td>([^<]+)</td>",
                      blocks_text)  # fmt: skip
    assert dict(rows) == {
        "twin": "consistent",
        "other_model": "differs: distributions",
        "other_tokenizer": "differs: tokenizer",
    }

    # Without the folder the verdicts cannot be read: the page and the terminal say so.
    out = _invoke(str(folder / "watch.duckdb"), "--config", str(config), "-o", str(page))
    assert out.exit_code == 0, out.output
    assert "note: same-model verdicts are read from a watch folder's rounds" in out.output
    assert "No same-model probes in this store" in page.read_text(encoding="utf-8")
