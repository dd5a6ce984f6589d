"""manifest.json as typed models: the same keys as the untyped documents it replaced, so old
run folders resume and the report reads new ones as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.errors import RunError
from labkit.manifest import Manifest
from labkit.runner import RunOptions, prepare_resume, prepare_run
from labkit.runner.later import LaterReport
from labkit.runner.results import RunFolder
from labkit.runner.run import ProviderOutcome
from labkit.runner.scrape import ScrapeReport
from labkit.wire.readpath import READ_PATH

pytestmark = pytest.mark.unit

#: A manifest exactly as labkit wrote it before the models (a finished, resumed-later run).
OLD_MANIFEST: dict[str, Any] = {
    "run_id": "20261130-021500-old-ab12",
    "name": "old",
    "config_path": None,
    "config": {"name": "old", "providers": [{"id": "f", "kind": "fake", "model": "m"}]},
    "labkit_version": "0.1.0",
    "packages": {"labkit": "0.1.0", "openai": None},
    "host": {"hostname": "h", "platform": "Linux", "python": "3.11.9", "cpu_count": 2},
    "started_at": "2026-11-30T02:15:00+00:00",
    "ended_at": "2026-11-30T02:16:00+00:00",
    "status": "interrupted",
    "records": 4,
    "providers": {
        "f": {
            "kind": "fake",
            "model": "m",
            "status": "interrupted",
            "reason": None,
            "first_error": None,
            "requests": 4,
            "failed": 0,
            "server": {"build_info": "b1", "total_slots": 4, "n_ctx": None},
            "reports_server_timings": True,
            "server_metrics": {
                "url": "http://127.0.0.1:1/metrics",
                "file": "server-metrics-f.jsonl",
                "scrapes": 3,
                "failed": 1,
                "first_error": "boom",
            },
            "stats_later": None,
        }
    },
}


def _read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    return data


def test_an_old_manifest_keeps_every_key_and_value_through_a_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps(OLD_MANIFEST), encoding="utf-8")
    folder = RunFolder.open_existing(run_dir)
    folder.write_manifest(Manifest(status="running", resumed_at="2026-11-30T03:00:00+00:00"))
    folder.release()
    expected = {**OLD_MANIFEST, "status": "running", "resumed_at": "2026-11-30T03:00:00+00:00"}
    assert _read(run_dir) == expected


def test_a_fresh_run_writes_the_keys_it_always_wrote(tmp_path: Path) -> None:
    config = parse_config(
        {
            "name": "fresh",
            "providers": [{"id": "f", "kind": "fake", "model": "m"}],
            "experiments": [{"kind": "single", "prompts": ["hi"], "repeats": 1}],
        }
    )
    runner = prepare_run(config, RunOptions(out_dir=tmp_path))
    runner.folder.release()
    manifest = _read(runner.folder.path)
    assert list(manifest) == [
        "run_id",
        "name",
        "config_path",
        "config",
        "labkit_version",
        "packages",
        "host",
        "started_at",
        "ended_at",
        "status",
        "folder_format",
        "read_path",
    ]
    assert manifest["ended_at"] is None and manifest["status"] == "running"
    assert set(manifest["host"]) == {"hostname", "platform", "python", "cpu_count"}
    # the read path this process runs, every key written (tests/wire/test_readpath_switch.py
    # covers each value)
    assert manifest["read_path"] == READ_PATH.model_dump(mode="json")
    assert set(manifest["read_path"]) == {"implementation", "reason", "detail"}


def _resumable(tmp_path: Path, read_path: dict[str, Any] | None) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    experiments = [{"kind": "single", "prompts": ["hi"], "repeats": 1}]
    manifest = {**OLD_MANIFEST, "config": {**OLD_MANIFEST["config"], "experiments": experiments}}
    if read_path is not None:
        manifest["read_path"] = read_path
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (run_dir / "records.jsonl").write_text("", encoding="utf-8")
    return run_dir


def _other_read_path() -> dict[str, Any]:
    if READ_PATH.implementation == "c":
        return {"implementation": "python", "reason": "switched_off", "detail": "x"}
    return {"implementation": "c"}


def test_a_resume_on_another_read_path_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = _resumable(tmp_path, _other_read_path())
    with pytest.raises(RunError) as caught:
        prepare_resume(run_dir)
    message = str(caught.value)
    assert message.startswith(f"cannot resume {run_dir}: its records were measured on the ")
    assert f"this labkit runs the {READ_PATH.describe()} one" in message
    assert "LABKIT_READPATH" in message and "\n" not in message
    # and the folder is not left locked
    RunFolder.open_existing(run_dir).release()


@pytest.mark.parametrize("recorded", ["same", "none"])
def test_a_resume_on_the_same_read_path_or_an_unrecorded_one_goes_on(
    tmp_path: Path, recorded: str
) -> None:
    run_dir = _resumable(
        tmp_path, READ_PATH.model_dump(mode="json") if recorded == "same" else None
    )
    runner = prepare_resume(run_dir)
    runner.folder.release()
    # a folder from before the read path was recorded stays without one: its earlier
    # records' read path is not known
    assert _read(run_dir).get("read_path") == (
        READ_PATH.model_dump(mode="json") if recorded == "same" else None
    )


def test_a_provider_entry_has_every_key_even_when_unknown(tmp_path: Path) -> None:
    outcome = ProviderOutcome(id="f", kind="fake", model="m", status="ok", done=2)
    outcome.server = {"version": "1"}
    outcome.server_metrics = ScrapeReport(url="http://x/metrics", file="s.jsonl", scrapes=1)
    outcome.stats_later = LaterReport(file="p.jsonl", fetched=2)
    folder = RunFolder.create(tmp_path, "r")
    folder.write_manifest(Manifest(providers={"f": outcome.manifest_entry()}))
    folder.release()
    entry = _read(folder.path)["providers"]["f"]
    assert entry == {
        "kind": "fake",
        "model": "m",
        "status": "ok",
        "reason": None,
        "first_error": None,
        "requests": 2,
        "failed": 0,
        "server": {"version": "1"},
        "reports_server_timings": None,
        "server_metrics": {
            "url": "http://x/metrics",
            "file": "s.jsonl",
            "scrapes": 1,
            "failed": 0,
            "first_error": None,
        },
        "stats_later": {"file": "p.jsonl", "fetched": 2, "missing": 0, "first_error": None},
        "finished": False,
    }


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
        ({"status": "done"}, "status: Input should be"),
        ({"records": "many"}, "records: Input should be a valid integer"),
    ],
)
def test_a_manifest_of_another_shape_is_refused_in_one_line(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(json.dumps({**OLD_MANIFEST, **change}))
    with pytest.raises(RunError) as caught:
        RunFolder.open_existing(run_dir)
    message = str(caught.value)
    assert message.startswith(f"cannot read {run_dir / 'manifest.json'}: {words}")
    assert "\n" not in message
