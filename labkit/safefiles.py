"""Files written into a folder that may have come from anywhere (a run folder unpacked from
an archive can hold symbolic links: `report.md` pointing at a file of yours). labkit replaces
what is there and never writes through a link (a leaf module: imports only labkit.errors).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from labkit.errors import RunError

__all__ = ["report_subfolder", "write_new_file"]


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def write_new_file(path: Path, data: bytes | str) -> None:
    """Write `path` as a new file: a fresh temporary file beside it (created exclusively,
    so not a planted link), renamed over it. A link at `path` is replaced, never followed."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as an ordinary new file (mkstemp makes it 0600)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def report_subfolder(folder: Path) -> Path:
    """`folder`, after checking it is not a symbolic link (RunError, one line, if it is)."""
    if folder.is_symlink():
        raise RunError(
            f"{folder} is a symbolic link; labkit writes no file through a link (remove it and "
            "run the report again)"
        )
    return folder
