"""The run folder: `records.jsonl` (appended and flushed per record), `manifest.json`, `lab.json`.

Nothing measured is ever lost: each record is written and flushed the moment it is complete,
and JSON documents are replaced atomically (write a temporary file, then rename).
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import socket
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from labkit.errors import RunError
from labkit.records import LabResults, RequestRecord
from labkit.scrub import scrub_json

__all__ = ["RunFolder", "host_info", "new_run_id", "package_versions"]

RECORDS = "records.jsonl"
MANIFEST = "manifest.json"
LAB = "lab.json"

_PACKAGES = ("labkit", "httpx", "pydantic", "tiktoken", "pandas", "openai", "anthropic")


def new_run_id(name: str) -> str:
    """`20261130-021500-<name>-<4 hex>`: sortable, unique, readable."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40] or "run"
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


def host_info() -> dict[str, Any]:
    """Where the run ran."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
    }


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(scrub_json(json.dumps(data, indent=2, default=str)) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class RunFolder:
    """One run's folder on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: TextIO | None = None
        self.manifest: dict[str, Any] = {}

    @classmethod
    def create(cls, out_dir: Path, run_id: str) -> RunFolder:
        """Make a new, empty run folder `out_dir/run_id`."""
        path = out_dir / run_id
        try:
            path.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise RunError(f"cannot create run folder {path}: {exc}") from None
        return cls(path)

    @classmethod
    def open_existing(cls, path: Path) -> RunFolder:
        """An existing run folder (for resume); its manifest must be readable."""
        folder = cls(path)
        manifest = path / MANIFEST
        if not manifest.is_file():
            raise RunError(f"{path} is not a run folder (no {MANIFEST})")
        try:
            folder.manifest = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunError(f"cannot read {manifest}: {exc}") from None
        return folder

    @property
    def run_id(self) -> str:
        """The folder's name is the run id."""
        return self.path.name

    @property
    def records_path(self) -> Path:
        """`records.jsonl`."""
        return self.path / RECORDS

    def append(self, record: RequestRecord) -> None:
        """Write one record and flush it to the OS before returning."""
        if self._records is None:
            self._records = self._open_for_append()
        self._records.write(scrub_json(record.to_json_line()) + "\n")
        self._records.flush()

    def _open_for_append(self) -> TextIO:
        # A run killed mid-write leaves a partial last line: cut it off so the next record
        # starts on a line of its own (the request it belonged to is redone on resume).
        path = self.records_path
        if path.exists() and path.stat().st_size:
            with path.open("rb+") as f:
                data = f.read()
                if not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        return path.open("a", encoding="utf-8")

    def read_records(self) -> list[RequestRecord]:
        """Every complete record; a truncated last line (a killed run) is skipped."""
        if not self.records_path.exists():
            return []
        out = []
        lines = self.records_path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(RequestRecord.from_json_line(line))
            except ValueError as exc:
                if n == len(lines):
                    continue  # cut off mid-write; the request will be redone on resume
                raise RunError(f"{self.records_path}:{n}: not a valid record: {exc}") from None
        return out

    def write_manifest(self, **updates: Any) -> None:
        """Merge `updates` into the manifest and rewrite it atomically."""
        self.manifest.update(updates)
        _write_json_atomic(self.path / MANIFEST, self.manifest)

    def write_lab(self, results: LabResults) -> Path:
        """Write `lab.json`."""
        path = self.path / LAB
        _write_json_atomic(path, results.model_dump(mode="json"))
        return path

    def close(self) -> None:
        """Close the records file."""
        if self._records is not None:
            self._records.close()
            self._records = None
