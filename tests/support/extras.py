"""Skip markers for tests that need one of labkit's optional extras.

`make test` installs the dev extra, which has them all; a checkout with only `pip install -e .`
(or a failed optional install) skips these tests with the reason instead of failing them.
"""

from __future__ import annotations

import importlib.util

import pytest

__all__ = ["requires_ray"]


def _installed(module: str) -> bool:
    """Whether `module` can be imported here (without importing it: Ray is slow to import)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or sys.modules[name] = None
        return False


#: Ray, the `ray` extra (`executor: ray`).
requires_ray = pytest.mark.skipif(
    not _installed("ray"), reason="needs Ray, the ray extra: pip install -e '.[ray]'"
)
