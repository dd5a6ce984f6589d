"""Building ``llama-server`` from the llama.cpp tree vendored in the ``llama-cpp-python`` sdist.

The build runs in a staging folder; the binary moves into ``<cache>/llama-server/<key>/``
together with its ``build.json`` marker only once ``llama-server --version`` runs, so a
half-finished build is never used. A file lock keeps concurrent setups from building twice.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path

from labkit.errors import SetupError
from labkit.local._common import (
    Backend,
    ProgressCallback,
    ServerBinary,
    cache_dir,
    file_lock,
    gpu_visible,
    now_iso,
    pip_download,
    run_logged,
    run_version,
    tail_lines,
    write_atomic,
)

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
"""The ``llama-cpp-python`` sdist whose ``vendor/llama.cpp`` tree labkit builds."""
# The vendored tree's git commit and build number. The extracted tree has no git metadata, so
# they are passed to CMake: the server then reports ``build_info`` "b1-0c1e570", not "b0-unknown".
LLAMA_CPP_COMMIT = "0c1e570"
LLAMA_CPP_BUILD_NUMBER = 1

# Parts of the llama.cpp tree the server build does not need (tools/ui is needed: it is embedded).
_SKIPPED_SOURCE_DIRS = frozenset(
    {"models", "docs", "tests", "benches", "examples", "media", ".git", "gguf-py", "pocs"}
)
_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD_NUMBER}",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
)
# x86 CPU features -> ggml CMake options. labkit builds for exactly the features this CPU
# reports instead of ``-march=native``: native also turns on AMX, whose kernels die with SIGILL
# on VMs that advertise AMX without enabling it (seen on these machines). AMX stays off.
_X86_FEATURES = (
    (("sse4_2",), "GGML_SSE42"),
    (("f16c",), "GGML_F16C"),
    (("fma",), "GGML_FMA"),
    (("bmi2",), "GGML_BMI2"),
    (("avx",), "GGML_AVX"),
    (("avx2",), "GGML_AVX2"),
    (("avx_vnni",), "GGML_AVX_VNNI"),
    (("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"), "GGML_AVX512"),
    (("avx512vbmi",), "GGML_AVX512_VBMI"),
    (("avx512_vnni",), "GGML_AVX512_VNNI"),
    (("avx512_bf16",), "GGML_AVX512_BF16"),
)
_PERCENT = re.compile(rb"^\[\s*(\d{1,3})%\]")


def _build_key(backend: Backend) -> str:
    return f"{LLAMA_CPP_PYTHON_VERSION}-{backend}"


def cached_build(backend: Backend) -> ServerBinary | None:
    """Our finished build, or None. Requires the completion marker and the binary."""
    folder = cache_dir() / "llama-server" / _build_key(backend)
    binary = folder / "llama-server"
    try:
        marker = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(marker, dict)
        or marker.get("version") != LLAMA_CPP_PYTHON_VERSION
        or marker.get("backend") != backend
        or not binary.is_file()
        or binary.stat().st_size != marker.get("size_bytes")
    ):
        return None
    # Built for CPU features this machine lacks (a cache copied to another host): rebuild.
    flags = _cpu_flags()
    if flags is not None and not set(marker.get("cpu_features") or ()) <= flags:
        return None
    return ServerBinary(path=binary, backend=backend, source="cache")


def build_server(backend: Backend, progress: ProgressCallback) -> ServerBinary:
    """Download the sdist, compile ``llama-server`` and install it into the cache."""
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise SetupError(
                f"building llama-server needs `{tool}` on PATH (Debian: apt-get install cmake "
                "g++), or pass an existing binary with --server / $LABKIT_LLAMA_SERVER"
            )
    root = cache_dir() / "llama-server"
    root.mkdir(parents=True, exist_ok=True)
    key = _build_key(backend)
    with file_lock(root / f".{key}.lock", progress, "building llama-server"):
        cached = cached_build(backend)  # another process may have finished meanwhile
        if cached is not None:
            return cached
        log_path = root / f"build-{key}.log"
        features = _cpu_features()
        staging = root / f".staging-{key}"
        shutil.rmtree(staging, ignore_errors=True)  # a half-finished earlier attempt
        staging.mkdir()
        with log_path.open("wb", buffering=0) as log:  # unbuffered: `tail -f` works
            log.write(f"# labkit build of llama-server {key}, {now_iso()}\n".encode())
            sdist = pip_download(
                # The sdist only; its build backend's own requirements may come as wheels
                # (`:all:` would also compile those, e.g. cmake, from source).
                [
                    "--no-binary",
                    "llama-cpp-python",
                    f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
                ],
                staging / "dl",
                log,
                log_path,
                progress,
                f"downloading llama.cpp source (llama-cpp-python {LLAMA_CPP_PYTHON_VERSION})",
            )
            progress("extracting llama.cpp source", None)
            source = _extract_llama_cpp(sdist, staging / "src")
            build_dir = staging / "build"
            progress(f"configuring llama.cpp ({backend})", None)
            cmake_flags = _cmake_flags(backend, features)
            run_logged(
                ["cmake", "-S", str(source), "-B", str(build_dir), *cmake_flags],
                log,
                log_path,
                "configuring llama.cpp with CMake",
            )
            stage = f"compiling llama-server ({backend}, {os.cpu_count() or 1} jobs)"
            progress(stage, 0.0)
            run_logged(
                [
                    "cmake",
                    "--build",
                    str(build_dir),
                    "--target",
                    "llama-server",
                    "-j",
                    str(os.cpu_count() or 1),
                ],
                log,
                log_path,
                "compiling llama-server",
                on_line=lambda line: report_percent(line, stage, progress),
            )
        built = build_dir / "bin" / "llama-server"
        installed = _install_build(built, backend, root, key, log_path, cmake_flags, features)
        shutil.rmtree(staging, ignore_errors=True)
        progress("llama-server built", 1.0)
        return installed


def _cpu_flags() -> set[str] | None:
    """The CPU feature flags from ``/proc/cpuinfo`` (None where there is none)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return None


