"""The example configs ship inside the package: `labkit init` writes them out, `labkit run
--example NAME` runs one, and the repository's configs/ is that same folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import labkit
from labkit.cli import app
from labkit.cli.examples import example_names, example_path, write_examples
from labkit.config import load_config

pytestmark = pytest.mark.unit

REPO = Path(labkit.__file__).parent.parent
EXAMPLES = Path(labkit.__file__).parent / "examples"


def test_the_repository_configs_are_the_shipped_examples() -> None:
    assert (REPO / "configs").resolve() == EXAMPLES.resolve()
    assert {"quickstart", "lab", "fake", "trace", "load", "sweep"} <= set(example_names())


def test_init_writes_every_example_and_its_traces(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["init", str(tmp_path / "configs")])
    assert result.exit_code == 0, result.output
    assert "quickstart.yaml" in result.output
    for name in example_names():
        written = tmp_path / "configs" / f"{name}.yaml"
        assert written.read_bytes() == (EXAMPLES / f"{name}.yaml").read_bytes()
    assert (tmp_path / "configs" / "traces" / "mini_mooncake.jsonl").is_file()
    # the written quickstart is a valid config as it stands
    assert load_config(tmp_path / "configs" / "quickstart.yaml").name == "quickstart"


def test_init_again_keeps_identical_files_and_refuses_changed_ones(tmp_path: Path) -> None:
    assert write_examples(tmp_path)
    assert write_examples(tmp_path) == []  # nothing to write
    changed = tmp_path / "quickstart.yaml"
    changed.write_text("name: mine\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 1
    assert "already there and different" in result.stderr and "Traceback" not in result.output
    assert changed.read_text(encoding="utf-8") == "name: mine\n"
    assert write_examples(tmp_path, overwrite=True) == [changed]
    assert changed.read_bytes() == (EXAMPLES / "quickstart.yaml").read_bytes()


def test_run_example_reads_the_installed_config() -> None:
    assert example_path("quickstart") == EXAMPLES / "quickstart.yaml"


def test_run_example_refuses_an_unknown_name_or_a_second_config() -> None:
    result = CliRunner().invoke(app, ["run", "--example", "nope"])
    assert result.exit_code == 1
    assert "no example 'nope'" in result.stderr and "quickstart" in result.stderr
    result = CliRunner().invoke(app, ["run", "x.yaml", "--example", "quickstart"])
    assert result.exit_code == 1
    assert "one of CONFIG, --example NAME or --resume" in result.stderr


def test_init_force_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("mine", encoding="utf-8")
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "quickstart.yaml").symlink_to(outside)
    (folder / "load.yaml").symlink_to(tmp_path / "dangling.yaml")  # would create it outside
    refused = CliRunner().invoke(app, ["init", str(folder)])
    assert refused.exit_code == 1 and "already there and different" in refused.stderr
    result = CliRunner().invoke(app, ["init", str(folder), "--force"])
    assert result.exit_code == 0, result.output
    assert outside.read_text(encoding="utf-8") == "mine"
    assert not (tmp_path / "dangling.yaml").exists()
    for name in ("quickstart.yaml", "load.yaml"):
        assert not (folder / name).is_symlink()
        assert (folder / name).read_bytes() == (EXAMPLES / name).read_bytes()


def test_init_refuses_a_linked_subfolder_in_one_line(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "traces").symlink_to(elsewhere, target_is_directory=True)
    for args in (["init", str(folder)], ["init", str(folder), "--force"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 1
        assert "traces is a symbolic link" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert list(elsewhere.iterdir()) == [] and list(folder.iterdir()) == [folder / "traces"]
