"""The run folder: `records.jsonl` (appended and flushed per record), `manifest.json`, `lab.json`.

Nothing measured is ever lost: each record is written and flushed the moment it is complete,
and JSON documents are replaced atomically (write a temporary file, then rename).

A folder is locked (``flock`` on ``.lock``) by the process that writes it, so two runs or
resumes can never measure the same requests twice; the kernel drops the lock when that
process dies. A write that fails (disk full, I/O error, read-only file system) raises
`RunError` naming the file and the reason; from then on the folder refuses more records and
its manifest says ``failed`` with that reason, written even on a full disk (`_failed`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import platform
import secrets
import socket
import sys
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from labkit.errors import RunError
from labkit.filenames import safe_filename
from labkit.manifest import FOLDER_FORMAT, HostInfo, Manifest
from labkit.records import LabResults, RequestRecord
from labkit.runner.sidecar import SidecarWriter
from labkit.safefiles import LockHeld, take_lock
from labkit.scrub import registered_secrets, scrub_json

__all__ = [
    "RunFolder",
    "finite_json",
    "host_info",
    "new_run_id",
    "package_versions",
    "safe_filename",
]

RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
LAB = "lab.json"
LOCK = ".lock"
RESERVE = ".reserve"
RESERVE_BYTES = 64 * 1024  # room for a final manifest (a few KiB) once the disk is full

_PACKAGES = ("labkit", "httpx", "pydantic", "tiktoken", "pandas", "openai", "anthropic")


def new_run_id(name: str) -> str:
    """`20261130-021500-<name>-<4 hex>`: sortable, unique, readable, a safe file name."""
    safe = safe_filename(name, max_len=40)
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{safe}-{secrets.token_hex(2)}"


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape a measurement."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def host_info() -> HostInfo:
    """Where the run ran."""
    return HostInfo(
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=sys.version.split()[0],
        cpu_count=os.cpu_count(),
    )


def finite_json(data: Any) -> Any:
    """`data` with every float that is not finite replaced by None: a server's `1e400` reads
    as infinity, and `Infinity`/`NaN` are not JSON (strict parsers reject the whole file)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite_json(v) for v in data]
    return data


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(finite_json(data), indent=2, default=str, allow_nan=False)
    try:
        tmp.unlink(missing_ok=True)  # a link left there is removed, never written through
        tmp.write_text(scrub_json(text) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _reason(exc: OSError) -> str:
    """An OSError in words: ``No space left on device (ENOSPC)``."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


# Folders this process holds locked: (st_dev, st_ino) → [lock fd, RunFolder objects using it].
# Within one process a folder may be opened again (a run, then its resume); flock keeps
# every other process out.
_held_locks: dict[tuple[int, int], list[int]] = {}


def _lock(path: Path) -> tuple[int, int]:
    """Take the folder's lock for this process, or raise RunError naming who holds it."""
    try:
        st = path.stat()
        key = (st.st_dev, st.st_ino)
        if key in _held_locks:
            _held_locks[key][1] += 1
            return key
        fd = take_lock(path / LOCK)
    except LockHeld as held:
        by = f" (pid {held.pid})" if held.pid else ""
        raise RunError(
            f"run folder {path} is in use by another labkit process{by}; "
            "wait for it to finish or stop it first"
        ) from None
    except OSError as exc:
        raise RunError(f"cannot lock run folder {path}: {_reason(exc)}") from None
    _held_locks[key] = [fd, 1]
    return key


def _unlock(key: tuple[int, int]) -> None:
    entry = _held_locks.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        del _held_locks[key]
        os.close(entry[0])  # closing the last descriptor drops the flock


class RunFolder:
    """One run's folder on disk, locked against other processes while this object lives
    (or until `release`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: BinaryIO | None = None
        self.manifest = Manifest()
        self.write_error: str | None = None
        """Why a write failed (file and reason); once set, the folder takes no more records."""
        self.on_write_error: Callable[[str], None] | None = None
        """Called once, with `write_error`, when a write first fails (the CLI stops the run)."""
        self._unlock: Callable[[], object] | None = None
        self.sidecar = SidecarWriter(path)
        """Has the columnar sidecar converted as records.jsonl grows (a child process)."""

    @classmethod
    def create(cls, out_dir: Path, run_id: str) -> RunFolder:
        """Make a new, empty run folder `out_dir/run_id`, locked."""
        path = out_dir / run_id
        try:
            path.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise RunError(f"cannot create run folder {path}: {_reason(exc)}") from None
        except ValueError:  # the only ValueError of mkdir: a NUL byte in the path
            raise RunError(
                f"cannot create run folder {str(path)!r}: a path may not contain a NUL byte"
            ) from None
        folder = cls(path)
        folder._take_lock()
        folder._make_reserve()
        return folder

    @classmethod
    def open_existing(cls, path: Path) -> RunFolder:
        """An existing run folder (for resume), locked; its manifest must be readable, of a
        format this labkit writes, and the folder free of symbolic links."""
        folder = cls(path)
        manifest = path / MANIFEST
        if not manifest.is_file():  # False for a path with a NUL byte, too
            raise RunError(f"{path} is not a run folder (no {MANIFEST})")
        _refuse_links(path)
        folder._take_lock()
        try:
            folder.manifest = _read_manifest(manifest)
            folder._make_reserve(required=True)
        except RunError:
            folder.release()
            raise
        return folder

    def _take_lock(self) -> None:
        key = _lock(self.path)
        self._unlock = weakref.finalize(self, _unlock, key)

    def _make_reserve(self, *, required: bool = False) -> None:
        """Set aside room for the last manifest: `RESERVE_BYTES`, or where the disk has less,
        `_least_reserve` (twice the manifest as it is, plus 4 KiB: a resume needs no more
        than that and the room for its remaining records). Without even that a resume
        (`required`) is refused with one line; a fresh run goes on without one."""
        reserve = self.path / RESERVE
        if reserve.is_file() and not reserve.is_symlink():
            return
        least = self._least_reserve()
        for size in (RESERVE_BYTES, least):
            try:
                _write_exclusive_then_rename(reserve, bytes(size))
                return
            except OSError as exc:
                failure = exc
        if required:
            raise RunError(
                f"cannot resume {self.path}: not even {least // 1024 + 1} KiB free on its disk "
                f"for the final manifest ({_reason(failure)}); free some space and resume again"
            )

    def _least_reserve(self) -> int:
        try:
            size = (self.path / MANIFEST).stat().st_size
        except OSError:
            size = 0
        return min(RESERVE_BYTES, 2 * size + 4096)

    def release(self) -> None:
        """Give up the lock (and the space reserve): another process may now resume it."""
        self.close()
        with contextlib.suppress(OSError):
            (self.path / RESERVE).unlink()
        if self._unlock is not None:
            self._unlock()

    @property
    def run_id(self) -> str:
        """The folder's name is the run id."""
        return self.path.name

    @property
    def records_path(self) -> Path:
        """`records.jsonl`."""
        return self.path / RECORDS

    def append(self, record: RequestRecord) -> None:
        """Write one record and hand it to the OS before returning.

        Raises RunError when the write fails; the folder then refuses every later record,
        so a partial line can only ever be the last one (resume cuts it off).
        """
        if self.write_error is not None:
            raise RunError(self.write_error)
        if registered_secrets():
            data = (scrub_json(record.to_json_line()) + "\n").encode("utf-8")
        else:  # nothing to scrub: pydantic's own bytes (the same, not decoded and encoded)
            data = record.to_json_bytes() + b"\n"
        try:
            if self._records is None:
                self._records = self._open_for_append()
            view = memoryview(data)
            while view:
                written = self._records.write(view)
                if not written:
                    raise OSError(errno.EIO, "the file took no bytes")
                view = view[written:]
        except OSError as exc:
            self._failed(self.records_path, exc)
        self.sidecar.grew(len(data))

    def _failed(self, path: Path, exc: OSError) -> None:
        """Remember the first failed write, make room for the manifest, and raise it: the
        small reserve file (``.reserve``) is given up so the manifest can still be written on
        a full disk."""
        message = f"cannot write {path}: {_reason(exc)}"
        if self.write_error is None:
            self.write_error = message
            if self._records is not None:
                with contextlib.suppress(OSError):
                    self._records.close()
                self._records = None
            with contextlib.suppress(OSError):
                (self.path / RESERVE).unlink()
            if self.on_write_error is not None:
                self.on_write_error(message)
        raise RunError(message) from None

    def _open_for_append(self) -> BinaryIO:
        # A run killed mid-write leaves a partial last line: cut it off so the next record
        # starts on a line of its own (the request it belonged to is redone on resume).
        path = self.records_path
        with contextlib.suppress(FileNotFoundError), path.open("rb+") as f:
            end = f.seek(0, os.SEEK_END)
            keep = end
            while keep > 0:
                start = max(0, keep - 65536)
                f.seek(start)
                chunk = f.read(keep - start)
                if keep == end and chunk.endswith(b"\n"):
                    break
                cut = chunk.rfind(b"\n")
                if cut >= 0:
                    keep = start + cut + 1
                    break
                keep = start
            if keep != end:
                f.truncate(keep)
        return path.open("ab", buffering=0)

    def read_records(
        self, on_skip: Callable[[str], None] | None = None, *, refuse_newer: bool = False
    ) -> list[RequestRecord]:
        """Every valid record on a finished line. A last line without its newline was cut
        off mid-write (a killed run, a full disk) and is skipped silently, even when what
        arrived parses: the next `append` removes it, so its request must be redone. Any
        other line that is not a record is skipped with `on_skip` told its number and why;
        with `refuse_newer` (a resume), a record with fields this labkit does not know is a
        RunError instead: its request was done, by a newer labkit."""
        try:
            if not self.records_path.exists():
                return []
            data = self.records_path.read_bytes()
        except OSError as exc:
            raise RunError(f"cannot read {self.records_path}: {_reason(exc)}") from None
        lines = data.splitlines()
        cut_off = len(lines) if data and not data.endswith(b"\n") else 0
        out = []
        for n, line in enumerate(lines, 1):
            if not line.strip() or n == cut_off:
                continue
            try:
                out.append(RequestRecord.from_json_line(line.decode("utf-8")))
            except ValidationError as exc:
                if refuse_newer and _unknown_fields(exc):
                    raise RunError(
                        f"{self.records_path}:{n} holds fields this labkit does not know (a "
                        "newer labkit wrote it); refusing to mix records: resume it with that "
                        "labkit"
                    ) from None
                if on_skip is not None:
                    first = str(exc).splitlines()[0]
                    on_skip(f"{self.records_path}:{n}: skipped, not a valid record ({first})")
            except ValueError as exc:  # UnicodeDecodeError included
                if on_skip is not None:
                    first = str(exc).splitlines()[0]
                    on_skip(f"{self.records_path}:{n}: skipped, not a valid record ({first})")
        return out

    def write_manifest(self, update: Manifest) -> None:
        """Merge the fields `update` sets into the manifest and rewrite it atomically.

        After a failed write, a status update becomes ``failed`` with the reason in
        ``failure``: a folder that lost a write never claims to be complete.
        """
        fields = {name: getattr(update, name) for name in update.model_fields_set}
        if self.write_error is not None and "status" in fields:
            fields |= {"status": "failed", "failure": self.write_error}
        self.manifest = self.manifest.model_copy(update=fields)
        path = self.path / MANIFEST
        try:
            _write_json_atomic(path, self.manifest.model_dump(mode="json", exclude_unset=True))
        except OSError as exc:
            self._failed(path, exc)

    def write_lab(self, results: LabResults) -> Path:
        """Write `lab.json`, the run's last file: the space reserve is no longer needed."""
        path = self.path / LAB
        try:
            _write_json_atomic(path, results.model_dump(mode="json"))
        except OSError as exc:
            self._failed(path, exc)
        with contextlib.suppress(OSError):
            (self.path / RESERVE).unlink()
        return path

    def close(self) -> None:
        """Close the records file."""
        if self._records is not None:
            self._records.close()
            self._records = None


def _refuse_links(path: Path) -> None:
    """RunError naming the first symbolic link inside run folder `path` (one unpacked from
    an archive may hold links out of it: a resume would append and write through them)."""
    for parent, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            inside = Path(parent) / name
            if inside.is_symlink():
                raise RunError(
                    f"{path} holds a symbolic link ({inside.relative_to(path)}); labkit does not "
                    "write into a run folder with links in it: remove the link first"
                )


def _unknown_fields(exc: ValidationError) -> bool:
    """Whether the data holds all this labkit needs plus fields it does not know: written by
    a newer labkit (a line that is no record at all misses fields too)."""
    return all(err["type"] == "extra_forbidden" for err in exc.errors())


def _read_manifest(path: Path) -> Manifest:
    """manifest.json, refused (RunError, one line) when unreadable or of a newer format."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise RunError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise RunError(f"cannot read {path}: not a JSON object")
    found = data.get("folder_format")
    version = data.get("labkit_version") or "unknown"
    if isinstance(found, int) and not isinstance(found, bool) and found > FOLDER_FORMAT:
        raise RunError(
            f"cannot resume {path.parent}: a newer labkit (version {version}) wrote it in folder "
            f"format {found}, this labkit writes format {FOLDER_FORMAT}; resume it with that labkit"
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        newer = (
            f" (fields this labkit does not know: a newer labkit, version {version}, may have "
            "written it; resume it with that labkit)"
            if _unknown_fields(exc)
            else ""
        )
        raise RunError(f"cannot read {path}: {where}: {first['msg']}{newer}") from None


def _write_exclusive_then_rename(path: Path, data: bytes) -> None:
    """`path` holding `data`, whole or not at all: written to a new temporary file (never a
    link) and renamed into place; on failure the temporary file is removed (its space too)."""
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
