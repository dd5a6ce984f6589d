"""labkit outside its repository: the built wheel, installed into a fresh virtualenv in a
temporary folder, runs the quickstart on the bundled model with one command.

The wheel is built from this tree (`pip wheel --no-deps`); its dependencies come from the
package index (or pip's cache), the dev extra not among them. llama-server and the model
come from labkit's cache (`labkit setup`), as they would for any user. Nothing of the
repository is on the path of the installed labkit: it runs with the temporary folder as its
working directory and reads its config from the package's own data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from labkit.local import ensure_setup

pytestmark = [pytest.mark.e2e, pytest.mark.real_server]

REPO = Path(__file__).resolve().parents[1]
_NOT_SOURCE = (".git", ".venv", "build", "dist", "results", "*.egg-info", "__pycache__", ".*_cache")
QUESTIONS = ["single", "token_ratio", "determinism", "prefill_decode", "attribution"]


def _clean_env() -> dict[str, str]:
    """The environment without this checkout's virtualenv or import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _check(args: list[str | Path], cwd: Path, timeout: float) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_built_wheel_runs_the_quickstart_outside_the_repository(tmp_path: Path) -> None:
    ensure_setup()  # llama-server and the model in labkit's cache, as `labkit setup` leaves them
    # Built from a copy of the source, so no build folder is left in the checkout and none
    # left there before can slip stale modules into the wheel.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    wheels = tmp_path / "wheels"
    _check(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", wheels, source],
        tmp_path,
        600,
    )
    (wheel,) = wheels.glob("labkit-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    _check([python, "-m", "pip", "install", "--quiet", wheel], tmp_path, 1200)

    work = tmp_path / "work"
    work.mkdir()
    where = _check(
        [
            python,
            "-c",
            "import importlib.util as u, labkit; print(labkit.__file__); "
            "print([m for m in ('ray', 'pytest', 'mypy') if u.find_spec(m)])",
        ],
        work,
        60,
    ).splitlines()
    assert Path(where[0]).is_relative_to(env_dir), where  # not this checkout
    assert where[1] == "[]"  # the main job needs none of the dev extra

    out = _check(
        [env_dir / "bin" / "labkit", "run", "--example", "quickstart", "--out", work / "runs"],
        work,
        900,
    )
    (run_dir,) = [p for p in (work / "runs").iterdir() if p.is_dir()]
    records = (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert records
    assert all(json.loads(line)["error"] is None for line in records)
    lab = json.loads((run_dir / "lab.json").read_text(encoding="utf-8"))
    assert [a["experiment"] for a in lab["answers"]] == QUESTIONS
    assert all(a["status"] == "ok" for a in lab["answers"])
    assert "run folder" in out

    _check([env_dir / "bin" / "labkit", "init"], work, 60)
    assert (work / "configs" / "quickstart.yaml").read_bytes() == (
        REPO / "labkit" / "examples" / "quickstart.yaml"
    ).read_bytes()
