"""`safe_filename`: any id or name as one harmless file name (a leaf module: imports nothing
of labkit, so the runner and the providers can both name their files with it)."""

from __future__ import annotations

import hashlib

__all__ = ["safe_filename"]


def safe_filename(text: str, max_len: int = 64) -> str:
    """`text` as one harmless file name: no separators, no ``..``, no leading dot.

    Letters, digits, ``-``, ``_`` and ``.`` are kept and anything else becomes ``_``. A name
    that had to change gets a short hash of the original, so two different ids (``a/b`` and
    ``a_b``) never share a file.
    """
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in text)
    if safe.startswith("."):
        safe = "_" + safe
    if safe == text and 0 < len(safe) <= max_len:
        return safe
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{safe[: max_len - 9] or '_'}-{digest}"