def _cpu_features() -> list[str]:
    """The x86 features a build for this CPU uses (empty off x86 Linux: native build)."""
    flags = _cpu_flags()
    if flags is None or platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    return sorted({f for needed, _ in _X86_FEATURES if set(needed) <= flags for f in needed})


def _cmake_flags(backend: Backend, features: Sequence[str]) -> list[str]:
    flags = list(_CMAKE_FLAGS)
    if features:
        have = set(features)
        flags.append("-DGGML_NATIVE=OFF")
        flags += [f"-D{option}=ON" for needed, option in _X86_FEATURES if set(needed) <= have]
    if backend == "cuda":
        if shutil.which("nvcc") is None:
            raise SetupError("a CUDA build was asked for, but `nvcc` is not on PATH")
        archs = os.environ.get("LABKIT_CUDA_ARCHITECTURES") or (
            "native" if gpu_visible() else "all-major"
        )
        flags += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
    return flags


def report_percent(line: bytes, stage: str, progress: ProgressCallback) -> None:
    if match := _PERCENT.match(line):
        progress(stage, min(int(match.group(1)), 100) / 100)


def _install_build(
    built: Path,
    backend: Backend,
    root: Path,
    key: str,
    log_path: Path,
    cmake_flags: Sequence[str],
    features: Sequence[str],
) -> ServerBinary:
    """Check the fresh binary runs, then move it into place with its marker, atomically."""
    if not built.is_file():
        raise SetupError(f"the build produced no llama-server binary; see the log {log_path}")
    ok, output = run_version(built)
    if not ok:
        raise SetupError(
            f"the freshly built llama-server does not run ({tail_lines(output, 5)}); "
            f"see the log {log_path}"
        )
    final = root / key
    incoming = root / f".incoming-{key}"
    shutil.rmtree(incoming, ignore_errors=True)
    incoming.mkdir()
    binary = incoming / "llama-server"
    shutil.copy2(built, binary)
    marker = {
        "version": LLAMA_CPP_PYTHON_VERSION,
        "backend": backend,
        "build_info": output.strip()[:2000],
        "size_bytes": binary.stat().st_size,
        "built_at": now_iso(),
        "cmake_flags": list(cmake_flags),
        "cpu_features": list(features),
    }
    write_atomic(incoming / "build.json", json.dumps(marker, indent=2).encode())
    shutil.rmtree(final, ignore_errors=True)  # a stale folder without a valid marker
    os.replace(incoming, final)
    return ServerBinary(path=final / "llama-server", backend=backend, source="built")


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` (minus docs, models, tests...) from the sdist."""
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                parts = member.name.split("/")
                # <pkg-version>/vendor/llama.cpp/<rest...>
                if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"]:
                    continue
                if parts[3] in _SKIPPED_SOURCE_DIRS:
                    continue
                member.name = "/".join(parts[3:])
                tar.extract(member, dest, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise SetupError(f"could not extract llama.cpp from {sdist}: {exc}") from exc
    if not (dest / "CMakeLists.txt").is_file():
        raise SetupError(f"{sdist} does not contain vendor/llama.cpp")
    return dest
